// GPU tests of the cuDNN graph-API convolution tactics (src/backends/cuda/conv_cudnn_graph.cpp):
// every tactic of the family on ResNet/YOLO-like convolutions with fused bias, residual and
// activations, in float32 and float16, NCHW and NHWC, against the CPU reference (the oracle of
// tests/op_harness.h; float16 inputs are rounded to fp16 first and the reference runs in float32
// on the rounded values). The shared op harness runs NCHW only, hence this file for NHWC, the
// layout the fp16 builds use. A tactic may decline a case in prepare() (an error naming
// CUDNN_STATUS_NOT_SUPPORTED, which the builder skips), except "cudnn_graph" on the fp16 NHWC
// cases marked `must_run`: those are what the tactic exists for. Skips without a CUDA device or
// when kiln was built without cudnn-frontend.
#include <gtest/gtest.h>

#include <cstdlib>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "op_harness.h"
#include "src/backends/backend.h"
#include "src/backends/kernel.h"
#include "src/core/half.h"

namespace kiln {
namespace {

const char* const kGraphTactics[] = {"cudnn_graph", "cudnn_graph_1", "cudnn_graph_2"};

struct ConvCase {
  const char* name;
  Dims x;
  int64_t out_channels;
  std::vector<int64_t> kernel, strides, pads, dilations;
  int64_t group;
  bool bias, residual;
  const char* activation;  // "" for none
  double alpha, beta;
  bool must_run;
};

// clang-format off
std::vector<ConvCase> cases() {
  return {
      {"resnet_1x1_bias_relu", {1, 64, 14, 14}, 256, {1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, true, false, "relu", 0, 0, true},
      {"resnet_3x3_s2_bias_relu", {1, 64, 28, 28}, 128, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 1, true, false, "relu", 0, 0, true},
      {"bottleneck_residual_relu", {2, 64, 7, 7}, 256, {1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, true, true, "relu", 0, 0, true},
      {"yolo_3x3_bias_silu", {1, 32, 20, 20}, 64, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, true, false, "silu", 0, 0, true},
      {"odd_sizes_bias_leaky", {1, 24, 13, 11}, 40, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, true, false, "leaky_relu", 0.1, 0, false},
      {"grouped_bias_clip6", {1, 32, 9, 9}, 32, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 4, true, false, "clip", 0, 6, false},
      {"asym_pads_dilated_hard_swish", {1, 16, 12, 12}, 24, {3, 3}, {1, 1}, {1, 0, 2, 1}, {2, 2}, 1, true, false, "hard_swish", 0, 0, false},
      {"residual_no_bias_sigmoid", {1, 16, 10, 10}, 16, {1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1, false, true, "sigmoid", 0, 0, false},
      {"conv1d_no_post_ops", {2, 16, 33}, 8, {5}, {1}, {2, 2}, {1}, 1, false, false, "", 0, 0, false},
  };
}
// clang-format on

bool cuda_usable(std::string* why) {
  if (!test::cuda_usable(why)) return false;
  if (!KernelRegistry::instance().find(DeviceType::kCUDA, kLayerConvolution, "cudnn_graph")) {
    *why = "kiln was built without cudnn-frontend (no cudnn_graph tactics)";
    return false;
  }
  return true;
}

Attributes attributes_of(const ConvCase& c) {
  Attributes a;
  a.set("strides", c.strides);
  a.set("pads", c.pads);
  a.set("dilations", c.dilations);
  a.set("group", c.group);
  if (*c.activation) {
    a.set("activation", std::string(c.activation));
    a.set("activation_alpha", c.alpha);
    a.set("activation_beta", c.beta);
  }
  return a;
}

Dims output_dims(const ConvCase& c) {
  Dims d{c.x[0], c.out_channels};
  const size_t k = c.kernel.size();
  for (size_t i = 0; i < k; ++i) {
    const int64_t span = c.dilations[i] * (c.kernel[i] - 1) + 1;
    d.push_back((c.x[static_cast<int>(i) + 2] + c.pads[i] + c.pads[i + k] - span) / c.strides[i] + 1);
  }
  return d;
}

Dims weight_dims(const ConvCase& c) {
  Dims d{c.out_channels, c.x[1] / c.group};
  for (int64_t k : c.kernel) d.push_back(k);
  return d;
}

// A float32 tensor of random values in [low, high), rounded through fp16 when `fp16` (so that the
// reference and the fp16 run see the same numbers).
HostTensor make_values(const Dims& dims, uint64_t seed, double low, double high, bool fp16) {
  HostTensor t = test::random_tensor(DataType::kFloat32, dims, seed, low, high);
  if (fp16) {
    for (int64_t i = 0; i < t.count(); ++i) t.as<float>()[i] = static_cast<float>(half(t.as<float>()[i]));
  }
  return t;
}

HostTensor to_type(const HostTensor& f32, DataType type) {
  if (type == DataType::kFloat32) return f32;
  HostTensor out(DataType::kFloat16, f32.dims());
  for (int64_t i = 0; i < f32.count(); ++i) out.as<half>()[i] = half(f32.as<float>()[i]);
  return out;
}

float element_as_float(const HostTensor& t, int64_t i) {
  return t.type() == DataType::kFloat16 ? static_cast<float>(t.as<half>()[i]) : t.as<float>()[i];
}

// Bytes of an [N, C, S...] tensor in channels-last order (or back, `inverse`).
std::vector<uint8_t> permute_channels(const HostTensor& t, bool inverse) {
  const Dims& d = t.dims();
  const int64_t n = d[0], c = d[1], s = t.count() / std::max<int64_t>(1, n * c);
  const size_t es = data_type_size(t.type());
  std::vector<uint8_t> out(t.nbytes());
  const auto* src = static_cast<const uint8_t*>(t.data());
  for (int64_t a = 0; a < n; ++a) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t p = 0; p < s; ++p) {
        const int64_t linear = (a * c + ch) * s + p, last = (a * s + p) * c + ch;
        const int64_t from = inverse ? last : linear, to = inverse ? linear : last;
        std::memcpy(out.data() + static_cast<size_t>(to) * es, src + static_cast<size_t>(from) * es, es);
      }
    }
  }
  return out;
}

enum class Result { kPassed, kDeclined, kFailed };

struct RunOutcome {
  Result result = Result::kFailed;
  std::string message;
};

// Runs `tactic` on one case in one type and format; compares with `expected` (float32, NCHW).
RunOutcome run_graph_tactic(const ConvCase& c, const char* tactic, DataType type, TensorFormat format,
                            const std::vector<HostTensor>& values, const HostTensor& expected) {
  RunOutcome out;
  Backend& backend = get_backend(DeviceType::kCUDA);
  const KernelEntry* entry = KernelRegistry::instance().find(DeviceType::kCUDA, kLayerConvolution, tactic);
  if (!entry) {
    out.message = "tactic not registered";
    return out;
  }
  const Dims y_dims = output_dims(c);
  // values: x, w, b (maybe empty), residual (maybe empty); float32, NCHW.
  std::vector<HostTensor> typed;
  for (const HostTensor& v : values) typed.push_back(v.empty() ? HostTensor() : to_type(v, type));

  Network net;
  std::vector<Tensor*> ins{net.add_input("x", type, c.x), net.add_constant(typed[1], "w")->output(0)};
  if (c.bias || c.residual) ins.push_back(c.bias ? net.add_constant(typed[2], "b")->output(0) : nullptr);
  if (c.residual) ins.push_back(net.add_input("r", type, y_dims));
  Layer* layer = net.add_layer(kLayerConvolution, ins, 1, attributes_of(c), "conv");

  std::vector<TensorDesc> descs;
  KernelContext kc;
  kc.layer = layer;
  std::vector<DeviceBuffer> buffers;
  for (size_t i = 0; i < ins.size(); ++i) {
    TensorDesc d;
    TensorView v;
    if (!ins[i]) {
      d.present = false;
      descs.push_back(d);
      kc.inputs.push_back(v);
      continue;
    }
    const HostTensor& h = typed[i];
    const bool activation = i == 0 || i == 3;  // x and the residual take the layout; w and b stay linear
    d.type = v.type = type;
    d.dims = v.dims = h.dims();
    d.format = v.format = activation ? format : TensorFormat::kLinear;
    if (!activation) d.value = &h;
    buffers.emplace_back(backend, h.nbytes());
    if (activation && format == TensorFormat::kChannelsLast) {
      const std::vector<uint8_t> bytes = permute_channels(h, false);
      backend.copy_host_to_device(buffers.back().data(), bytes.data(), bytes.size(), nullptr);
    } else {
      backend.copy_host_to_device(buffers.back().data(), h.data(), h.nbytes(), nullptr);
    }
    v.data = buffers.back().data();
    descs.push_back(d);
    kc.inputs.push_back(v);
  }
  if (entry->supports && !entry->supports(*layer, descs)) {
    out.message = "supports() rejects the case";
    return out;  // every case here is one the tactics must accept
  }
  const size_t y_bytes = static_cast<size_t>(y_dims.volume()) * data_type_size(type);
  DeviceBuffer y(backend, y_bytes);
  backend.memset_device(y.data(), 0xff, y_bytes, nullptr);  // NaN in both types: unwritten outputs show
  kc.outputs.push_back(TensorView{type, y_dims, format, y.data()});
  const std::vector<TensorDesc> out_descs{TensorDesc{type, y_dims, format, true, nullptr}};
  void* stream = backend.create_stream();
  struct StreamGuard {
    Backend& b;
    void* s;
    ~StreamGuard() { b.destroy_stream(s); }
  } guard{backend, stream};
  kc.stream = stream;
  std::unique_ptr<Kernel> kernel = entry->create(*layer);
  try {
    kernel->prepare(*layer, descs, out_descs, 1);
  } catch (const std::exception& e) {
    out.message = e.what();
    const bool declined = out.message.find("CUDNN_STATUS_NOT_SUPPORTED") != std::string::npos;
    out.result = declined ? Result::kDeclined : Result::kFailed;
    return out;
  }
  const size_t ws = kernel->workspace_size();
  DeviceBuffer workspace(backend, ws);
  kc.workspace = ws ? workspace.data() : nullptr;
  kc.workspace_size = ws;
  try {
    kernel->execute(kc);
    kernel->execute(kc);  // twice: the second run must not depend on state the first left behind
    backend.synchronize(stream);
  } catch (const std::exception& e) {
    out.message = std::string("execute threw: ") + e.what();
    return out;
  }
  HostTensor got(type, y_dims);
  if (format == TensorFormat::kChannelsLast) {
    HostTensor raw(type, y_dims);
    backend.copy_device_to_host(raw.data(), y.data(), y_bytes, nullptr);
    const std::vector<uint8_t> linear = permute_channels(raw, true);
    std::memcpy(got.data(), linear.data(), linear.size());
  } else {
    backend.copy_device_to_host(got.data(), y.data(), y_bytes, nullptr);
  }
  // fp32: float accumulation in another order; fp16: the harness's fp16 tolerance (output rounding).
  const bool fp16 = type == DataType::kFloat16;
  double scale = 1.0;
  for (int64_t i = 0; i < expected.count(); ++i) {
    scale = std::max(scale, std::fabs(static_cast<double>(expected.as<float>()[i])));
  }
  const double rtol = fp16 ? 1e-2 : 1e-4, atol = (fp16 ? 1e-2 : 1e-4) * scale;
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < expected.count(); ++i) {
    const double a = element_as_float(got, i), b = expected.as<float>()[i];
    if (!(std::fabs(a - b) <= atol + rtol * std::fabs(b))) {
      if (first < 0) first = i;
      ++bad;
    }
  }
  if (bad) {
    std::ostringstream m;
    m << bad << " of " << expected.count() << " elements differ; first at " << first << ": got "
      << element_as_float(got, first) << ", expected " << expected.as<float>()[first];
    out.message = m.str();
    return out;
  }
  out.result = Result::kPassed;
  return out;
}

TEST(CudaConvGraph, EveryGraphTacticMatchesCpuReference) {
  std::string why;
  if (!cuda_usable(&why)) GTEST_SKIP() << why;
  setenv("KILN_CUDNN_GRAPH", "1", 1);  // the tactics are opt-in (conv_cudnn_graph.cpp)
  std::ostringstream failures;
  std::map<std::string, std::map<Result, int>> tally;  // "<tactic> <type> <format>" -> counts
  int seed = 1;
  for (const ConvCase& c : cases()) {
    for (const bool fp16 : {false, true}) {
      const DataType type = fp16 ? DataType::kFloat16 : DataType::kFloat32;
      // Inputs (float32 values, fp16-representable when fp16) and the reference on them.
      std::vector<HostTensor> values{
          make_values(c.x, seed, -1.0, 1.0, fp16), make_values(weight_dims(c), seed + 1, -0.5, 0.5, fp16),
          c.bias ? make_values(Dims{c.out_channels}, seed + 2, -1.0, 1.0, fp16) : HostTensor(),
          c.residual ? make_values(output_dims(c), seed + 3, -1.0, 1.0, fp16) : HostTensor()};
      seed += 4;
      test::OpCase ref;
      ref.name = c.name;
      ref.layer_type = kLayerConvolution;
      ref.attrs = attributes_of(c);
      for (size_t i = 0; i < values.size(); ++i) {
        test::InputSpec in;
        if (values[i].empty()) {
          in.omitted = true;
        } else {
          in.value = values[i];
          in.type = DataType::kFloat32;
          in.dims = values[i].dims();
          in.constant = i == 1 || i == 2;
        }
        ref.inputs.push_back(in);
      }
      while (!ref.inputs.empty() && ref.inputs.back().omitted) ref.inputs.pop_back();
      const HostTensor expected = test::reference_outputs(ref).at(0);
      for (const TensorFormat format : {TensorFormat::kLinear, TensorFormat::kChannelsLast}) {
        for (const char* tactic : kGraphTactics) {
          const RunOutcome r = run_graph_tactic(c, tactic, type, format, values, expected);
          const std::string variant = std::string(fp16 ? "fp16" : "fp32") + " " +
                                      (format == TensorFormat::kChannelsLast ? "NHWC" : "NCHW");
          const std::string label = std::string(c.name) + " [" + tactic + ", " + variant + "]";
          tally[std::string(tactic) + " " + variant][r.result]++;
          const bool required = c.must_run && fp16 && format == TensorFormat::kChannelsLast &&
                                std::string(tactic) == "cudnn_graph";
          if (r.result == Result::kFailed || (r.result == Result::kDeclined && required)) {
            failures << "  " << label << ": " << (r.result == Result::kDeclined ? "declined: " : "")
                     << r.message << "\n";
          } else if (r.result == Result::kDeclined) {
            std::cout << "  declined " << label << ": " << r.message.substr(0, 300) << "\n";
          }
        }
      }
    }
  }
  for (const auto& [key, counts] : tally) {
    const auto count = [&](Result r) { auto it = counts.find(r); return it == counts.end() ? 0 : it->second; };
    std::cout << key << ": " << count(Result::kPassed) << " passed, " << count(Result::kDeclined) << " declined, "
              << count(Result::kFailed) << " failed\n";
  }
  EXPECT_TRUE(failures.str().empty()) << failures.str();
}

}  // namespace
}  // namespace kiln
