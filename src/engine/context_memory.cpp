// An execution context's device memory (context_memory.h).
#include "src/engine/context_memory.h"

#include <algorithm>

#include "kiln/error.h"
#include "kiln/logger.h"

namespace kiln {

ContextDeviceMemory::ContextDeviceMemory(Backend& backend, ContextMemory mode, uint64_t error_flag_bytes)
    : backend_(backend), mode_(mode), flags_(memory_granule(error_flag_bytes)) {}

void ContextDeviceMemory::reserve_for_profile(uint64_t arena, const std::string& what) {
  arena = memory_granule(arena);
  if (mode_ == ContextMemory::kUserManaged) {
    arena_ = arena;
    if (base_) layout(base_, size_);
    return;
  }
  grow_static(std::max(arena, arena_), view_.workspace_bytes, what);
}

void ContextDeviceMemory::set_user_memory(void* memory, uint64_t size, uint64_t required, int profile) {
  if (mode_ != ContextMemory::kUserManaged) {
    throw Error(
        "set_device_memory: this context owns its device memory (it was created with ContextMemory::kStatic); "
        "create it with Engine::create_execution_context(ContextMemory::kUserManaged) to give it memory");
  }
  if (!memory) throw Error("set_device_memory: the memory is null");
  if (reinterpret_cast<uintptr_t>(memory) % 256 != 0) {
    throw Error("set_device_memory: the memory must be 256-byte aligned (cudaMalloc's is)");
  }
  if (size < required) {
    throw Error("set_device_memory: " + std::to_string(size) + " bytes given, optimization profile " +
                std::to_string(profile) + " needs at least " + std::to_string(required) +
                " (Engine::device_memory_size(" + std::to_string(profile) + "))");
  }
  extra_workspace_ = DeviceBuffer();
  layout(static_cast<uint8_t*>(memory), size);
}

void ContextDeviceMemory::layout(uint8_t* base, uint64_t size) {
  base_ = base;
  size_ = size;
  view_.arena = base;
  const uint64_t reserved_workspace = size > arena_ + flags_ ? size - arena_ - flags_ : 0;
  if (extra_workspace_.data() && extra_workspace_.size() > reserved_workspace) {
    view_.workspace = extra_workspace_.data();
    view_.workspace_bytes = extra_workspace_.size();
  } else {
    view_.workspace = reserved_workspace ? base + arena_ : nullptr;
    view_.workspace_bytes = reserved_workspace;
  }
  view_.error_flags = flags_ && size >= flags_ ? reinterpret_cast<int32_t*>(base + size - flags_) : nullptr;
  ++view_.generation;
}

void ContextDeviceMemory::grow_static(uint64_t arena, uint64_t workspace, const std::string& what) {
  // kStatic: three buffers, so that growing the workspace (a shape whose kernels need more,
  // possibly in the middle of an inference with data-dependent sizes) leaves the arena and the
  // activations in it where they are. A buffer that grows is released first: an inference
  // still using it finishes before (freeing device memory waits for the device).
  arena = memory_granule(arena);
  workspace = memory_granule(workspace);
  bool moved = false;
  // The backend's message says how much failed; this says what it was for.
  const auto allocate = [&](DeviceBuffer& buffer, uint64_t bytes, const char* kind) {
    buffer = DeviceBuffer();
    try {
      buffer = DeviceBuffer(backend_, bytes);
    } catch (const Error& e) {
      throw Error(std::string(e.what()) + " for the " + kind + " of " + what);
    }
    ++allocations_;
    moved = true;
  };
  // The view plans bind to, from the three buffers: after every change, and also when an
  // allocation fails (a buffer that grows is released before its replacement is allocated: the
  // view then shows it gone, size 0, so that fits() is false and the next inference allocates
  // again; it used to keep the released buffer's pointer and size, and the next inference's
  // kernels wrote into freed memory).
  const auto publish = [&](bool changed) {
    arena_ = own_arena_.size();
    base_ = static_cast<uint8_t*>(own_arena_.data());
    size_ = own_arena_.size();
    view_.arena = base_;
    view_.workspace = own_workspace_.data();
    view_.workspace_bytes = own_workspace_.size();
    view_.error_flags = static_cast<int32_t*>(own_flags_.data());
    if (changed) ++view_.generation;
  };
  try {
    if (!own_arena_.data() || arena > own_arena_.size())
      allocate(own_arena_, std::max<uint64_t>(arena, 256), "activation memory");
    if (workspace > own_workspace_.size()) allocate(own_workspace_, workspace, "kernel workspace");
    if (flags_ && !own_flags_.data()) {
      own_flags_ = DeviceBuffer(backend_, flags_);
      ++allocations_;
      moved = true;
    }
  } catch (...) {
    publish(true);
    throw;
  }
  publish(moved);
}

void ContextDeviceMemory::ensure(uint64_t arena, uint64_t workspace, const std::string& what) {
  if (mode_ == ContextMemory::kStatic) {
    grow_static(std::max(arena, arena_), std::max<uint64_t>(workspace, view_.workspace_bytes), what);
    return;
  }
  if (!base_) {
    throw Error(
        "this context was created with ContextMemory::kUserManaged and has no device memory: call "
        "ExecutionContext::set_device_memory with Engine::device_memory_size(profile) bytes before the first "
        "inference");
  }
  if (arena > arena_) {
    throw Error(what + " needs " + std::to_string(arena) + " bytes of activation memory, more than the " +
                std::to_string(arena_) +
                " the optimization profile's plan reserves (this network's tensors do not "
                "grow with its input dims); use a context with ContextMemory::kStatic");
  }
  if (workspace > view_.workspace_bytes) {
    if (!warned_) {
      log(Severity::kWarning, what + " needs " + std::to_string(workspace) +
                                  " bytes of kernel workspace, more than the " + std::to_string(view_.workspace_bytes) +
                                  " reserved in the memory given by "
                                  "set_device_memory; the context allocates the extra itself");
      warned_ = true;
    }
    extra_workspace_ = DeviceBuffer(backend_, memory_granule(workspace));
    ++allocations_;
    view_.workspace = extra_workspace_.data();
    view_.workspace_bytes = extra_workspace_.size();
    ++view_.generation;
  }
}

}  // namespace kiln
