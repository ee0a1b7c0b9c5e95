// An execution context's device memory (src/engine/context_memory.h) on the CPU backend: the
// layout [arena | workspace | flags], growth of kStatic memory (and the generation that tells
// plans and graphs their pointers moved), user-managed memory's checks and its extra workspace.
// Also the I/O bindings (src/engine/bindings.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/error.h"
#include "src/engine/bindings.h"
#include "src/engine/context_memory.h"

namespace kiln {
namespace {

Backend& cpu() { return get_backend(DeviceType::kCPU); }

TEST(ContextDeviceMemory, StaticMemoryIsSizedForTheProfileAndGrowsOnlyWhenNeeded) {
  ContextDeviceMemory m(cpu(), ContextMemory::kStatic, 40);
  const uint64_t allocations = cpu().allocation_count();
  m.reserve_for_profile(1000);
  EXPECT_EQ(m.arena_bytes(), 1024u);
  EXPECT_EQ(m.allocations(), 2u) << "the arena and the error flags";
  const PlanMemory v = m.view();
  ASSERT_NE(v.arena, nullptr);
  ASSERT_NE(v.error_flags, nullptr);
  EXPECT_EQ(v.workspace, nullptr);
  m.ensure(512, 0, "test");  // fits: nothing moves
  EXPECT_EQ(m.view().generation, v.generation);
  EXPECT_EQ(m.allocations(), 2u);
  m.ensure(1024, 300, "test");  // workspace needed: a workspace buffer, the arena stays
  EXPECT_NE(m.view().generation, v.generation);
  EXPECT_EQ(m.view().arena, v.arena) << "growing the workspace must not move the activations";
  EXPECT_GE(m.view().workspace_bytes, 300u);
  EXPECT_EQ(m.allocations(), 3u);
  const uint64_t gen = m.view().generation;
  m.ensure(1024, 256, "test");
  EXPECT_EQ(m.view().generation, gen);
  m.ensure(4096, 0, "test");  // a larger arena
  EXPECT_EQ(m.arena_bytes(), 4096u);
  EXPECT_NE(m.view().generation, gen);
  EXPECT_EQ(cpu().allocation_count() - allocations, 4u) << "counted through the backend";
}

TEST(ContextDeviceMemory, UserManagedMemoryIsCheckedAndNeverGrown) {
  ContextDeviceMemory m(cpu(), ContextMemory::kUserManaged, 40);
  m.reserve_for_profile(1000);
  EXPECT_EQ(m.allocations(), 0u);
  EXPECT_THROW(m.ensure(512, 0, "input shapes x:1"), Error) << "no memory given yet";
  std::vector<uint8_t> storage(4096 + 256);
  auto* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(storage.data()) + 255) / 256 * 256);
  try {
    m.set_user_memory(base, 1000, 2048, 0);
    ADD_FAILURE() << "accepted too little memory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2048"), std::string::npos) << e.what();
  }
  EXPECT_THROW(m.set_user_memory(base + 8, 4096, 2048, 0), Error) << "unaligned";
  m.set_user_memory(base, 4096, 2048, 0);
  EXPECT_EQ(m.view().arena, base);
  EXPECT_EQ(m.view().workspace, base + 1024);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(m.view().error_flags), base + 4096 - 256);
  EXPECT_EQ(m.view().workspace_bytes, 4096u - 1024 - 256);
  try {
    m.ensure(2048, 0, "input shapes x:9");
    ADD_FAILURE() << "a user-managed arena grew";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input shapes x:9"), std::string::npos) << e.what();
  }
  m.ensure(1024, 8192, "input shapes x:2");  // more workspace than reserved: its own buffer
  EXPECT_EQ(m.allocations(), 1u);
  EXPECT_GE(m.view().workspace_bytes, 8192u);
  EXPECT_EQ(m.view().arena, base) << "the caller's arena stays";
  ContextDeviceMemory owned(cpu(), ContextMemory::kStatic, 0);
  EXPECT_THROW(owned.set_user_memory(base, 4096, 0, 0), Error);
}

TEST(Bindings, GenerationChangesOnlyWithAnAddress) {
  std::vector<TensorInfo> io(2);
  io[0].name = "x";
  io[1].name = "y";
  io[1].mode = TensorIOMode::kOutput;
  Bindings b(io);
  const uint64_t g0 = b.generation();
  int v = 0;
  b.set(0, &v);
  EXPECT_NE(b.generation(), g0);
  const uint64_t g1 = b.generation();
  b.set(0, &v);
  EXPECT_EQ(b.generation(), g1) << "the same address again changes nothing";
  EXPECT_EQ(b.get(0), &v);
  try {
    b.check({0, 1});
    ADD_FAILURE() << "accepted an unbound output";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("output 'y'"), std::string::npos) << e.what();
  }
  b.check({0});
}

}  // namespace
}  // namespace kiln
