// The GPU suite's model tests (CI compiles them; they skip without a CUDA device or without the
// shared models): every model of ../shared/models (or $KILN_TEST_MODELS_DIR) is built for CUDA
// in fp32 and fp16 with a dynamic-batch profile 1/4/8, run at batch 4 (the reference input
// repeated) and compared with the PyTorch reference: fp32 within 1e-3 and fp16 within 2e-2
// relative error per element (|a-b| / max(|ref|, 1e-3)). The engine is also run through a CUDA
// graph, which must give the same bytes as the plain run. KILN_TEST_NO_TIMING=1 skips kernel
// timing (for compute-sanitizer runs, where timing would take long).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <iostream>

#include "cuda_test_util.h"
#include "kiln/kiln.h"
#include "src/backends/backend.h"
#include "src/core/half.h"
#include "src/core/tensor_io.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

std::string models_dir() {
  if (const char* d = std::getenv("KILN_TEST_MODELS_DIR")) return d;
  return std::string(KILN_SOURCE_DIR) + "/../shared/models";
}

using test::cuda_usable;

struct Stats {
  double max_rel = 0, mean_rel = 0, share_above_1e5 = 0, max_abs = 0;
  int64_t bad = 0;
};

// Per-element relative error |a-b| / max(|b|, 1e-3); `bad` counts elements above tol.
Stats compare(const HostTensor& got, const HostTensor& ref, double tol) {
  Stats s;
  const auto a = got.to_double();
  const auto b = ref.to_double();
  double sum = 0;
  int64_t above = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = std::fabs(a[i] - b[i]);
    const double rel = std::isfinite(d) ? d / std::max(std::fabs(b[i]), 1e-3) : INFINITY;
    s.max_abs = std::max(s.max_abs, d);
    s.max_rel = std::max(s.max_rel, rel);
    sum += rel;
    if (rel > 1e-5) ++above;
    if (!(rel <= tol)) ++s.bad;
  }
  if (!b.empty()) {
    s.mean_rel = sum / static_cast<double>(b.size());
    s.share_above_1e5 = static_cast<double>(above) / static_cast<double>(b.size());
  }
  return s;
}

using test::DeviceTensors;

HostTensor repeat_batch(const HostTensor& t, int64_t n) {
  Dims d = t.dims();
  d[0] = t.dims()[0] * n;
  HostTensor r(t.type(), d);
  for (int64_t b = 0; b < n; ++b) std::memcpy(r.as<uint8_t>() + b * t.nbytes(), t.data(), t.nbytes());
  return r;
}

