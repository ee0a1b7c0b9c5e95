#include "src/builder/engine_check.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "kiln/error.h"
#include "kiln/runtime.h"
#include "src/backends/backend.h"
#include "src/builder/tactic_selection.h"
#include "src/core/half.h"

namespace kiln {
namespace {

// Input values: a fixed pattern in [-1, 1] for floating-point inputs (zeros would let kernels
// take paths real data does not), zero for the others (valid indices, ids and masks).
std::vector<uint8_t> input_values(DataType type, int64_t count) {
  std::vector<uint8_t> bytes(static_cast<size_t>(tensor_byte_size(type, Dims{count})), 0);
  if (!is_floating_point(type)) return bytes;
  for (int64_t i = 0; i < count; ++i) {
    const float v = static_cast<float>((i * 7919) % 2001 - 1000) / 1000.0f;
    if (type == DataType::kFloat32) {
      std::memcpy(bytes.data() + i * 4, &v, 4);
    } else if (type == DataType::kFloat16) {
      const uint16_t h = float_to_half_bits(v);
      std::memcpy(bytes.data() + i * 2, &h, 2);
    } else if (type == DataType::kFloat64) {
      const double d = v;
      std::memcpy(bytes.data() + i * 8, &d, 8);
    }
  }
  return bytes;
}

// One engine with a context bound to its own input and output buffers at profile 0's opt shapes.
struct BoundEngine {
  std::shared_ptr<Engine> engine;
  std::unique_ptr<ExecutionContext> context;
  std::vector<DeviceBuffer> buffers;

  BoundEngine(const std::vector<uint8_t>& bytes, const char* which, Backend& backend, void* stream) {
    Runtime runtime;
    runtime.set_allow_embedded_plugins(true);  // built in this process: its plugins are loaded already
    runtime.set_allow_compiled_plans(true);    // and its plans were compiled by it
    engine = runtime.deserialize(bytes.data(), bytes.size(), which);
    context = engine->create_execution_context();
    const OptimizationProfile none;
    const OptimizationProfile& profile = engine->num_profiles() > 0 ? engine->profile(0) : none;
    for (const TensorInfo& t : engine->io_tensors()) {
      if (t.mode != TensorIOMode::kInput) continue;
      if (t.type == DataType::kString) throw Error("input " + t.name + " holds strings");
      const Dims dims = profile.has(t.name) ? profile.opt(t.name) : t.dims;
      if (dims.is_dynamic()) throw Error("input " + t.name + " has no opt shape in profile 0");
      context->set_input_shape(t.name, dims);
      const std::vector<uint8_t> values = input_values(t.type, dims.volume());
      buffers.emplace_back(backend, values.size());
      if (!values.empty()) backend.copy_host_to_device(buffers.back().data(), values.data(), values.size(), stream);
      context->set_tensor_address(t.name, buffers.back().data());
    }
    for (const TensorInfo& t : engine->io_tensors()) {
      if (t.mode != TensorIOMode::kOutput) continue;
      const Dims dims = context->max_tensor_shape(t.name);
      buffers.emplace_back(backend, static_cast<size_t>(tensor_byte_size(t.type, dims)));
      context->set_tensor_address(t.name, buffers.back().data());
    }
    backend.synchronize(stream);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

EngineComparison time_engines_alternating(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                                          DeviceType device, double round_ms, int rounds) {
  Backend& backend = get_backend(device);
  TimingStream timing_stream(&backend);
  void* const stream = timing_stream.get();
  BoundEngine ea(a, "<level 5's engine>", backend, stream);
  BoundEngine eb(b, "<level 3's engine>", backend, stream);
  BoundEngine* engines[2] = {&ea, &eb};
  // Warm-up: lazy kernel set-up and, on CUDA, the graph captures of the first calls.
  double once = 0;
  for (BoundEngine* e : engines) {
    for (int i = 0; i < 3; ++i) e->context->enqueue(stream);
    backend.synchronize(stream);
    e->context->check_device_errors();
    once = std::max(once, backend.time_runs(stream, 1, [&] { e->context->enqueue(stream); }));
  }
  EngineComparison r;
  r.runs = std::max(1, std::min(200, static_cast<int>(round_ms / std::max(once, 1e-3))));
  // At most about 2 s of measuring where rounds allow: 7 rounds up to about 140 ms an inference,
  // fewer above, at least 3 (one inference each from about 330 ms).
  const int affordable = static_cast<int>(2000.0 / (2.0 * once * r.runs));
  r.rounds = std::max(1, std::min(rounds, std::max(3, affordable)));
  std::vector<double> ta, tb;
  for (int round = 0; round < r.rounds; ++round) {
    // a b, b a, a b, ...: neither engine always runs right after the other.
    for (int k = 0; k < 2; ++k) {
      const int which = (round + k) % 2;
      BoundEngine& e = *engines[which];
      const double ms = backend.time_runs(stream, r.runs, [&] { e.context->enqueue(stream); });
      (which == 0 ? ta : tb).push_back(ms);
    }
  }
  r.a_ms = median(ta);
  r.b_ms = median(tb);
  return r;
}

}  // namespace kiln
