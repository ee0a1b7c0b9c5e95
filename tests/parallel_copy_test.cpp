// ParallelCopier (serving/triton/parallel_copy.h), the Triton backend's input gather, without
// Triton: random segment lists copied byte-exactly with 0, 1 and 3 workers, the callback's ranges
// (each reported once its bytes are in place, together covering every byte exactly once), a
// throwing callback rethrown in the caller with the pool still usable, and callers on several
// threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "serving/triton/parallel_copy.h"

namespace kiln::triton {
namespace {

// A random job: segments of random sizes (zero, odd, small, up to several MB) taken from one
// source buffer and placed in one destination buffer in order, some touching the previous
// segment's end (the copier merges those in its callback ranges), some after a gap that must stay
// untouched.
struct Job {
  std::vector<uint8_t> src, dst;
  std::vector<CopySegment> segments;
  std::vector<size_t> dst_offset, src_offset;
  static constexpr uint8_t kUntouched = 0xA5;

  Job(std::mt19937_64& rng, int count, size_t max_bytes, bool many_small = false) {
    std::vector<size_t> sizes(static_cast<size_t>(count));
    for (size_t& n : sizes) {
      const int kind = static_cast<int>(rng() % 10);
      if (many_small) {
        n = rng() % 300;  // zero included
      } else if (kind == 0) {
        n = 0;
      } else if (kind < 4) {
        n = 1 + rng() % 4099;  // small, mostly odd
      } else if (kind < 8) {
        n = 1 + rng() % std::min<size_t>(max_bytes, 700 * 1024);
      } else {
        n = 1 + rng() % max_bytes;
      }
    }
    size_t s_total = 0, d_total = 0;
    for (size_t n : sizes) {
      src_offset.push_back(s_total);
      s_total += n + rng() % 3;
      const size_t gap = rng() % 3 == 0 ? 1 + rng() % 64 : 0;
      d_total += gap;
      dst_offset.push_back(d_total);
      d_total += n;
    }
    src.resize(s_total + 1);
    for (size_t i = 0; i < src.size(); i += 8) {
      const uint64_t v = rng();
      std::memcpy(src.data() + i, &v, std::min<size_t>(8, src.size() - i));
    }
    dst.assign(d_total + 1, kUntouched);
    for (size_t k = 0; k < sizes.size(); ++k)
      segments.push_back({dst.data() + dst_offset[k], src.data() + src_offset[k], sizes[k]});
  }

  size_t total() const {
    size_t t = 0;
    for (const CopySegment& s : segments) t += s.bytes;
    return t;
  }