// fp32_layers: layer names kept in float32 (Layer::set_precision), as `kiln build
// --layer-precisions` does. max_abs_bound > 0: fp16 engines whose per-element criterion is below
// float16's floor for the model (see BertTinyFp16) are held to this absolute error instead.
void run_model(const std::string& name, bool fp16, const std::vector<std::string>& fp32_layers = {},
               double max_abs_bound = 0.0) {
  std::string why;
  if (!cuda_usable(&why)) GTEST_SKIP() << why;
  const std::string dir = models_dir() + "/" + name;
  if (!fs::exists(dir + "/model.onnx")) GTEST_SKIP() << dir << " is not present";
  auto net = std::make_unique<Network>();
  OnnxParser(*net).parse_file(dir + "/model.onnx");
  for (const std::string& layer : fp32_layers) {
    Layer* l = net->find_layer(layer);
    ASSERT_NE(l, nullptr) << "no layer '" << layer << "' in " << name;
    l->set_precision(DataType::kFloat32);
  }
  std::vector<HostTensor> inputs, refs;
  for (int i = 0; i < net->num_inputs(); ++i) {
    inputs.push_back(load_tensor_pb(dir + "/test_data_set_0/input_" + std::to_string(i) + ".pb"));
  }
  for (int i = 0; i < net->num_outputs(); ++i) {
    refs.push_back(load_tensor_pb(dir + "/test_data_set_0/output_" + std::to_string(i) + ".pb"));
  }
  BuilderConfig config;
  config.device = DeviceType::kCUDA;
  config.fp16 = fp16;
  config.time_tactics = std::getenv("KILN_TEST_NO_TIMING") == nullptr;
  OptimizationProfile p;
  for (int i = 0; i < net->num_inputs(); ++i) {
    Dims d1 = inputs[static_cast<size_t>(i)].dims(), d4 = d1, d8 = d1;
    d4[0] = 4 * d1[0];
    d8[0] = 8 * d1[0];
    p.set_dimensions(net->input(i)->name(), d1, d4, d8);
  }
  config.profiles.push_back(p);
  BuildReport report;
  const auto bytes = Builder().build_serialized(*net, config, &report);
  auto engine = Runtime().deserialize(bytes.data(), bytes.size(), name);
  Backend& backend = get_backend(DeviceType::kCUDA);
  DeviceTensors mem(backend);
  auto ctx = engine->create_execution_context();
  ctx->set_graph_capture(false);  // plain launches first: the graph replays below are compared with them
  for (int i = 0; i < net->num_inputs(); ++i) {
    const HostTensor in4 = repeat_batch(inputs[static_cast<size_t>(i)], 4);
    ctx->set_input_shape(net->input(i)->name(), in4.dims());
    ctx->set_tensor_address(net->input(i)->name(), mem.upload(in4));
  }
  std::vector<HostTensor> outs;
  std::vector<void*> out_ptrs;
  for (int i = 0; i < net->num_outputs(); ++i) {
    const std::string out = net->output(i)->name();
    const Dims dims = ctx->tensor_shape(out);
    outs.emplace_back(engine->io_tensor(out).type, dims);
    out_ptrs.push_back(mem.alloc(outs.back().nbytes()));
    ctx->set_tensor_address(out, out_ptrs.back());
  }
  ctx->execute();
  const double tol = fp16 ? 2e-2 : 1e-3;
  for (size_t i = 0; i < outs.size(); ++i) {
    backend.copy_device_to_host(outs[i].data(), out_ptrs[i], outs[i].nbytes(), nullptr);
    ASSERT_EQ(outs[i].dims()[0], 4 * refs[i].dims()[0]);
    for (int64_t b = 0; b < 4; ++b) {
      const HostTensor item = HostTensor::from_bytes(refs[i].type(), refs[i].dims(),
                                                     outs[i].as<uint8_t>() + b * refs[i].nbytes(), refs[i].nbytes());
      const Stats s = compare(item, refs[i], tol);
      std::cout << name << (fp16 ? " fp16" : " fp32") << " output " << i << " item " << b << ": max rel err "
                << s.max_rel << ", mean rel err " << s.mean_rel << ", rel err > 1e-5: " << 100 * s.share_above_1e5
                << "%, max abs err " << s.max_abs << "\n";
      if (max_abs_bound > 0) {
        EXPECT_LE(s.max_abs, max_abs_bound) << name << " output " << i << " batch item " << b;
        continue;
      }
      EXPECT_EQ(s.bad, 0) << name << (fp16 ? " fp16" : " fp32") << " output " << i << " batch item " << b << ": "
                          << s.bad << " elements above relative error " << tol << " (max " << s.max_rel << ")";
    }
  }
  // CUDA graphs. The context above launched layer by layer (graphs off), with the kernels the
  // builder chose for plain launches; graphs run the kernels fastest on the device, which may
  // differ (EngineData::launch_tactics), so the graph runs are compared with plain runs of those
  // same kernels: a context with automatic graphs runs the first inference at new shapes layer
  // by layer (the warm-up), then captures and replays. Input A (the batch-4 input): warm-up,
  // then a capture; then input B written into the same buffers (float inputs halved): a replay.
  // Each replay must give the bytes of the plain run on that input, so the graph holds the whole
  // inference; a fresh context's plain warm-up on B gives that plain run.
  std::vector<HostTensor> inputs_b;
  for (int i = 0; i < net->num_inputs(); ++i) {
    HostTensor b = repeat_batch(inputs[static_cast<size_t>(i)], 4);
    if (b.type() == DataType::kFloat32) {
      for (int64_t k = 0; k < b.count(); ++k) b.as<float>()[k] *= 0.5f;
    }
    inputs_b.push_back(b);
  }
  auto download = [&](std::vector<HostTensor>& into) {
    into.clear();
    for (size_t i = 0; i < outs.size(); ++i) {
      into.emplace_back(outs[i].type(), outs[i].dims());
      backend.copy_device_to_host(into.back().data(), out_ptrs[i], into.back().nbytes(), nullptr);
    }
  };
  auto upload = [&](const std::vector<HostTensor>& values) {
    for (int i = 0; i < net->num_inputs(); ++i) {
      // The contexts' input addresses are the DeviceTensors uploaded above, in input order.
      backend.copy_host_to_device(mem.ptrs[static_cast<size_t>(i)], values[static_cast<size_t>(i)].data(),
                                  values[static_cast<size_t>(i)].nbytes(), nullptr);
    }
  };
  auto bind = [&](ExecutionContext& c) {
    for (int i = 0; i < net->num_inputs(); ++i) {
      c.set_input_shape(net->input(i)->name(), inputs_b[static_cast<size_t>(i)].dims());
      c.set_tensor_address(net->input(i)->name(), mem.ptrs[static_cast<size_t>(i)]);
    }
    for (int i = 0; i < net->num_outputs(); ++i)
      c.set_tensor_address(net->output(i)->name(), out_ptrs[static_cast<size_t>(i)]);
  };
  std::vector<HostTensor> inputs_a;
  for (int i = 0; i < net->num_inputs(); ++i) inputs_a.push_back(repeat_batch(inputs[static_cast<size_t>(i)], 4));
  std::vector<HostTensor> plain_a, plain_b, graph_a, graph_b;
  auto gctx = engine->create_execution_context();  // automatic graphs
  bind(*gctx);
  upload(inputs_a);
  gctx->execute();  // the warm-up: layer by layer, with the graphs' kernels
  download(plain_a);
  gctx->execute();  // captures and replays
  download(graph_a);
  upload(inputs_b);
  gctx->execute();  // replays only
  download(graph_b);
  const ContextStats gst = gctx->stats();
  EXPECT_EQ(gst.graph_captures, 1u) << name;
  EXPECT_EQ(gst.graph_replays, 2u) << name;
  EXPECT_EQ(gst.plain_inferences, 1u) << name;
  auto fresh = engine->create_execution_context();
  bind(*fresh);
  fresh->execute();  // input B, layer by layer (its warm-up)
  download(plain_b);
  for (size_t i = 0; i < outs.size(); ++i) {
    // The graphs' kernels are as accurate as the plain launches' (checked above).
    const HostTensor item =
        HostTensor::from_bytes(refs[i].type(), refs[i].dims(), plain_a[i].as<uint8_t>(), refs[i].nbytes());
    const Stats s = compare(item, refs[i], tol);
    if (max_abs_bound > 0) {
      EXPECT_LE(s.max_abs, max_abs_bound) << name << " output " << i << " with the graphs' kernels";
    } else {
      EXPECT_EQ(s.bad, 0) << name << " output " << i << " with the graphs' kernels: " << s.bad
                          << " elements above relative error " << tol << " (max " << s.max_rel << ")";
    }
    EXPECT_EQ(std::memcmp(graph_a[i].data(), plain_a[i].data(), outs[i].nbytes()), 0)
        << name << ": graph run on input A differs";
    EXPECT_EQ(std::memcmp(graph_b[i].data(), plain_b[i].data(), outs[i].nbytes()), 0)
        << name << ": graph replay on input B differs from the plain run on B";
    if (net->input(0)->type() == DataType::kFloat32) {
      EXPECT_NE(std::memcmp(plain_b[i].data(), plain_a[i].data(), outs[i].nbytes()), 0)
          << name << ": inputs A and B gave the same output; the graph check proves nothing";
    }
  }
  std::cout << name << (fp16 ? " fp16" : " fp32") << ": built in " << report.build_seconds << " s ("
            << report.layers_timed << " layers timed), " << report.layers_after << " layers\n";
}

