// cpu::copy_run: the short-run byte copy of the CPU data-movement kernels (data_copy.h,
// data_cpu.cpp). Its own header, free of OpenMP, so that tests include it alone.
#pragma once

#include <cstddef>
#include <cstring>

namespace kiln::cpu {

// Copies n bytes from s to d (not overlapping). The data-movement kernels copy many short runs
// (a channels-last concatenation: each pixel's channels of each input, 64-256 bytes; a slice of
// a detection head's last axis: 8 bytes): a call to memcpy per run cost more than the bytes.
// Runs up to 256 bytes are copied inline, in 16-byte pieces (the last piece overlapping the one
// before it); longer ones by memcpy.
inline void copy_run(void* d, const void* s, size_t n) {
  auto* dst = static_cast<char*>(d);
  const auto* src = static_cast<const char*>(s);
  if (n > 256) {
    std::memcpy(dst, src, n);
  } else if (n >= 16) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) std::memcpy(dst + i, src + i, 16);
    if (i < n) std::memcpy(dst + n - 16, src + n - 16, 16);
  } else if (n >= 8) {
    std::memcpy(dst, src, 8);
    std::memcpy(dst + n - 8, src + n - 8, 8);
  } else if (n >= 4) {
    std::memcpy(dst, src, 4);
    std::memcpy(dst + n - 4, src + n - 4, 4);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = src[i];
  }
}

}  // namespace kiln::cpu
