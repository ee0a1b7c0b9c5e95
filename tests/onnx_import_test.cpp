// Tests of the ONNX importer (src/onnx): small models from tests/data/onnx/generate.py, one per
// tricky mapping, checked layer by layer against the kiln IR of docs/layers.md; error reporting
// (every unsupported node in one ParseError, node-named errors, malformed files); the shared
// test models when present; and, for the runnable small models, kiln's outputs against ONNX
// Runtime's (saved as .npy by the generator).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "kiln/kiln.h"
#include "src/core/half.h"
#include "src/core/tensor_io.h"
#include "src/onnx/onnx_proto.h"
#include "tests/op_harness.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

std::string data_path(const std::string& name) { return std::string(KILN_SOURCE_DIR) + "/tests/data/onnx/" + name; }

std::unique_ptr<Network> import_model(const std::string& file) {
  auto net = std::make_unique<Network>();
  OnnxParser parser(*net);
  parser.parse_file(file);
  return net;
}

std::unique_ptr<Network> import_data(const std::string& name) { return import_model(data_path(name + ".onnx")); }

// The message of the kiln::Error (or subclass E) that parsing throws; fails the test otherwise.
template <typename E = Error>
std::string parse_error(const std::string& file) {
  Network net;
  OnnxParser parser(net);
  try {
    parser.parse_file(file);
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "unexpected exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "parsing " << file << " did not throw";
  return "";
}

Layer* get_layer(const Network& net, const std::string& name) {
  Layer* l = net.find_layer(name);
  if (!l) {
    ADD_FAILURE() << "no layer named '" << name << "' in:\n" << to_text(net);
    throw std::runtime_error("missing layer " + name);
  }
  return l;
}

Layer* producer(const Network& net, const std::string& tensor) {
  Tensor* t = net.find_tensor(tensor);
  if (!t || !t->producer()) {
    ADD_FAILURE() << "tensor '" << tensor << "' missing or without producer in:\n" << to_text(net);
    throw std::runtime_error("missing tensor " + tensor);
  }
  return t->producer();
}

// The value of a tensor produced by a Constant layer.
HostTensor constant_of(const Tensor* t) {
  if (!t || !t->producer() || t->producer()->type() != kLayerConstant) {
    ADD_FAILURE() << "tensor " << (t ? t->name() : "<null>") << " is not a Constant layer output";
    throw std::runtime_error("not a constant");
  }
  return t->producer()->attrs().get_tensor("value");
}

std::vector<double> values_of(const Tensor* t) { return constant_of(t).to_double(); }

int count_layers(const Network& net, const std::string& type, const std::string& attr = "",
                 const std::string& value = "") {
  int n = 0;
  for (int i = 0; i < net.num_layers(); ++i) {
    const Layer* l = net.layer(i);
    if (l->type() == type && (attr.empty() || l->attrs().get_string(attr) == value)) ++n;
  }
  return n;
}

using Ints = std::vector<int64_t>;
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- BatchNormalization ------------------------------------------------------------------------

TEST(OnnxImport, BatchNormBecomesChannelScale) {
  auto net = import_data("batchnorm");
  // The generator's values.
  const std::vector<double> gamma{0.5, 1.0, 2.0}, beta{0.1, -0.2, 0.3}, mean{0.0, 1.0, -1.0}, var{1.0, 4.0, 0.25};
  const double eps = static_cast<double>(1e-3f);
  Layer* bn = get_layer(*net, "bn");
  EXPECT_EQ(bn->type(), kLayerScale);
  EXPECT_EQ(bn->attrs().get_string("mode"), "channel");
  EXPECT_EQ(bn->attrs().get_int("channel_axis", -7), 1);
  ASSERT_GE(bn->num_inputs(), 3);
  EXPECT_EQ(bn->input(0)->name(), "x");
  EXPECT_EQ(bn->input(0)->dims(), (Dims{kDynamic, 3, 4, 4}));
  const auto scale = values_of(bn->input(1));
  const auto shift = values_of(bn->input(2));
  ASSERT_EQ(scale.size(), 3u);
  ASSERT_EQ(shift.size(), 3u);
  for (size_t c = 0; c < 3; ++c) {
    const double s = gamma[c] / std::sqrt(var[c] + eps);
    EXPECT_NEAR(scale[c], s, 1e-6) << c;
    EXPECT_NEAR(shift[c], beta[c] - mean[c] * s, 1e-6) << c;
  }
  for (int i = 3; i < bn->num_inputs(); ++i) EXPECT_EQ(bn->input(i), nullptr);
  // The statistics were folded: no Constant layers for them.
  for (const char* name : {"gamma", "beta", "mean", "var"}) EXPECT_EQ(net->find_layer(name), nullptr) << name;
  ASSERT_EQ(net->num_outputs(), 1);
  EXPECT_EQ(net->output(0), bn->output(0));
  EXPECT_EQ(net->output(0)->name(), "y");
  EXPECT_NO_THROW(net->validate());
}

TEST(OnnxImport, BatchNormWithNonConstantStatisticsNamesTheNode) {
  const std::string msg = parse_error<ParseError>(data_path("batchnorm_dynamic.onnx"));
  EXPECT_NE(msg.find("bn_dyn"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'gamma'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("constant"), std::string::npos) << msg;
}

// ---- Clip --------------------------------------------------------------------------------------

void expect_clip(const Network& net, const std::string& name, double lo, double hi) {
  Layer* l = get_layer(net, name);
  EXPECT_EQ(l->type(), kLayerActivation);
  EXPECT_EQ(l->attrs().get_string("kind"), "clip");
  EXPECT_EQ(l->attrs().get_float("alpha"), lo) << name;
  EXPECT_EQ(l->attrs().get_float("beta"), hi) << name;
  EXPECT_EQ(l->num_inputs(), 1);
}

TEST(OnnxImport, ClipOpset6UsesAttributes) {
  auto net = import_data("clip6");
  expect_clip(*net, "clip_both", -1.0, 2.0);
  expect_clip(*net, "clip_max", -kInf, 0.5);
  EXPECT_NO_THROW(net->validate());
}

TEST(OnnxImport, ClipOpset13UsesConstantInputs) {
  auto net = import_data("clip13");
  expect_clip(*net, "clip_min", -0.5, kInf);
  expect_clip(*net, "clip_max", -kInf, 1.5);
  // Bounds were read at import: no Constant layers for them.
  EXPECT_EQ(net->find_layer("lo"), nullptr);
  EXPECT_EQ(net->find_layer("hi_const"), nullptr);
  EXPECT_NO_THROW(net->validate());
}

TEST(OnnxImport, ClipWithDynamicBoundIsAnErrorNamingTheNode) {
  const std::string msg = parse_error<ParseError>(data_path("clip13_dynamic.onnx"));
  EXPECT_NE(msg.find("clip_dyn"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'lo'"), std::string::npos) << msg;
}

// ---- Squeeze / Unsqueeze -------------------------------------------------------------------------

void expect_squeeze_pair(const Network& net) {
  Layer* sq = get_layer(net, "sq");
  EXPECT_EQ(sq->type(), kLayerShuffle);
  EXPECT_EQ(sq->attrs().get_string("reshape_mode"), "squeeze");
  EXPECT_EQ(sq->attrs().get_ints("axes"), (Ints{0, 2}));
  EXPECT_EQ(sq->num_inputs(), 1);
  Layer* unsq = get_layer(net, "unsq");
  EXPECT_EQ(unsq->attrs().get_string("reshape_mode"), "unsqueeze");
  EXPECT_EQ(unsq->attrs().get_ints("axes"), (Ints{1}));
  EXPECT_EQ(unsq->input(0), sq->output(0));
  EXPECT_EQ(sq->output(0)->name(), "s");
}

TEST(OnnxImport, SqueezeOpset11AxesAttribute) {
  auto net = import_data("squeeze11");
  expect_squeeze_pair(*net);
  EXPECT_NO_THROW(net->validate());
}

TEST(OnnxImport, SqueezeOpset13AxesInput) {
  auto net = import_data("squeeze13");
  expect_squeeze_pair(*net);
  EXPECT_EQ(net->find_layer("sq_axes"), nullptr);
  EXPECT_NO_THROW(net->validate());
}

// ---- Softmax -------------------------------------------------------------------------------------

TEST(OnnxImport, SoftmaxOpset11On3DFlattensAndRestoresTheShape) {
  auto net = import_data("softmax11");
  Tensor* x = net->find_tensor("x");
  // y1 = reshape(softmax(flatten(x, 1), -1), shape(x))
  Layer* back = producer(*net, "y1");
  EXPECT_EQ(back->type(), kLayerShuffle);
  EXPECT_EQ(back->attrs().get_string("reshape_mode"), "dims");
  ASSERT_EQ(back->num_inputs(), 2);
  Layer* shape = back->input(1)->producer();
  ASSERT_NE(shape, nullptr);
  EXPECT_EQ(shape->type(), kLayerShape);
  EXPECT_EQ(shape->input(0), x);
  Layer* sm = back->input(0)->producer();
  ASSERT_NE(sm, nullptr);
  EXPECT_EQ(sm->type(), kLayerSoftMax);
  EXPECT_EQ(sm->attrs().get_int("axis", 99), -1);
  EXPECT_EQ(sm->attrs().get_int("log", 0), 0);
  Layer* flat = sm->input(0)->producer();
  ASSERT_NE(flat, nullptr);
  EXPECT_EQ(flat->type(), kLayerShuffle);
  EXPECT_EQ(flat->attrs().get_string("reshape_mode"), "flatten");
  EXPECT_EQ(flat->attrs().get_int("axis", 99), 1);
  EXPECT_EQ(flat->input(0), x);
  // Axis 2 of a 3-D input is the last one: a plain softmax.
  Layer* last = producer(*net, "y2");
  EXPECT_EQ(last->type(), kLayerSoftMax);
  EXPECT_EQ(last->attrs().get_int("axis", 99), -1);
  EXPECT_EQ(last->input(0), x);
  Layer* log = producer(*net, "y3");
  EXPECT_EQ(log->type(), kLayerSoftMax);
  EXPECT_EQ(log->attrs().get_int("log", 0), 1);
  EXPECT_NO_THROW(net->validate());
}

TEST(OnnxImport, SoftmaxOpset13UsesTheAxis) {
  auto net = import_data("softmax13");
  Layer* sm = get_layer(*net, "sm");
  EXPECT_EQ(sm->type(), kLayerSoftMax);
  EXPECT_EQ(sm->attrs().get_int("axis", 99), 1);
  EXPECT_EQ(net->num_layers(), 1);
}

// ---- Resize / Upsample -----------------------------------------------------------------------------

TEST(OnnxImport, ResizeOpset10IsAsymmetricFloor) {
  auto net = import_data("resize10");
  Layer* rs = get_layer(*net, "rs");
  EXPECT_EQ(rs->type(), kLayerResize);
  EXPECT_EQ(rs->attrs().get_string("mode"), "nearest");
  EXPECT_EQ(rs->attrs().get_string("coordinate_transformation_mode"), "asymmetric");
  EXPECT_EQ(rs->attrs().get_string("nearest_mode"), "floor");
  ASSERT_EQ(rs->num_inputs(), 2);
  EXPECT_EQ(values_of(rs->input(1)), (std::vector<double>{1, 1, 2, 2}));
  EXPECT_NO_THROW(net->validate());
}

TEST(OnnxImport, ResizeOpset13DropsRoiAndEmptyInputs) {
  auto net = import_data("resize13");
  Layer* sizes = get_layer(*net, "rs_sizes");
  ASSERT_EQ(sizes->num_inputs(), 3);
  EXPECT_EQ(sizes->input(1), nullptr);
  EXPECT_EQ(values_of(sizes->input(2)), (std::vector<double>{1, 2, 5, 7}));
  EXPECT_EQ(sizes->attrs().get_string("mode"), "linear");
  EXPECT_EQ(sizes->attrs().get_string("coordinate_transformation_mode"), "align_corners");
  Layer* scales = get_layer(*net, "rs_scales");
  ASSERT_EQ(scales->num_inputs(), 2);  // roi dropped, sizes ""
  EXPECT_EQ(values_of(scales->input(1)), (std::vector<double>{1, 1, 2, 2}));
  EXPECT_EQ(scales->attrs().get_string("nearest_mode"), "floor");
  Layer* empty = get_layer(*net, "rs_empty_scales");  // zero-size scales = absent
  ASSERT_EQ(empty->num_inputs(), 3);
  EXPECT_EQ(empty->input(1), nullptr);
  EXPECT_EQ(empty->attrs().get_string("coordinate_transformation_mode"), "half_pixel");
  EXPECT_EQ(empty->attrs().get_string("nearest_mode"), "round_prefer_floor");
  EXPECT_EQ(net->find_layer("roi"), nullptr);
  EXPECT_NO_THROW(net->validate());
}

TEST(OnnxImport, UpsampleOpset7ScalesAttribute) {
  auto net = import_data("upsample7");
  Layer* up = get_layer(*net, "up");
  EXPECT_EQ(up->type(), kLayerResize);
  EXPECT_EQ(up->attrs().get_string("coordinate_transformation_mode"), "asymmetric");
  ASSERT_EQ(up->num_inputs(), 2);
  const HostTensor scales = constant_of(up->input(1));
  EXPECT_EQ(scales.type(), DataType::kFloat32);
  EXPECT_EQ(scales.to_double(), (std::vector<double>{1, 1, 2, 3}));
}

// ---- Split ---------------------------------------------------------------------------------------

TEST(OnnxImport, SplitSizesFromAttributeInputOrOutputs) {
  for (const char* name : {"split11", "split13"}) {
    auto net = import_data(name);
    Layer* s = get_layer(*net, "split");
    EXPECT_EQ(s->type(), kLayerSplit);
    EXPECT_EQ(s->attrs().get_int("axis", 99), 1) << name;
    EXPECT_EQ(s->attrs().get_ints("split"), (Ints{2, 3})) << name;
    ASSERT_EQ(s->num_outputs(), 2);
    EXPECT_EQ(s->output(0)->name(), "a");
    EXPECT_EQ(s->output(1)->name(), "b");
    EXPECT_NO_THROW(net->validate()) << name;
  }
  auto net = import_data("split18");
  Layer* s = get_layer(*net, "split");
  EXPECT_FALSE(s->attrs().has("split"));
  EXPECT_EQ(s->attrs().get_int("axis", 99), 0);
  ASSERT_EQ(s->num_outputs(), 3);
  EXPECT_EQ(s->output(2)->name(), "c");
}

// ---- ConvTranspose and auto_pad --------------------------------------------------------------------

TEST(OnnxImport, ConvTransposeOutputShapeAndSameUpperBecomePads) {
  auto net = import_data("convtranspose");
  // total padding = stride*(in-1) + output_padding + kernel - out = 2*2 + 0 + 3 - 6 = 1: with
  // output_shape and NOTSET the larger half goes first; SAME_UPPER (out = in*stride) puts it last.
  Layer* a = get_layer(*net, "ct_output_shape");
  EXPECT_EQ(a->type(), kLayerDeconvolution);
  EXPECT_EQ(a->attrs().get_ints("pads"), (Ints{1, 1, 0, 0}));
  EXPECT_EQ(a->attrs().get_ints("strides"), (Ints{2, 2}));
  EXPECT_EQ(a->attrs().get_ints("output_padding"), (Ints{0, 0}));
  EXPECT_EQ(a->num_inputs(), 3);
  EXPECT_EQ(a->input(1)->name(), "w");
  Layer* b = get_layer(*net, "ct_same_upper");
  EXPECT_EQ(b->attrs().get_ints("pads"), (Ints{0, 0, 1, 1}));
  EXPECT_EQ(b->num_inputs(), 2);
  EXPECT_EQ(b->input(1), a->input(1));  // one Constant layer for the shared weights
  EXPECT_NO_THROW(net->validate());
}

TEST(OnnxImport, AutoPadSameAndValid) {
  auto net = import_data("autopad");
  // out = ceil(7/2) = 4; total = 3*2 + 4 - 7 = 3 -> SAME_UPPER puts the extra one at the end.
  EXPECT_EQ(get_layer(*net, "conv_same_upper")->attrs().get_ints("pads"), (Ints{1, 1, 2, 2}));
  Layer* mp = get_layer(*net, "maxpool_same_lower");  // stride 1, kernel 2: total 1, at the start
  EXPECT_EQ(mp->type(), kLayerPooling);
  EXPECT_EQ(mp->attrs().get_string("mode"), "max");
  EXPECT_EQ(mp->attrs().get_ints("pads"), (Ints{1, 1, 0, 0}));
  EXPECT_EQ(mp->attrs().get_ints("kernel"), (Ints{2, 2}));
  Layer* ap = get_layer(*net, "avgpool_same_lower");  // total 3*2 + 2 - 7 = 1
  EXPECT_EQ(ap->attrs().get_string("mode"), "average");
  EXPECT_EQ(ap->attrs().get_ints("pads"), (Ints{1, 1, 0, 0}));
  EXPECT_EQ(get_layer(*net, "conv_valid")->attrs().get_ints("pads"), (Ints{0, 0, 0, 0}));
  EXPECT_NO_THROW(net->validate());
}

TEST(OnnxImport, AutoPadWithStrideNeedsStaticDims) {
  const std::string path = data_path("autopad_dynamic.onnx");
  const auto problems = OnnxParser::check_file(path);
  ASSERT_EQ(problems.size(), 1u);  // stride 1 works without dims; stride 2 does not
  EXPECT_EQ(problems[0].node_name, "conv_s2");
  EXPECT_NE(problems[0].reason.find("auto_pad"), std::string::npos) << problems[0].reason;
  EXPECT_NE(problems[0].reason.find("static spatial dims"), std::string::npos) << problems[0].reason;
  const std::string msg = parse_error<ParseError>(path);
  EXPECT_NE(msg.find("conv_s2"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("conv_s1"), std::string::npos) << msg;
}

// ---- tensors: external data, typed fields --------------------------------------------------------

TEST(OnnxImport, ExternalDataIsReadFromTheModelFolder) {
  auto net = import_data("external_data");
  Layer* conv = get_layer(*net, "conv");
  EXPECT_EQ(conv->type(), kLayerConvolution);
  const HostTensor w = constant_of(conv->input(1));
  EXPECT_EQ(w.dims(), (Dims{4, 3, 3, 3}));
  const auto wv = w.to_double();
  for (size_t i = 0; i < wv.size(); ++i) ASSERT_EQ(wv[i], static_cast<double>(static_cast<float>(i) / 100.0f)) << i;
  EXPECT_EQ(values_of(conv->input(2)), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(conv->attrs().get_ints("pads"), (Ints{1, 1, 1, 1}));
  const HostTensor h = constant_of(get_layer(*net, "cast")->input(0));
  EXPECT_EQ(h.type(), DataType::kFloat16);
  EXPECT_EQ(static_cast<float>(h.as<half>()[0]), 0.5f);

  // parse_bytes resolves external data against base_dir.
  std::ifstream in(data_path("external_data.onnx"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Network ok;
  EXPECT_NO_THROW(OnnxParser(ok).parse_bytes(bytes.data(), bytes.size(), data_path("")));
  Network bad;
  try {
    OnnxParser(bad).parse_bytes(bytes.data(), bytes.size(), "/nonexistent_kiln_dir", "mem_model");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("external_data.bin"), std::string::npos) << e.what();
  }
}

TEST(OnnxImport, ExternalDataOutsideTheFileOrFolderIsRejected) {
  std::string msg = parse_error(data_path("external_past_end.onnx"));
  EXPECT_NE(msg.find("'w'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("past the end"), std::string::npos) << msg;
  msg = parse_error(data_path("external_escape.onnx"));
  EXPECT_NE(msg.find("leaves the model's folder"), std::string::npos) << msg;
}

TEST(OnnxImport, TypedFieldTensors) {
  auto net = import_data("typed_fields");
  auto value = [&](const char* out) {
    Layer* id = producer(*net, out);  // graph outputs that are constants get an Identity
    EXPECT_EQ(id->type(), kLayerIdentity) << out;
    return constant_of(id->input(0));
  };
  const HostTensor i64 = value("o1");
  EXPECT_EQ(i64.type(), DataType::kInt64);
  EXPECT_EQ(i64.to_int64(), (Ints{-1, 0, int64_t{1} << 40}));
  const HostTensor f16 = value("o2");
  ASSERT_EQ(f16.type(), DataType::kFloat16);
  EXPECT_EQ(static_cast<float>(f16.as<half>()[0]), 1.5f);
  EXPECT_EQ(static_cast<float>(f16.as<half>()[1]), -2.0f);
  const HostTensor i8 = value("o3");
  EXPECT_EQ(i8.type(), DataType::kInt8);
  EXPECT_EQ(i8.to_int64(), (Ints{-7, 100}));
  const HostTensor f32 = value("o4");
  EXPECT_EQ(f32.to_double(), (std::vector<double>{0.25, -3.0}));
  EXPECT_EQ(net->num_outputs(), 4);
  EXPECT_NO_THROW(net->validate());
}

// ---- unsupported nodes -----------------------------------------------------------------------------

TEST(OnnxImport, EveryUnsupportedNodeIsListedOnce) {
  const std::string path = data_path("unsupported.onnx");
  const auto problems = OnnxParser::check_file(path);
  ASSERT_EQ(problems.size(), 3u);
  EXPECT_EQ(problems[0].node_name, "foo");
  EXPECT_EQ(problems[0].op_type, "FooBar");
  EXPECT_EQ(problems[0].domain, "");
  EXPECT_EQ(problems[0].opset, 13);
  EXPECT_EQ(problems[1].node_name, "custom_1");
  EXPECT_EQ(problems[1].op_type, "MyOp");
  EXPECT_EQ(problems[1].domain, "com.example");
  EXPECT_EQ(problems[1].opset, 3);
  EXPECT_NE(problems[1].reason.find("com.example"), std::string::npos);
  EXPECT_EQ(problems[2].node_name, "pool_storage");
  EXPECT_NE(problems[2].reason.find("storage_order"), std::string::npos) << problems[2].reason;

  const std::string msg = parse_error<ParseError>(path);
  for (const char* s : {"foo", "FooBar", "custom_1", "MyOp", "com.example", "pool_storage", "storage_order", "hint",
                        "unsupported.onnx"}) {
    EXPECT_NE(msg.find(s), std::string::npos) << s << " missing from: " << msg;
  }
  // Nodes downstream of an unsupported one are not blamed.
  EXPECT_EQ(msg.find("relu_after"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("clip_consequence"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("'add'"), std::string::npos) << msg;
}

// ---- a broad sample of mappings ------------------------------------------------------------------

TEST(OnnxImport, MiscMappings) {
  auto net = import_data("misc");
  EXPECT_EQ(net->find_tensor("x")->dims(), (Dims{kDynamic, 3, 4}));
  EXPECT_EQ(net->num_inputs(), 5);

  Layer* mean = producer(*net, "mean");  // ((x + x2) + x3) * 1/3
  EXPECT_EQ(mean->type(), kLayerScale);
  EXPECT_EQ(mean->attrs().get_string("mode"), "uniform");
  EXPECT_NEAR(values_of(mean->input(1))[0], 1.0 / 3.0, 1e-7);
  Layer* sum2 = mean->input(0)->producer();
  ASSERT_NE(sum2, nullptr);
  EXPECT_EQ(sum2->attrs().get_string("op"), "sum");
  EXPECT_EQ(sum2->input(1)->name(), "x3");
  EXPECT_EQ(sum2->input(0)->producer()->input(1)->name(), "x2");

  Layer* gemm = get_layer(*net, "gemm");
  EXPECT_EQ(gemm->type(), kLayerGemm);
  EXPECT_EQ(gemm->attrs().get_float("alpha"), 0.5);
  EXPECT_EQ(gemm->attrs().get_int("trans_b"), 1);
  EXPECT_EQ(gemm->attrs().get_int("trans_a", 9), 0);
  EXPECT_EQ(gemm->num_inputs(), 3);

  EXPECT_EQ(get_layer(*net, "transpose_default")->attrs().get_ints("first_transpose"), (Ints{2, 1, 0}));
  Layer* rz = get_layer(*net, "reshape_allowzero");
  EXPECT_EQ(rz->attrs().get_string("reshape_mode"), "dims");
  EXPECT_EQ(rz->attrs().get_int("zero_is_placeholder", 9), 0);
  EXPECT_EQ(values_of(rz->input(1)), (std::vector<double>{0, -1}));
  EXPECT_EQ(rz->input(1)->name(), "shape");
  Layer* rd = get_layer(*net, "reshape_dynamic");
  EXPECT_EQ(rd->attrs().get_int("zero_is_placeholder", 9), 1);
  EXPECT_TRUE(rd->input(1)->is_network_input());

  EXPECT_EQ(get_layer(*net, "prelu")->type(), kLayerParametricReLU);
  Layer* selu = get_layer(*net, "selu");
  EXPECT_EQ(selu->attrs().get_string("kind"), "selu");
  EXPECT_EQ(selu->attrs().get_float("alpha"), 1.67326319217681884765625);
  EXPECT_EQ(selu->attrs().get_float("beta"), 1.05070102214813232421875);
  Layer* hs = get_layer(*net, "hard_sigmoid");
  EXPECT_EQ(hs->attrs().get_string("kind"), "hard_sigmoid");
  EXPECT_EQ(hs->attrs().get_float("alpha"), 0.2);
  EXPECT_EQ(hs->attrs().get_float("beta"), 0.5);

  Layer* where = get_layer(*net, "where");
  EXPECT_EQ(where->type(), kLayerSelect);
  EXPECT_EQ(where->input(0)->producer()->attrs().get_string("op"), "greater");
  Layer* pad = get_layer(*net, "pad");
  EXPECT_EQ(pad->type(), kLayerPadding);
  EXPECT_EQ(pad->attrs().get_string("mode"), "reflect");
  EXPECT_EQ(pad->num_inputs(), 3);
  Layer* slice = get_layer(*net, "slice");
  ASSERT_EQ(slice->num_inputs(), 5);
  EXPECT_EQ(slice->input(3), nullptr);
  EXPECT_EQ(slice->input(4)->name(), "steps");
  Layer* flat = get_layer(*net, "flatten");
  EXPECT_EQ(flat->attrs().get_string("reshape_mode"), "flatten");
  EXPECT_EQ(flat->attrs().get_int("axis"), 2);
  EXPECT_EQ(get_layer(*net, "shape_tail")->attrs().get_int("start"), 1);
  Layer* fill = get_layer(*net, "fill");
  EXPECT_EQ(fill->type(), kLayerFill);
  EXPECT_EQ(fill->attrs().get_string("mode"), "constant");
  EXPECT_EQ(fill->attrs().get_tensor("value").to_int64(), (Ints{7}));
  EXPECT_EQ(fill->attrs().get_tensor("value").type(), DataType::kInt64);
  Layer* range = get_layer(*net, "range");
  EXPECT_EQ(range->attrs().get_string("mode"), "range");
  EXPECT_EQ(range->num_inputs(), 3);
  EXPECT_EQ(get_layer(*net, "expand")->type(), kLayerExpand);
  EXPECT_EQ(get_layer(*net, "tile")->type(), kLayerTile);
  Layer* gather = get_layer(*net, "gather");
  EXPECT_EQ(gather->attrs().get_string("mode"), "default");
  EXPECT_EQ(gather->attrs().get_int("axis"), 1);
  Layer* gel = get_layer(*net, "gather_elements");
  EXPECT_EQ(gel->attrs().get_string("mode"), "elements");
  EXPECT_EQ(gel->attrs().get_int("axis"), 2);
  Layer* rmean = get_layer(*net, "reduce_mean");
  EXPECT_EQ(rmean->attrs().get_string("op"), "mean");
  EXPECT_EQ(rmean->attrs().get_ints("axes"), (Ints{1, 2}));
  EXPECT_EQ(rmean->attrs().get_int("keep_dims", 9), 0);
  Layer* rsum = get_layer(*net, "reduce_sum");
  EXPECT_EQ(rsum->attrs().get_ints("axes"), (Ints{-1}));
  EXPECT_EQ(rsum->attrs().get_int("keep_dims", 9), 1);
  EXPECT_EQ(get_layer(*net, "dropout")->type(), kLayerIdentity);
  EXPECT_EQ(get_layer(*net, "cast_i32")->attrs().get_string("to"), "int32");
  EXPECT_EQ(get_layer(*net, "sqrt")->attrs().get_string("op"), "sqrt");
  EXPECT_EQ(get_layer(*net, "not")->attrs().get_string("op"), "not");
  EXPECT_EQ(get_layer(*net, "matmul")->type(), kLayerMatrixMultiply);
  EXPECT_EQ(get_layer(*net, "concat")->attrs().get_int("axis"), -1);

  // Initializers as graph outputs: copied through an Identity under the ONNX name.
  for (const char* out : {"gw", "gw_copy"}) {
    Layer* id = producer(*net, out);
    EXPECT_EQ(id->type(), kLayerIdentity) << out;
    EXPECT_EQ(id->input(0)->producer()->type(), kLayerConstant) << out;
    EXPECT_TRUE(net->find_tensor(out)->is_network_output()) << out;
  }
  EXPECT_EQ(net->num_outputs(), 28);
  EXPECT_NO_THROW(net->validate());
}

TEST(OnnxImport, LegacyAttributesBecomeConstantInputs) {
  auto net = import_data("legacy9");
  Layer* slice = get_layer(*net, "slice_attrs");
  ASSERT_EQ(slice->num_inputs(), 4);
  EXPECT_EQ(values_of(slice->input(1)), (std::vector<double>{1}));
  EXPECT_EQ(values_of(slice->input(2)), (std::vector<double>{3}));
  EXPECT_EQ(values_of(slice->input(3)), (std::vector<double>{2}));
  EXPECT_EQ(constant_of(slice->input(1)).type(), DataType::kInt64);
  Layer* pad = get_layer(*net, "pad_attrs");
  ASSERT_EQ(pad->num_inputs(), 3);
  EXPECT_EQ(values_of(pad->input(1)), (std::vector<double>{0, 0, 1, 0, 0, 1}));
  EXPECT_EQ(values_of(pad->input(2)), (std::vector<double>{2.5}));
  EXPECT_EQ(pad->attrs().get_string("mode"), "constant");
  Layer* up = get_layer(*net, "upsample_input");
  EXPECT_EQ(up->attrs().get_string("mode"), "linear");
  EXPECT_EQ(up->attrs().get_string("coordinate_transformation_mode"), "asymmetric");
  EXPECT_EQ(up->input(1)->name(), "up_scales");
  EXPECT_NO_THROW(net->validate());
}

TEST(OnnxImport, Opset18AxesInputs) {
  auto net = import_data("opset18");
  // pads [1, 0 | 1, 1] on axes [1, -1] of a rank-3 input -> begins [0,1,0], ends [0,1,1].
  Layer* pad = get_layer(*net, "pad_axes");
  ASSERT_EQ(pad->num_inputs(), 2);
  EXPECT_EQ(values_of(pad->input(1)), (std::vector<double>{0, 1, 0, 0, 1, 1}));
  Layer* r = get_layer(*net, "reduce_axes");
  EXPECT_EQ(r->attrs().get_ints("axes"), (Ints{1}));
  EXPECT_EQ(get_layer(*net, "reduce_noop")->type(), kLayerIdentity);
  EXPECT_NO_THROW(net->validate());
}

TEST(OnnxImport, NamesDynamicDimsAndSpecialOutputs) {
  auto net = import_data("names");
  // IR 3 lists the initializer as a graph input: it is a constant, not a network input.
  ASSERT_EQ(net->num_inputs(), 1);
  EXPECT_EQ(net->input(0)->name(), "x");
  EXPECT_EQ(net->input(0)->dims(), (Dims{kDynamic, 3, kDynamic}));
  EXPECT_EQ(get_layer(*net, "Relu_0")->output(0)->name(), "r");
  EXPECT_EQ(get_layer(*net, "Add_1")->attrs().get_string("op"), "sum");
  EXPECT_EQ(get_layer(*net, "named_relu")->output(0)->name(), "z");
  ASSERT_EQ(net->num_outputs(), 3);
  EXPECT_EQ(net->output(0)->name(), "z");
  EXPECT_EQ(net->output(1)->name(), "bias");
  EXPECT_EQ(net->output(1)->producer()->type(), kLayerIdentity);
  // A graph input listed as an output is copied; the copy cannot share the input's name.
  EXPECT_EQ(net->output(2)->producer()->type(), kLayerIdentity);
  EXPECT_EQ(net->output(2)->producer()->input(0), net->input(0));
  EXPECT_NO_THROW(net->validate());
}

// ---- malformed files ---------------------------------------------------------------------------------

class OnnxMalformed : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_onnx_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
  }
  fs::path dir_;
};

TEST_F(OnnxMalformed, RandomBytesNameTheFile) {
  std::mt19937 gen(7);
  for (int round = 0; round < 20; ++round) {
    std::string bytes(static_cast<size_t>(64 + round * 37), '\0');
    for (char& c : bytes) c = static_cast<char>(gen() & 0xff);
    const std::string path = write("random_" + std::to_string(round) + ".onnx", bytes);
    const std::string msg = parse_error(path);
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_THROW(OnnxParser::check_file(path), Error);
  }
}

TEST_F(OnnxMalformed, TruncatedModelsNameTheFile) {
  std::ifstream in(data_path("misc.onnx"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 1000u);
  for (size_t cut : {bytes.size() / 2, bytes.size() - 1, size_t{5}}) {
    const std::string path = write("truncated_" + std::to_string(cut) + ".onnx", bytes.substr(0, cut));
    const std::string msg = parse_error(path);
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
  }
}

TEST_F(OnnxMalformed, MissingFileAndDirectory) {
  const std::string missing = (dir_ / "nope.onnx").string();
  EXPECT_NE(parse_error(missing).find(missing), std::string::npos);
  EXPECT_NE(parse_error(dir_.string()).find(dir_.string()), std::string::npos);
  const std::string empty = write("empty.onnx", "");
  EXPECT_NE(parse_error(empty).find(empty), std::string::npos);
}

// ---- the shared test models --------------------------------------------------------------------------

// KILN_TEST_MODELS_DIR overrides the folder of the shared models (e.g. on another machine).
std::string shared_model(const std::string& name) {
  const char* dir = std::getenv("KILN_TEST_MODELS_DIR");
  return std::string(dir && *dir ? dir : "/work/shared/models") + "/" + name + "/model.onnx";
}

onnx::ModelProto read_proto(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromIstream(&in)) << path;
  return m;
}

// Node counts by op type, read with protobuf directly (independent of the importer).
std::map<std::string, int> node_counts(const onnx::ModelProto& m) {
  std::map<std::string, int> counts;
  for (const auto& n : m.graph().node()) ++counts[n.op_type()];
  return counts;
}

#define SKIP_IF_ABSENT(path) \
  if (!fs::exists(path)) GTEST_SKIP() << path << " is not present"

TEST(OnnxModels, SqueezeNet) {
  const std::string path = shared_model("squeezenet1_1");
  SKIP_IF_ABSENT(path);
  auto net = import_model(path);
  auto counts = node_counts(read_proto(path));
  EXPECT_EQ(count_layers(*net, kLayerConvolution), counts["Conv"]);
  EXPECT_EQ(count_layers(*net, kLayerActivation, "kind", "relu"), counts["Relu"]);
  EXPECT_EQ(count_layers(*net, kLayerPooling, "mode", "max"), counts["MaxPool"]);
  EXPECT_EQ(count_layers(*net, kLayerPooling, "mode", "average"), counts["GlobalAveragePool"]);
  EXPECT_EQ(count_layers(*net, kLayerConcatenation), counts["Concat"]);
  EXPECT_EQ(count_layers(*net, kLayerIdentity), 0);  // the exporter's weight Identities are aliases
  ASSERT_EQ(net->num_inputs(), 1);
  EXPECT_EQ(net->input(0)->name(), "input");
  EXPECT_EQ(net->input(0)->dims(), (Dims{kDynamic, 3, 224, 224}));
  ASSERT_EQ(net->num_outputs(), 1);
  EXPECT_EQ(net->output(0)->name(), "logits");
  EXPECT_NO_THROW(net->validate());
}

TEST(OnnxModels, TinyYoloSilu) {
  const std::string path = shared_model("tinyyolo_silu");
  SKIP_IF_ABSENT(path);
  auto net = import_model(path);
  auto counts = node_counts(read_proto(path));
  EXPECT_EQ(count_layers(*net, kLayerConvolution), counts["Conv"]);
  EXPECT_EQ(count_layers(*net, kLayerResize), counts["Resize"]);
  EXPECT_EQ(count_layers(*net, kLayerActivation, "kind", "sigmoid"), counts["Sigmoid"]);
  EXPECT_EQ(count_layers(*net, kLayerFill, "mode", "range"), counts["Range"]);
  ASSERT_EQ(net->num_outputs(), 1);
  EXPECT_EQ(net->output(0)->name(), "detections");
  EXPECT_NO_THROW(net->validate());
}

// Reported nodes must be exactly the model's nodes of the given op types.
void expect_exactly_unsupported(const std::string& path, const std::set<std::string>& op_types, size_t expected_count) {
  const auto model = read_proto(path);
  std::set<std::string> want;
  for (const auto& n : model.graph().node()) {
    if (op_types.count(n.op_type())) want.insert(n.name());
  }
  ASSERT_EQ(want.size(), expected_count);
  const auto problems = OnnxParser::check_file(path);
  std::set<std::string> got;
  for (const auto& p : problems) {
    EXPECT_TRUE(op_types.count(p.op_type)) << p.node_name << " (" << p.op_type << "): " << p.reason;
    got.insert(p.node_name);
  }
  EXPECT_EQ(problems.size(), expected_count);
  EXPECT_EQ(got, want);
  if (expected_count == 0) {
    EXPECT_NO_THROW(import_model(path));
    return;
  }
  const std::string msg = parse_error<ParseError>(path);
  for (const auto& name : want) EXPECT_NE(msg.find("'" + name + "'"), std::string::npos) << name;
}

TEST(OnnxModels, BertTinyHasNoUnsupportedNode) {
  // LayerNormalization (the last op kiln lacked) is imported since the ONNX-coverage work.
  const std::string path = shared_model("bert_tiny");
  SKIP_IF_ABSENT(path);
  expect_exactly_unsupported(path, {}, 0);
}

TEST(OnnxModels, TinyYoloTemperatureSwishImportsThroughThePluginFallback) {
  // The 57 custom::TemperatureSwish nodes map to the built-in TemperatureSwish plugin.
  const std::string path = shared_model("tinyyolo_tswish");
  SKIP_IF_ABSENT(path);
  EXPECT_TRUE(OnnxParser::check_file(path).empty());
  auto net = import_model(path);
  int plugins = 0;
  for (int i = 0; i < net->num_layers(); ++i) {
    const Layer* l = net->layer(i);
    if (l->type() != kLayerPlugin) continue;
    ++plugins;
    EXPECT_EQ(l->attrs().get_string("plugin_name"), "TemperatureSwish");
    EXPECT_EQ(l->attrs().get_floats("field.temperature"), std::vector<double>{0.5});
  }
  EXPECT_EQ(plugins, 57);
}

// The shared models end to end against their PyTorch references (test_data_set_0), fp32 on the
// CPU: max relative error (to max(|ref|, 1e-3)) about 1e-4 per models/README.md.
void run_shared_model_end_to_end(const std::string& name) {
  const std::string path = shared_model(name);
  if (!fs::exists(path)) GTEST_SKIP() << path << " is not present";
  const std::string data = fs::path(path).parent_path().string() + "/test_data_set_0/";
  auto net = import_model(path);
  std::vector<HostTensor> inputs;
  BuilderConfig config;
  OptimizationProfile profile;
  for (int i = 0; i < net->num_inputs(); ++i) {
    inputs.push_back(load_tensor_pb(data + "input_" + std::to_string(i) + ".pb"));
    profile.set_dimensions(net->input(i)->name(), inputs.back().dims(), inputs.back().dims(), inputs.back().dims());
  }
  config.profiles.push_back(profile);
  const auto bytes = Builder().build_serialized(*net, config);
  auto engine = Runtime().deserialize(bytes.data(), bytes.size());
  auto ctx = engine->create_execution_context();
  for (int i = 0; i < net->num_inputs(); ++i) {
    ctx->set_input_shape(net->input(i)->name(), inputs[static_cast<size_t>(i)].dims());
    ctx->set_tensor_address(net->input(i)->name(), inputs[static_cast<size_t>(i)].data());
  }
  std::vector<HostTensor> outputs, expected;
  for (int i = 0; i < net->num_outputs(); ++i) {
    expected.push_back(load_tensor_pb(data + "output_" + std::to_string(i) + ".pb"));
    const std::string out = net->output(i)->name();
    ASSERT_EQ(ctx->tensor_shape(out), expected.back().dims()) << out;
    outputs.emplace_back(expected.back().type(), expected.back().dims());
    ctx->set_tensor_address(out, outputs.back().data());
  }
  ctx->execute();
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::string message;
    test::ErrorStats stats;
    EXPECT_TRUE(test::compare_tensors(outputs[i], expected[i], 1e-3, 1e-4, &stats, &message))
        << name << ": " << message;
    EXPECT_LT(stats.max_rel, 1e-3) << name;
    std::cout << name << " output " << i << ": max_abs " << stats.max_abs << " max_rel " << stats.max_rel << "\n";
  }
}

TEST(OnnxModels, SqueezeNetEndToEnd) { run_shared_model_end_to_end("squeezenet1_1"); }
TEST(OnnxModels, TinyYoloSiluEndToEnd) { run_shared_model_end_to_end("tinyyolo_silu"); }
TEST(OnnxModels, BertTinyEndToEnd) { run_shared_model_end_to_end("bert_tiny"); }

// ---- end to end against ONNX Runtime -------------------------------------------------------------

class OnnxEndToEnd : public ::testing::TestWithParam<const char*> {};

TEST_P(OnnxEndToEnd, MatchesOnnxRuntime) {
  const std::string name = GetParam();
  auto net = import_data(name);
  std::vector<HostTensor> inputs;
  BuilderConfig config;
  OptimizationProfile profile;
  for (int i = 0; i < net->num_inputs(); ++i) {
    inputs.push_back(load_npy(data_path(name + "_in" + std::to_string(i) + ".npy")));
    profile.set_dimensions(net->input(i)->name(), inputs.back().dims(), inputs.back().dims(), inputs.back().dims());
  }
  config.profiles.push_back(profile);
  const auto bytes = Builder().build_serialized(*net, config);
  auto engine = Runtime().deserialize(bytes.data(), bytes.size());
  auto ctx = engine->create_execution_context();
  for (int i = 0; i < net->num_inputs(); ++i) {
    ctx->set_input_shape(net->input(i)->name(), inputs[static_cast<size_t>(i)].dims());
    ctx->set_tensor_address(net->input(i)->name(), inputs[static_cast<size_t>(i)].data());
  }
  std::vector<HostTensor> outputs, expected;
  for (int i = 0; i < net->num_outputs(); ++i) {
    expected.push_back(load_npy(data_path(name + "_out" + std::to_string(i) + ".npy")));
    const std::string out = net->output(i)->name();
    const Dims dims = ctx->tensor_shape(out);
    ASSERT_EQ(dims, expected.back().dims()) << out;
    outputs.emplace_back(expected.back().type(), dims);
    ctx->set_tensor_address(out, outputs.back().data());
  }
  ctx->execute();
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::string message;
    EXPECT_TRUE(test::compare_tensors(outputs[i], expected[i], 1e-4, 1e-5, nullptr, &message))
        << name << " output " << net->output(static_cast<int>(i))->name() << ": " << message;
  }
}

// One LpPool node on a float input of `dims` (0: a symbolic dim) with the given strides and
// ceil_mode=1, kernel 3, pads 1/1; the message parse_bytes throws ("" where it imports).
std::string lp_pool_import_error(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(18);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("lppool");
  onnx::ValueInfoProto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) {
    auto* dim = in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim();
    if (d > 0)
      dim->set_dim_value(d);
    else
      dim->set_dim_param("n");
  }
  g->add_output()->set_name("y");
  onnx::NodeProto* n = g->add_node();
  n->set_name("pool");
  n->set_op_type("LpPool");
  n->add_input("x");
  n->add_output("y");
  const auto ints = [&](const char* name, const std::vector<int64_t>& v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t e : v) a->add_ints(e);
  };
  ints("kernel_shape", {3});
  ints("pads", {1, 1});
  if (!strides.empty()) ints("strides", strides);
  onnx::AttributeProto* ceil = n->add_attribute();
  ceil->set_name("ceil_mode");
  ceil->set_type(onnx::AttributeProto::INT);
  ceil->set_i(1);
  const std::string bytes = m.SerializeAsString();
  Network net;
  try {
    OnnxParser(net).parse_bytes(bytes.data(), bytes.size());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Found by fuzzing (session 31): a spatial extent near 2^63 overflowed ceil_mode's padding
// arithmetic (undefined behaviour), and strides of 0 divided by zero there.
TEST(OnnxImport, LpPoolCeilModeRejectsExtentsThatOverflowAndNonPositiveStrides) {
  EXPECT_EQ(lp_pool_import_error({1, 1, 9}, {2}), "");
  const std::string huge = lp_pool_import_error({1, 1, std::numeric_limits<int64_t>::max()}, {2});
  EXPECT_NE(huge.find("pool"), std::string::npos) << huge;
  EXPECT_NE(huge.find("LpPool ceil_mode"), std::string::npos) << huge;
  EXPECT_NE(huge.find("overflows 64-bit integers"), std::string::npos) << huge;
  for (int64_t stride : {int64_t{0}, int64_t{-2}}) {
    const std::string bad = lp_pool_import_error({1, 1, 9}, {stride});
    EXPECT_NE(bad.find("pool"), std::string::npos) << bad;
    EXPECT_NE(bad.find("attribute 'strides' must be positive, got " + std::to_string(stride)), std::string::npos)
        << bad;
  }
}

INSTANTIATE_TEST_SUITE_P(SmallModels, OnnxEndToEnd,
                         ::testing::Values("batchnorm", "clip6", "clip13", "squeeze11", "squeeze13", "softmax11",
                                           "softmax13", "resize10", "resize13", "upsample7", "split11", "split13",
                                           "split18", "convtranspose", "autopad", "external_data", "legacy9",
                                           "opset18"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
}  // namespace kiln