  // Every segment's bytes equal their source; every byte outside the segments is untouched.
  ::testing::AssertionResult exact() const {
    std::vector<uint8_t> inside(dst.size(), 0);
    for (size_t k = 0; k < segments.size(); ++k) {
      const size_t n = segments[k].bytes;
      if (n && std::memcmp(dst.data() + dst_offset[k], src.data() + src_offset[k], n) != 0) {
        size_t at = 0;
        while (dst[dst_offset[k] + at] == src[src_offset[k] + at]) ++at;
        return ::testing::AssertionFailure()
               << "segment " << k << " of " << segments.size() << " (" << n << " bytes) differs at byte " << at;
      }
      std::fill(inside.begin() + static_cast<std::ptrdiff_t>(dst_offset[k]),
                inside.begin() + static_cast<std::ptrdiff_t>(dst_offset[k] + n), 1);
    }
    for (size_t i = 0; i < dst.size(); ++i) {
      if (!inside[i] && dst[i] != kUntouched) return ::testing::AssertionFailure() << "byte " << i << " written";
    }
    return ::testing::AssertionSuccess();
  }
};

ParallelCopier::Options options(size_t chunk, size_t min_parallel, size_t min_callback = 0) {
  ParallelCopier::Options o;
  o.chunk_bytes = chunk;
  o.min_parallel_bytes = min_parallel;
  o.min_callback_bytes = min_callback;
  return o;
}

TEST(ParallelCopy, RandomSegmentListsAreCopiedByteExactWith0_1And3Workers) {
  std::mt19937_64 rng(11);
  for (int workers : {0, 1, 3}) {
    // The backend's chunking, an odd chunk size (chunks end at odd offsets), and tiny chunks.
    for (const auto& o : {options(64 * 1024, 256 * 1024), options(12345, 0), options(1000, 0)}) {
      ParallelCopier copier(workers, o);
      uint64_t chunks = 0;
      for (int round = 0; round < 12; ++round) {
        Job job(rng, 1 + static_cast<int>(rng() % 24), 6 * 1024 * 1024);
        copier.copy(job.segments);
        ASSERT_TRUE(job.exact()) << workers << " workers, chunk " << o.chunk_bytes << ", round " << round;
        for (const CopySegment& seg : job.segments) chunks += (seg.bytes + o.chunk_bytes - 1) / o.chunk_bytes;
      }
      const ParallelCopier::Stats s = copier.stats();
      EXPECT_EQ(s.jobs, 12u);
      // Every chunk was claimed by exactly one thread (none skipped, none copied twice).
      EXPECT_EQ(s.chunks_by_caller + s.chunks_by_workers, chunks);
      if (workers == 0) {
        EXPECT_EQ(s.parallel_jobs, 0u);
        EXPECT_EQ(s.chunks_by_workers, 0u);
      }
    }
  }
}

TEST(ParallelCopy, ManySmallSegmentsAndEmptyJobs) {
  std::mt19937_64 rng(12);
  for (int workers : {0, 1, 3}) {
    ParallelCopier copier(workers, options(64 * 1024, 0));
    for (int round = 0; round < 10; ++round) {
      Job job(rng, 3000, 0, /*many_small=*/true);
      copier.copy(job.segments);
      ASSERT_TRUE(job.exact()) << workers << " workers, round " << round;
    }
    copier.copy(nullptr, 0);  // nothing to do
    std::vector<uint8_t> a(10, 1), b(10, 2);
    copier.copy({{b.data(), a.data(), 0}, {b.data() + 5, a.data(), 0}});  // only empty segments
    EXPECT_EQ(b, std::vector<uint8_t>(10, 2));
  }
}

TEST(ParallelCopy, SmallJobsAreCopiedByTheCallerAloneAndLargeOnesReachTheWorkers) {
  ParallelCopier copier(3);  // the default options: 64 KiB chunks, parallel from 256 KiB
  std::vector<uint8_t> src(200 * 1024, 7), dst(src.size());
  for (int i = 0; i < 20; ++i) copier.copy({{dst.data(), src.data(), src.size()}});
  EXPECT_EQ(dst, src);
  ParallelCopier::Stats s = copier.stats();
  EXPECT_EQ(s.parallel_jobs, 0u);
  EXPECT_EQ(s.chunks_by_workers, 0u);
  EXPECT_EQ(s.wakeups, 0u);
  // A large job is offered to the workers; they take part once awake (a loaded machine may keep
  // them off the cores for a while, hence the repeats).
  std::vector<uint8_t> big_src(16 << 20), big_dst(big_src.size());
  for (size_t i = 0; i < big_src.size(); ++i) big_src[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  for (int i = 0; i < 200 && copier.stats().chunks_by_workers == 0; ++i) {
    copier.wake();
    copier.copy({{big_dst.data(), big_src.data(), big_src.size()}});
    ASSERT_EQ(big_dst, big_src);
  }
  s = copier.stats();
  EXPECT_GT(s.parallel_jobs, 0u);
  EXPECT_GT(s.chunks_by_workers, 0u);
}

// What the callback sees: ranges in order whose bytes are already in place when reported, each
// within contiguous destination memory, covering every byte of every segment exactly once; with
// min_callback_bytes, only a range that ends at a gap or at the end of the job is smaller.
TEST(ParallelCopy, TheCallbackSeesEveryChunkOnceInPlaceAndInOrder) {
  std::mt19937_64 rng(13);
  for (int workers : {0, 1, 3}) {
    for (const auto& o : {options(64 * 1024, 0), options(4099, 0, 100 * 1024), options(64 * 1024, 256 * 1024, 1)}) {
      ParallelCopier copier(workers, o);
      for (int round = 0; round < 10; ++round) {
        Job job(rng, 1 + static_cast<int>(rng() % 16), 3 * 1024 * 1024);
        std::vector<uint8_t> seen(job.dst.size(), 0);
        std::vector<std::pair<size_t, size_t>> ranges;  // (offset in dst, bytes)
        std::string problem;
        const std::thread::id caller = std::this_thread::get_id();
        copier.copy(job.segments, [&](uint8_t* p, size_t n) {
          if (std::this_thread::get_id() != caller) problem = "callback on a worker";
          const size_t at = static_cast<size_t>(p - job.dst.data());
          if (n == 0 || at + n > job.dst.size()) problem = "range out of bounds";
          ranges.emplace_back(at, n);
          for (size_t i = at; i < at + n && i < seen.size(); ++i) ++seen[i];
        });
        ASSERT_EQ(problem, "");
        ASSERT_TRUE(job.exact());
        // Exactly the segments' bytes, once each.
        std::vector<uint8_t> want(job.dst.size(), 0);
        for (size_t k = 0; k < job.segments.size(); ++k)
          for (size_t i = 0; i < job.segments[k].bytes; ++i) want[job.dst_offset[k] + i] = 1;
        ASSERT_EQ(seen, want) << workers << " workers, round " << round;
        // In order; merged where contiguous; small only before a gap or at the end.
        for (size_t r = 0; r < ranges.size(); ++r) {
          const size_t end = ranges[r].first + ranges[r].second;
          if (r + 1 < ranges.size()) {
            ASSERT_LE(end, ranges[r + 1].first);
            const bool gap = end != ranges[r + 1].first;
            if (!gap) {
              EXPECT_GE(ranges[r].second, std::max<size_t>(o.min_callback_bytes, 1));
            }
          }
        }
      }
    }
  }
}

// The callback is the caller's: when it reports, the bytes it names are in place (a device copy
// queued from it reads them), even while workers still copy later chunks.
TEST(ParallelCopy, ReportedBytesAreInPlaceWhenReported) {
  std::mt19937_64 rng(14);
  ParallelCopier copier(3, options(16 * 1024, 0));
  for (int round = 0; round < 30; ++round) {
    Job job(rng, 1 + static_cast<int>(rng() % 6), 4 * 1024 * 1024);
    bool ok = true;
    copier.copy(job.segments, [&](uint8_t* p, size_t n) {
      const size_t at = static_cast<size_t>(p - job.dst.data());
      for (size_t k = 0; k < job.segments.size(); ++k) {
        const size_t b = job.dst_offset[k], e = b + job.segments[k].bytes;
        const size_t lo = std::max(b, at), hi = std::min(e, at + n);
        if (lo < hi && std::memcmp(job.dst.data() + lo, job.src.data() + job.src_offset[k] + (lo - b), hi - lo) != 0)
          ok = false;
      }
    });
    ASSERT_TRUE(ok) << "round " << round;
  }
}

TEST(ParallelCopy, AThrowingCallbackIsRethrownInTheCallerAndThePoolStaysUsable) {
  std::mt19937_64 rng(15);
  for (int workers : {0, 1, 3}) {
    ParallelCopier copier(workers, options(8 * 1024, 0));
    for (int round = 0; round < 40; ++round) {
      Job job(rng, 1 + static_cast<int>(rng() % 4), 2 * 1024 * 1024);
      if (job.total() == 0) continue;
      const int throw_at = static_cast<int>(rng() % 3);
      int calls = 0;
      bool threw = false;
      try {
        copier.copy(job.segments, [&](uint8_t*, size_t) {
          if (calls++ == throw_at) throw std::runtime_error("queueing the device copy failed");
        });
      } catch (const std::runtime_error& e) {
        threw = true;
        EXPECT_STREQ(e.what(), "queueing the device copy failed");
      }
      EXPECT_EQ(threw, calls > throw_at) << workers << " workers, round " << round;
      // Usable afterwards: the next job is copied exactly, with every range reported.
      Job next(rng, 1 + static_cast<int>(rng() % 4), 2 * 1024 * 1024);
      size_t reported = 0;
      copier.copy(next.segments, [&](uint8_t*, size_t n) { reported += n; });
      ASSERT_TRUE(next.exact()) << workers << " workers, round " << round;
      EXPECT_EQ(reported, next.total());
    }
  }
}

TEST(ParallelCopy, BackToBackCallsFromTwoThreadsOnTwoPools) {
  constexpr int kCalls = 150;
  std::atomic<int> failures{0};
  auto caller = [&](uint64_t seed, ParallelCopier& copier) {
    std::mt19937_64 rng(seed);
    for (int i = 0; i < kCalls; ++i) {
      Job job(rng, 1 + static_cast<int>(rng() % 8), 1536 * 1024);
      size_t reported = 0;
      copier.copy(job.segments, [&](uint8_t*, size_t n) { reported += n; });
      if (!job.exact() || reported != job.total()) failures.fetch_add(1);
    }
  };
  ParallelCopier a(2, options(64 * 1024, 128 * 1024)), b(3, options(32 * 1024, 0));
  std::thread ta(caller, 21, std::ref(a)), tb(caller, 22, std::ref(b));
  ta.join();
  tb.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(a.stats().jobs, static_cast<uint64_t>(kCalls));
  EXPECT_EQ(b.stats().jobs, static_cast<uint64_t>(kCalls));
}

TEST(ParallelCopy, CallsOnOnePoolFromTwoThreadsRunOneAtATime) {
  ParallelCopier copier(2, options(32 * 1024, 0));
  std::atomic<int> failures{0}, inside{0};
  auto caller = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (int i = 0; i < 60; ++i) {
      Job job(rng, 1 + static_cast<int>(rng() % 6), 1024 * 1024);
      copier.copy(job.segments, [&](uint8_t*, size_t) {
        if (inside.fetch_add(1) != 0) failures.fetch_add(1);
        inside.fetch_sub(1);
      });
      if (!job.exact()) failures.fetch_add(1);
    }
  };
  std::thread t1(caller, 31), t2(caller, 32);
  t1.join();
  t2.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ParallelCopy, PoolsAreJoinedWhileAwakeAsleepOrJustWoken) {
  std::vector<uint8_t> src(512 * 1024, 3), dst(src.size());
  for (int i = 0; i < 50; ++i) {
    ParallelCopier copier(3, options(64 * 1024, 0));
    if (i % 3 == 1) copier.copy({{dst.data(), src.data(), src.size()}});  // awake, spinning
    if (i % 3 == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // asleep
      copier.wake();
    }
  }
  EXPECT_EQ(dst, src);
}

}  // namespace
}  // namespace kiln::triton
