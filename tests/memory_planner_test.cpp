// Tests of the activation memory planner (src/plan/memory_planner.h): reuse by liveness, no
// overlap between buffers alive at the same time (checked by brute force on random requests),
// peak bounds, alignment and determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "kiln/error.h"
#include "src/plan/memory_planner.h"

namespace kiln {
namespace {

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Independent checks of a plan against its requests; returns a description of the first problem.
std::string check_plan(const std::vector<BufferRequest>& reqs, const MemoryPlan& plan, uint64_t alignment) {
  if (plan.offsets.size() != reqs.size()) return "wrong number of offsets";
  uint64_t naive = 0, max_end = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    naive += round_up(reqs[i].size, alignment);
    if (plan.offsets[i] % alignment != 0) return "offset " + std::to_string(i) + " is not aligned";
    max_end = std::max(max_end, plan.offsets[i] + reqs[i].size);
  }
  if (plan.naive != naive) return "naive is " + std::to_string(plan.naive) + ", expected " + std::to_string(naive);
  if (plan.peak < max_end) return "a buffer ends past the peak";
  if (plan.peak > plan.naive) return "peak above naive";
  for (size_t i = 0; i < reqs.size(); ++i) {
    for (size_t j = i + 1; j < reqs.size(); ++j) {
      const bool live_together = reqs[i].first_use <= reqs[j].last_use && reqs[j].first_use <= reqs[i].last_use;
      if (!live_together || reqs[i].size == 0 || reqs[j].size == 0) continue;
      const uint64_t a0 = plan.offsets[i], a1 = a0 + reqs[i].size;
      const uint64_t b0 = plan.offsets[j], b1 = b0 + reqs[j].size;
      if (a0 < b1 && b0 < a1) return "buffers " + std::to_string(i) + " and " + std::to_string(j) + " overlap";
    }
  }
  return "";
}

// The largest total (aligned) size alive at any one step: no valid plan can need less.
uint64_t live_lower_bound(const std::vector<BufferRequest>& reqs, uint64_t alignment) {
  int last_step = 0;
  for (const auto& r : reqs) last_step = std::max(last_step, r.last_use);
  uint64_t best = 0;
  for (int step = 0; step <= last_step; ++step) {
    uint64_t live = 0;
    for (const auto& r : reqs) {
      if (r.first_use <= step && step <= r.last_use) live += round_up(r.size, alignment);
    }
    best = std::max(best, live);
  }
  return best;
}

TEST(MemoryPlanner, ChainOfTenBuffersReusesTwo) {
  // Layer i writes buffer i and layer i+1 reads it: only two are ever alive together.
  std::vector<BufferRequest> reqs;
  for (int i = 0; i < 10; ++i) reqs.push_back({1000, i, i + 1});
  const MemoryPlan plan = plan_memory(reqs, 256);
  EXPECT_EQ(check_plan(reqs, plan, 256), "");
  EXPECT_EQ(plan.naive, 10u * 1024u);
  EXPECT_EQ(plan.peak, 2u * 1024u);
}

TEST(MemoryPlanner, DisjointLifetimesShareOneSlot) {
  std::vector<BufferRequest> reqs = {{4096, 0, 0}, {512, 1, 1}, {4000, 2, 2}, {100, 3, 3}};
  const MemoryPlan plan = plan_memory(reqs, 256);
  EXPECT_EQ(check_plan(reqs, plan, 256), "");
  EXPECT_EQ(plan.peak, 4096u);
  for (uint64_t off : plan.offsets) EXPECT_EQ(off, 0u);
}

TEST(MemoryPlanner, AllAliveNeedsTheSum) {
  std::vector<BufferRequest> reqs = {{300, 0, 5}, {700, 1, 5}, {10, 2, 5}};
  const MemoryPlan plan = plan_memory(reqs, 64);
  EXPECT_EQ(check_plan(reqs, plan, 64), "");
  EXPECT_EQ(plan.peak, 320u + 704u + 64u);
}

TEST(MemoryPlanner, SmallBufferFillsAGap) {
  // Two big long-lived buffers and a short one B stacked above them; D, alive after B, reuses
  // B's slot instead of growing the arena.
  std::vector<BufferRequest> reqs = {{1024, 0, 10}, {512, 0, 2}, {1024, 0, 10}, {256, 4, 6}};
  const MemoryPlan plan = plan_memory(reqs, 256);
  EXPECT_EQ(check_plan(reqs, plan, 256), "");
  EXPECT_EQ(plan.peak, 2048u + 512u);
}

TEST(MemoryPlanner, PicksTheSmallestGapThatFits) {
  // A, B and C stay alive; G1 and G2 die early and leave gaps of 1024 and 512 bytes between them.
  // D (400 bytes, alive later) goes into the 512-byte gap, keeping the large gap whole.
  std::vector<BufferRequest> reqs = {{1024, 0, 10}, {1024, 0, 1}, {1024, 0, 10},
                                     {512, 0, 1},   {512, 0, 10}, {400, 5, 6}};
  const MemoryPlan plan = plan_memory(reqs, 256);
  EXPECT_EQ(check_plan(reqs, plan, 256), "");
  EXPECT_EQ(plan.offsets, (std::vector<uint64_t>{0, 1024, 2048, 3072, 3584, 3072}));
  EXPECT_EQ(plan.peak, 4096u);
}

TEST(MemoryPlanner, EmptyAndZeroSized) {
  const MemoryPlan none = plan_memory({}, 256);
  EXPECT_EQ(none.peak, 0u);
  EXPECT_EQ(none.naive, 0u);
  std::vector<BufferRequest> reqs = {{0, 0, 3}, {100, 1, 2}};
  const MemoryPlan plan = plan_memory(reqs, 256);
  EXPECT_EQ(check_plan(reqs, plan, 256), "");
  EXPECT_EQ(plan.peak, 256u);
}

TEST(MemoryPlanner, RejectsBadInput) {
  EXPECT_THROW(plan_memory({{100, 3, 1}}, 256), Error);
  EXPECT_THROW(plan_memory({{100, 0, 1}}, 100), Error);
}

TEST(MemoryPlanner, RandomRequestsNeverOverlap) {
  std::mt19937 rng(1234);
  const uint64_t alignments[] = {1, 16, 64, 256};
  for (int c = 0; c < 1000; ++c) {
    const int n = std::uniform_int_distribution<int>(1, 40)(rng);
    const int steps = std::uniform_int_distribution<int>(1, 30)(rng);
    std::vector<BufferRequest> reqs;
    for (int i = 0; i < n; ++i) {
      BufferRequest r;
      // Mostly varied sizes, some repeated ones (ties) and some zeros.
      const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
      r.size = kind == 0 ? 0 : kind == 1 ? 512 : std::uniform_int_distribution<uint64_t>(1, 100000)(rng);
      r.first_use = std::uniform_int_distribution<int>(0, steps - 1)(rng);
      r.last_use = r.first_use + std::uniform_int_distribution<int>(0, steps / 3)(rng);
      reqs.push_back(r);
    }
    const uint64_t alignment = alignments[c % 4];
    const MemoryPlan plan = plan_memory(reqs, alignment);
    ASSERT_EQ(check_plan(reqs, plan, alignment), "") << "case " << c;
    ASSERT_GE(plan.peak, live_lower_bound(reqs, alignment)) << "case " << c;
    // Deterministic: the same requests give the same plan.
    const MemoryPlan again = plan_memory(reqs, alignment);
    ASSERT_EQ(plan.offsets, again.offsets);
    ASSERT_EQ(plan.peak, again.peak);
  }
}

TEST(MemoryPlanner, ReuseKeepsPeakNearTheLiveMaximum) {
  // A long chain with a few long-lived skip buffers (a ResNet-like pattern): the plan should be
  // close to the lower bound, far from naive.
  std::vector<BufferRequest> reqs;
  for (int i = 0; i < 60; ++i) reqs.push_back({uint64_t(4096) << (i % 3), i, i + 1});
  for (int i = 0; i < 60; i += 6) reqs.push_back({8192, i, i + 5});
  const MemoryPlan plan = plan_memory(reqs, 256);
  EXPECT_EQ(check_plan(reqs, plan, 256), "");
  const uint64_t bound = live_lower_bound(reqs, 256);
  EXPECT_LE(plan.peak, bound * 3 / 2);
  EXPECT_LT(plan.peak * 5, plan.naive);
}

}  // namespace
}  // namespace kiln
