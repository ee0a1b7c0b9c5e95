// The body of the engine fuzz targets (engine_load: byte-level mutation; engine_resealed: the
// payload mutated and the header's size and checksum recomputed, fuzz_engine_resealed.cpp):
// engine file bytes -> Runtime::deserialize -> (when it loads, CPU engines) one inference on
// zero-filled host inputs at profile 0's min shapes. Engines whose inputs or outputs at those
// shapes exceed 16 MiB in all, or whose context needs more than 1 MiB of activation memory and
// workspace (Engine::device_memory_size), are only loaded. Every kiln::Error is an accepted answer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "fuzz_common.h"
#include "kiln/error.h"
#include "kiln/runtime.h"
#include "kiln/types.h"

namespace kiln_fuzz {

constexpr uint64_t kMaxIoBytes = 16ull << 20;
constexpr uint64_t kMaxContextBytes = 1ull << 20;

inline int load_and_run(const uint8_t* data, size_t size) {
  kiln_fuzz::quiet_logger();
  try {
    kiln::Runtime runtime;  // embedded plugin libraries stay refused (the default)
    std::shared_ptr<kiln::Engine> engine = runtime.deserialize(data, size, "<fuzz>");
    if (!engine || engine->device() != kiln::DeviceType::kCPU) return 0;
    // A context allocates the activation memory the engine's graph needs at the profile's max
    // shapes. An engine can honestly need hundreds of GB (a pooling with huge pads): kiln's
    // answer is a clean out-of-memory error when the allocation fails, but a large allocation
    // that succeeds would be touched by the inference, and ASan reports huge ones as crashes.
    // Servers that load untrusted engines check device_memory_size() first (docs/security.md);
    // so does this target, at 1 MiB (the seeds need 2 KiB at most): the work of an inference
    // grows with its activations (a Conv whose output grew to 10 MB took 1 s at -O2 and over
    // 100 s in the -O0 ASan build, a libFuzzer timeout, though not a hang).
    if (engine->num_profiles() > 0 && engine->device_memory_size(0) > kMaxContextBytes) return 0;
    std::unique_ptr<kiln::ExecutionContext> context = engine->create_execution_context();
    context->set_num_threads(1);
    uint64_t total = 0;
    for (const kiln::TensorInfo& t : engine->io_tensors()) {
      if (t.mode != kiln::TensorIOMode::kInput) continue;
      kiln::Dims dims = t.dims;
      if (dims.is_dynamic()) {
        if (engine->num_profiles() == 0 || !engine->profile(0).has(t.name)) return 0;
        dims = engine->profile(0).min(t.name);
      }
      total += kiln::tensor_byte_size(t.type, dims);
      if (total > kMaxIoBytes) return 0;
      context->set_input_shape(t.name, dims);
    }
    std::vector<kiln::HostTensor> buffers;
    buffers.reserve(engine->io_tensors().size());
    for (const kiln::TensorInfo& t : engine->io_tensors()) {
      const kiln::Dims dims = context->max_tensor_shape(t.name);
      if (t.mode == kiln::TensorIOMode::kOutput) {
        total += kiln::tensor_byte_size(t.type, dims);
        if (total > kMaxIoBytes) return 0;
      }
      buffers.emplace_back(t.type, dims);  // zero-filled
      context->set_tensor_address(t.name, buffers.back().data());
    }
    context->execute();
  } catch (const kiln::Error&) {}
  return 0;
}

}  // namespace kiln_fuzz
