// Layers with data-dependent output sizes beyond NonZero: NonMaxSuppression, Unique and TopK with
// a k known only at run time. Each is checked against ONNX Runtime (tests/data/data_dependent/,
// made by its generate.py: every case has several input sets whose outputs differ in size), both
// through the ONNX importer and through networks built with the API, running all the sets of a
// case in ONE execution context, on every usable device (the CPU always; CUDA on a GPU machine).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/builder.h"
#include "kiln/error.h"
#include "kiln/network.h"
#include "kiln/onnx_parser.h"
#include "kiln/runtime.h"
#include "src/backends/backend.h"
#include "tests/data_dependent_io.h"
#include "src/core/tensor_io.h"
#include "tests/op_harness.h"
#include "tests/op_table.h"

namespace kiln {
namespace {

const std::string kDataDir = std::string(KILN_SOURCE_DIR) + "/tests/data/data_dependent/";

using test::build;
using test::Io;
using test::usable_devices;

// One case of tests/data/data_dependent/cases.json (the op table's data_dependent family): a model
// and its input sets with ONNX Runtime's outputs.
struct Case {
  std::string name;
  int sets = 0, inputs = 0, outputs = 0;
  double rtol = 0, atol = 0;
  std::vector<std::vector<HostTensor>> in, out;  // [set][i]
};

// The case of the op table's data_dependent family (tests/op_table.h) with every set's files.
Case load_case(const std::string& name) {
  for (const test::TableCase& t : test::load_op_table("data_dependent")) {
    if (t.name != name) continue;
    Case c;
    c.name = name;
    c.sets = t.sets;
    c.inputs = t.num_inputs;
    c.outputs = t.num_outputs;
    c.rtol = t.rtol;
    c.atol = t.atol;
    for (int s = 0; s < c.sets; ++s) {
      c.in.push_back(test::model_inputs(t, s));
      c.out.push_back(test::expected_outputs(t, s));
    }
    return c;
  }
  throw Error("case '" + name + "' is not in " + kDataDir + "cases.json");
}

// min/max over the sets of each network input's dims (opt = max).
OptimizationProfile profile_for(const Network& net, const Case& c) {
  OptimizationProfile p;
  for (int i = 0; i < net.num_inputs(); ++i) {
    Dims lo = c.in[0][static_cast<size_t>(i)].dims(), hi = lo;
    for (const auto& set : c.in) {
      const Dims& d = set[static_cast<size_t>(i)].dims();
      for (int a = 0; a < d.rank(); ++a) {
        lo[a] = std::min(lo[a], d[a]);
        hi[a] = std::max(hi[a], d[a]);
      }
    }
    p.set_dimensions(net.input(i)->name(), lo, hi, hi);
  }
  return p;
}

// Runs every set of `c` in one context of an engine built from `net` (inputs and outputs in the
// case's order) and compares the outputs with ONNX Runtime's.
void run_sets(const Network& net, const Case& c, DeviceType device) {
  ASSERT_EQ(net.num_inputs(), c.inputs);
  ASSERT_EQ(net.num_outputs(), c.outputs);
  const OptimizationProfile profile = profile_for(net, c);
  auto engine = build(net, device, &profile);
  auto ctx = engine->create_execution_context();
  for (int s = 0; s < c.sets; ++s) {
    SCOPED_TRACE(c.name + " set " + std::to_string(s));
    Io io(*engine, *ctx);
    for (int i = 0; i < c.inputs; ++i)
      io.input(net.input(i)->name(), c.in[static_cast<size_t>(s)][static_cast<size_t>(i)]);
    for (int i = 0; i < c.outputs; ++i) io.output(net.output(i)->name());
    ctx->execute();
    for (int i = 0; i < c.outputs; ++i) {
      const HostTensor& expected = c.out[static_cast<size_t>(s)][static_cast<size_t>(i)];
      std::string message;
      EXPECT_TRUE(test::compare_tensors(io.read(net.output(i)->name()), expected, c.rtol, c.atol, nullptr, &message))
          << "output " << i << ": " << message;
    }
  }
}

void run_onnx_case(const std::string& name) {
  const Case c = load_case(name);
  for (DeviceType device : usable_devices()) {
    SCOPED_TRACE(to_string(device));
    Network net;
    OnnxParser(net).parse_file(kDataDir + name + ".onnx");
    run_sets(net, c, device);
  }
}

TEST(DataDependentOps, OnnxNonMaxSuppressionCornersWithRunTimeScalars) { run_onnx_case("nms_corners_runtime_scalars"); }
TEST(DataDependentOps, OnnxNonMaxSuppressionCentersWithConstantMax) { run_onnx_case("nms_center_constant_max"); }
TEST(DataDependentOps, OnnxNonMaxSuppressionManyBoxes) { run_onnx_case("nms_many_boxes"); }
TEST(DataDependentOps, OnnxUniqueFlatSorted) { run_onnx_case("unique_flat_sorted"); }
TEST(DataDependentOps, OnnxUniqueFlatFirstOccurrence) { run_onnx_case("unique_flat_first_occurrence_int64"); }
TEST(DataDependentOps, OnnxUniqueAxis0Sorted) { run_onnx_case("unique_axis0_sorted"); }
TEST(DataDependentOps, OnnxUniqueAxis1FirstOccurrence) { run_onnx_case("unique_axis1_first_occurrence_int8"); }
TEST(DataDependentOps, OnnxUniqueLastAxisSorted) { run_onnx_case("unique_last_axis_sorted_float64"); }
TEST(DataDependentOps, OnnxUniqueLongFirstOccurrence) { run_onnx_case("unique_flat_long_first_occurrence"); }
TEST(DataDependentOps, OnnxUniqueLongSorted) { run_onnx_case("unique_flat_long_sorted_int64"); }
TEST(DataDependentOps, OnnxTopKRunTimeK) { run_onnx_case("topk_runtime_k"); }
TEST(DataDependentOps, OnnxTopKRunTimeKSmallestAxis0) { run_onnx_case("topk_runtime_k_smallest_axis0_int64"); }
TEST(DataDependentOps, OnnxTopKRunTimeKLongRows) { run_onnx_case("topk_runtime_k_long_rows"); }

// ---- the same through the network API -------------------------------------------------------------

Tensor* input_like(Network& net, const std::string& name, const HostTensor& t) {
  Dims d = t.dims();
  for (int a = 0; a < d.rank(); ++a) d[a] = kDynamic;
  return net.add_input(name, t.type(), d);
}

TEST(DataDependentOps, NonMaxSuppressionLayer) {
  const Case c = load_case("nms_corners_runtime_scalars");
  for (DeviceType device : usable_devices()) {
    SCOPED_TRACE(to_string(device));
    Network net;
    std::vector<Tensor*> in;
    for (int i = 0; i < c.inputs; ++i)
      in.push_back(input_like(net, "in" + std::to_string(i), c.in[0][static_cast<size_t>(i)]));
    Layer* nms = net.add_layer(kLayerNonMaxSuppression, in, 2, {}, "nms");
    nms->output(0)->set_name("selected");
    net.mark_output(nms->output(0));
    run_sets(net, c, device);
  }
}

// A constant max_output_boxes_per_class bounds the output by B*C*min(N, max); the optional
// score_threshold is omitted (every box is a candidate).
TEST(DataDependentOps, NonMaxSuppressionLayerWithConstantMaxAndCenters) {
  const Case c = load_case("nms_center_constant_max");  // inputs boxes, scores, iou; max = 4
  for (DeviceType device : usable_devices()) {
    SCOPED_TRACE(to_string(device));
    Network net;
    Tensor* boxes = input_like(net, "boxes", c.in[0][0]);
    Tensor* scores = input_like(net, "scores", c.in[0][1]);
    Tensor* iou = input_like(net, "iou", c.in[0][2]);
    HostTensor four(DataType::kInt64, Dims{});
    four.as<int64_t>()[0] = 4;
    Tensor* max = net.add_constant(four, "max")->output(0);
    Attributes a;
    a.set("center_point_box", int64_t{1});
    Layer* nms = net.add_layer(kLayerNonMaxSuppression, {boxes, scores, max, iou}, 2, std::move(a), "nms");
    nms->output(0)->set_name("selected");
    net.mark_output(nms->output(0));
    run_sets(net, c, device);
    const OptimizationProfile profile = profile_for(net, c);
    auto engine = build(net, device, &profile);
    auto ctx = engine->create_execution_context();
    ctx->set_input_shape("boxes", Dims{3, 12, 4});
    ctx->set_input_shape("scores", Dims{3, 4, 12});
    ctx->set_input_shape("iou", Dims{1});
    EXPECT_EQ(ctx->max_tensor_shape("selected"), (Dims{3 * 4 * 4, 3}));
  }
}

TEST(DataDependentOps, NonMaxSuppressionWithoutMaxSelectsNothing) {
  for (DeviceType device : usable_devices()) {
    SCOPED_TRACE(to_string(device));
    Network net;
    Tensor* boxes = net.add_input("boxes", DataType::kFloat32, Dims{1, 2, 4});
    Tensor* scores = net.add_input("scores", DataType::kFloat32, Dims{1, 1, 2});
    Layer* nms = net.add_layer(kLayerNonMaxSuppression, {boxes, scores}, 2, {}, "nms");
    nms->output(0)->set_name("selected");
    net.mark_output(nms->output(0));
    auto engine = build(net, device);
    auto ctx = engine->create_execution_context();
    Io io(*engine, *ctx);
    HostTensor b(DataType::kFloat32, Dims{1, 2, 4}), s(DataType::kFloat32, Dims{1, 1, 2});
    const float box_values[] = {0, 0, 1, 1, 5, 5, 6, 6};
    std::copy(std::begin(box_values), std::end(box_values), b.as<float>());
    s.as<float>()[0] = 0.9f;
    s.as<float>()[1] = 0.8f;
    io.input("boxes", b);
    io.input("scores", s);
    io.output("selected");
    ctx->execute();
    EXPECT_EQ(io.read("selected").dims(), (Dims{0, 3}));  // ONNX: max_output_boxes_per_class defaults to 0
  }
}

TEST(DataDependentOps, UniqueLayer) {
  for (const std::string name : {"unique_axis1_first_occurrence_int8", "unique_flat_sorted"}) {
    const Case c = load_case(name);
    const bool flat = name == "unique_flat_sorted";
    for (DeviceType device : usable_devices()) {
      SCOPED_TRACE(name + " on " + to_string(device));
      Network net;
      Tensor* x = input_like(net, "x", c.in[0][0]);
      Attributes a;
      a.set("sorted", int64_t{flat ? 1 : 0});
      a.set("flatten", int64_t{flat ? 1 : 0});
      a.set("axis", int64_t{1});
      Layer* u = net.add_layer(kLayerUnique, {x}, 5, std::move(a), "unique");
      for (int i = 0; i < 4; ++i) {
        u->output(i)->set_name("o" + std::to_string(i));
        net.mark_output(u->output(i));
      }
      run_sets(net, c, device);
    }
  }
}

// TopK with k a network input: output 2 is the k the kernel read; later layers follow it.
TEST(DataDependentOps, TopKLayerWithRunTimeKFeedsLaterLayers) {
  const Case c = load_case("topk_runtime_k");  // x [*, *], k [1]; axis 1, largest
  for (DeviceType device : usable_devices()) {
    SCOPED_TRACE(to_string(device));
    Network net;
    Tensor* x = input_like(net, "x", c.in[0][0]);
    Tensor* k = input_like(net, "k", c.in[0][1]);
    Attributes a;
    a.set("axis", int64_t{1});
    Layer* top = net.add_layer(kLayerTopK, {x, k}, 3, std::move(a), "top");
    Tensor* values = net.add_unary(top->output(0), UnaryOp::kNeg)->output(0);  // a later layer sized by k
    values->set_name("neg_values");
    top->output(1)->set_name("indices");
    net.mark_output(values);
    net.mark_output(top->output(1));
    const OptimizationProfile profile = profile_for(net, c);
    auto engine = build(net, device, &profile);
    EXPECT_EQ(engine->io_tensor("indices").dims, (Dims{kDynamic, kDynamic}));
    auto ctx = engine->create_execution_context();
    for (int s = 0; s < c.sets; ++s) {
      SCOPED_TRACE("set " + std::to_string(s));
      const auto& in = c.in[static_cast<size_t>(s)];
      const auto& out = c.out[static_cast<size_t>(s)];
      Io io(*engine, *ctx);
      io.input("x", in[0]);
      io.input("k", in[1]);
      io.output("neg_values");
      io.output("indices");
      ctx->execute();
      const HostTensor neg = io.read("neg_values");
      ASSERT_EQ(neg.dims(), out[0].dims());
      for (int64_t e = 0; e < neg.count(); ++e) EXPECT_EQ(neg.as<float>()[e], -out[0].as<float>()[e]) << e;
      std::string message;
      EXPECT_TRUE(test::compare_tensors(io.read("indices"), out[1], 0, 0, nullptr, &message)) << message;
    }
  }
}

// With a constant k the 3-output layer has static dims (nothing data-dependent) and output 2 is k.
TEST(DataDependentOps, TopKLayerWithConstantKStaysStatic) {
  for (DeviceType device : usable_devices()) {
    SCOPED_TRACE(to_string(device));
    Network net;
    Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2, 6});
    HostTensor kv(DataType::kInt64, Dims{1});
    kv.as<int64_t>()[0] = 2;
    Tensor* k = net.add_constant(kv, "k")->output(0);
    Layer* top = net.add_layer(kLayerTopK, {x, k}, 3, {}, "top");
    top->output(0)->set_name("values");
    top->output(2)->set_name("k_out");
    net.mark_output(top->output(0));
    net.mark_output(top->output(2));
    auto engine = build(net, device);
    EXPECT_EQ(engine->io_tensor("values").dims, (Dims{2, 2}));
    auto ctx = engine->create_execution_context();
    Io io(*engine, *ctx);
    HostTensor xv(DataType::kFloat32, Dims{2, 6});
    const float v[] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8};
    std::copy(std::begin(v), std::end(v), xv.as<float>());
    io.input("x", xv);
    io.output("values");
    io.output("k_out");
    ctx->execute();
    const HostTensor values = io.read("values");
    const float expected[] = {9, 5, 8, 6};  // the two largest of each row, largest first
    for (int e = 0; e < 4; ++e) EXPECT_EQ(values.as<float>()[e], expected[e]) << e;
    EXPECT_EQ(io.read("k_out").as<int64_t>()[0], 2);
  }
}

