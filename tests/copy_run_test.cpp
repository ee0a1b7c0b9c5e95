// cpu::copy_run (src/backends/cpu/copy_run.h), the short-run copy of the concatenation, slice,
// padding, tile and expand kernels: every length from 0 to 300 bytes (the inline pieces: 1-3, 4-7,
// 8-15 and 16-256 bytes with an overlapping last piece) and longer ones (memcpy), at every
// alignment of source and destination within 16 bytes; the bytes around the destination stay
// untouched.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "src/backends/cpu/copy_run.h"

namespace kiln {
namespace {

TEST(CopyRun, CopiesExactlyTheRunAtEveryLengthAndAlignment) {
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 300; ++n) lengths.push_back(n);
  for (size_t n : {511, 512, 1000, 4099}) lengths.push_back(n);
  constexpr size_t kGuard = 32;
  std::vector<uint8_t> src(4099 + 2 * kGuard), dst(4099 + 2 * kGuard);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  for (size_t n : lengths) {
    for (size_t s_off = 0; s_off < 16; s_off += 3) {
      for (size_t d_off = 0; d_off < 16; d_off += 5) {
        std::fill(dst.begin(), dst.end(), uint8_t{0xA5});
        cpu::copy_run(dst.data() + kGuard + d_off, src.data() + s_off, n);
        for (size_t i = 0; i < dst.size(); ++i) {
          const bool inside = i >= kGuard + d_off && i < kGuard + d_off + n;
          const uint8_t want = inside ? src[s_off + (i - kGuard - d_off)] : uint8_t{0xA5};
          ASSERT_EQ(dst[i], want) << "length " << n << ", source offset " << s_off << ", destination offset " << d_off
                                  << ", byte " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kiln