TEST(CudaModels, Squeezenet11Fp32) { run_model("squeezenet1_1", false); }
TEST(CudaModels, Squeezenet11Fp16) { run_model("squeezenet1_1", true); }
TEST(CudaModels, TinyYoloSiluFp32) { run_model("tinyyolo_silu", false); }
TEST(CudaModels, TinyYoloSiluFp16) { run_model("tinyyolo_silu", true); }
TEST(CudaModels, TinyYoloTemperatureSwishFp32) { run_model("tinyyolo_tswish", false); }
TEST(CudaModels, TinyYoloTemperatureSwishFp16) { run_model("tinyyolo_tswish", true); }
TEST(CudaModels, BertTinyFp32) { run_model("bert_tiny", false); }
// bert_tiny in fp16 cannot meet 2e-2 per element relative to max(|ref|, 1e-3) with its matrix
// products in float16: rounding only the MatMul weights to float16, everything else in float32
// (ONNX Runtime, scripts/fp16_error_floor.py), already puts 2 of its 4,096 outputs above 2e-2,
// at |ref| ~ 1e-3 with absolute errors ~1e-4. The default fp16 engine is held to that floor
// (3x its 1.4e-4 maximum absolute error with all MatMul inputs in float16); the criterion itself
// is met by the engine with the layers `kiln debug precision` finds (BertTinyFp16WithDebugPrecision).
TEST(CudaModels, BertTinyFp16) { run_model("bert_tiny", true, {}, 4.5e-4); }

// The user's workflow for a tolerance float16 misses: `kiln debug precision` (on this GPU, on the
// model's reference) lists layers to keep in float32; the engine built with them meets the
// issue's fp16 criterion at every batch item.
TEST(CudaModels, BertTinyFp16WithDebugPrecision) {
  std::string why;
  if (!cuda_usable(&why)) GTEST_SKIP() << why;
  const std::string dir = models_dir() + "/bert_tiny";
  if (!fs::exists(dir + "/model.onnx")) GTEST_SKIP() << dir << " is not present";
  const std::string list = testing::TempDir() + "/bert_tiny_fp32_layers.txt";
  const std::string cmd = std::string(KILN_CLI_PATH) + " debug precision --device cuda --onnx " + dir +
                          "/model.onnx --inputs-dir " + dir + "/test_data_set_0 --compare-dir " + dir +
                          "/test_data_set_0 --max-rel-err 1.5e-2 --direction reverse --save " + list;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(list);
  std::stringstream text;
  text << f.rdbuf();
  std::vector<std::string> layers;
  std::string entry;
  while (std::getline(text, entry, ',')) {
    if (entry.size() > 5 && entry.substr(entry.size() - 5) == ":fp32")
      layers.push_back(entry.substr(0, entry.size() - 5));
  }
  ASSERT_FALSE(layers.empty()) << "kiln debug precision found nothing to keep in fp32, yet the default engine misses";
  std::cout << "bert_tiny fp16: " << layers.size() << " layer(s) kept in fp32 by kiln debug precision\n";
  run_model("bert_tiny", true, layers);
}

}  // namespace
}  // namespace kiln