TEST(DataDependentOps, TopKWithTwoOutputsNeedsAKnownK) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2, 6});
  Tensor* k = net.add_input("k", DataType::kInt64, Dims{1});
  Layer* top = net.add_layer(kLayerTopK, {x, k}, 2, {}, "old_top");
  net.mark_output(top->output(0));
  try {
    (void)build(net, DeviceType::kCPU);
    FAIL() << "a 2-output TopK with a run-time k must be refused";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("old_top"), std::string::npos) << msg;
    EXPECT_NE(msg.find("must be known when shapes are inferred"), std::string::npos) << msg;
  }
}

TEST(DataDependentOps, TopKRunTimeKBeyondTheAxisIsAClearError) {
  for (DeviceType device : usable_devices()) {
    SCOPED_TRACE(to_string(device));
    Network net;
    Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2, 6});
    Tensor* k = net.add_input("k", DataType::kInt64, Dims{1});
    Layer* top = net.add_layer(kLayerTopK, {x, k}, 3, {}, "pick_top");
    top->output(0)->set_name("values");
    net.mark_output(top->output(0));
    auto engine = build(net, device);
    auto ctx = engine->create_execution_context();
    Io io(*engine, *ctx);
    io.input("x", HostTensor(DataType::kFloat32, Dims{2, 6}));
    HostTensor kv(DataType::kInt64, Dims{1});
    kv.as<int64_t>()[0] = 7;
    io.input("k", kv);
    io.output("values");
    try {
      ctx->execute();
      FAIL() << "k = 7 on an axis of 6 must fail";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("pick_top"), std::string::npos) << msg;
      EXPECT_NE(msg.find("0, 6]"), std::string::npos) << msg;
    }
  }
}

}  // namespace
}  // namespace kiln
