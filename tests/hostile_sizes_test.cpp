// Hostile sizes (issue 16): dims, counts and attributes whose products and sums overflow 64 bits
// (Range spans, OneHot depths, ConstantOfShape and Tile extents, Conv pads), initializers that
// claim more data than they hold, and allocations no machine can make. Each must end in a
// kiln::Error naming the layer or tensor, never a wrapped-around tiny buffer, an empty output,
// a SIGFPE or an allocation of what the file merely claims.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "tests/onnx_model_builder.h"

namespace kiln {
namespace {

using test::expect_mentions;
using test::OnnxModelBuilder;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t k2Pow62 = int64_t{1} << 62;

// Imports, builds for the CPU (one thread), runs once with zero inputs; returns the message of
// the kiln::Error any step throws, or "" when everything succeeded (then the outputs' dims are
// appended to `outputs`). Any other exception fails the test.
std::string run_error(const OnnxModelBuilder& b, std::vector<Dims>* outputs = nullptr) {
  try {
    auto net = test::import_model(b);
    BuilderConfig config;
    config.num_threads = 1;
    const auto bytes = Builder().build_serialized(*net, config);
    auto engine = Runtime().deserialize(bytes.data(), bytes.size());
    auto ctx = engine->create_execution_context();
    std::vector<HostTensor> buffers;
    for (const auto& io : engine->io_tensors()) {
      buffers.emplace_back(io.type, io.mode == TensorIOMode::kInput ? io.dims : ctx->tensor_shape(io.name));
      ctx->set_tensor_address(io.name, buffers.back().data());
    }
    ctx->execute();
    for (size_t i = 0; i < engine->io_tensors().size(); ++i) {
      if (outputs && engine->io_tensors()[i].mode == TensorIOMode::kOutput) outputs->push_back(buffers[i].dims());
    }
    return "";
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a kiln::Error: " << e.what();
    return e.what();
  }
}

OnnxModelBuilder range_model(int64_t start, int64_t limit, int64_t delta) {
  OnnxModelBuilder b;
  b.int64s("s", {start}, true).int64s("l", {limit}, true).int64s("d", {delta}, true);
  b.node("Range", {"s", "l", "d"}, {"y"}, "range");
  b.output("y", onnx::TensorProto::INT64);
  return b;
}

// ---- overflow-checked sizes ---------------------------------------------------------------------

TEST(HostileSizes, HostTensorByteSizeNeverWraps) {
  // 2^62 int64 elements are 2^65 bytes: the byte count used to wrap to 0 (a 64-byte buffer).
  try {
    HostTensor t(DataType::kInt64, Dims{k2Pow62});
    ADD_FAILURE() << "allocated " << t.nbytes() << " bytes for 2^62 int64 elements";
  } catch (const Error& e) {
    expect_mentions(e.what(), {"of type int64", "4611686018427387904", "2^63 bytes or more"});
  }
  EXPECT_THROW((void)tensor_byte_size(DataType::kFloat32, Dims{k2Pow62, 2}), Error);
  EXPECT_THROW((void)tensor_byte_size(DataType::kFloat32, Dims{kInt64Max, 2}), Error);
  EXPECT_EQ(tensor_byte_size(DataType::kFloat64, Dims{3, 5}), 120u);
  EXPECT_EQ(tensor_byte_size(DataType::kInt8, Dims{kInt64Max}), static_cast<uint64_t>(kInt64Max));
}

TEST(HostileSizes, FromBytesChecksTheSizeBeforeAllocating) {
  // 2^40 floats (4 TiB) cannot be allocated: the mismatch must be found first.
  const float data[4] = {1, 2, 3, 4};
  try {
    (void)HostTensor::from_bytes(DataType::kFloat32, Dims{int64_t{1} << 40}, data, sizeof(data));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    expect_mentions(e.what(), {"16 bytes does not match", "4398046511104 bytes"});
  }
}

TEST(HostileSizes, RangeOf2Pow62ElementsIsAnError) {
  expect_mentions(run_error(range_model(0, k2Pow62, 1)), {"'range'", "too large"});
}

TEST(HostileSizes, RangeSpanBeyondInt64IsAnErrorNotEmpty) {
  // limit - start overflows int64 (it wrapped to -1 and gave an empty output).
  expect_mentions(run_error(range_model(kInt64Min, kInt64Max, 3)), {"'range'", "too large"});
  expect_mentions(run_error(range_model(kInt64Min, kInt64Max, 1)), {"'range'", "more than 2^63 - 1 elements"});
}

TEST(HostileSizes, RangeToInt64MinByMinusOneDoesNotTrap) {
  // span / delta was INT64_MIN / -1: SIGFPE. Now 2^63 elements: too many.
  expect_mentions(run_error(range_model(0, kInt64Min, -1)), {"'range'", "more than 2^63 - 1 elements"});
  // Near the edge but representable: an ordinary size error.
  expect_mentions(run_error(range_model(-1, kInt64Min, -1)), {"'range'", "too large"});
}

TEST(HostileSizes, SmallRangesStillWork) {
  std::vector<Dims> outputs;
  EXPECT_EQ(run_error(range_model(kInt64Max - 5, kInt64Max, 2), &outputs), "");
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0], (Dims{3}));
  outputs.clear();
  EXPECT_EQ(run_error(range_model(kInt64Min + 4, kInt64Min, -1), &outputs), "");
  ASSERT_EQ(outputs.size(), 1u);
  EXPECT_EQ(outputs[0], (Dims{4}));
}

TEST(HostileSizes, OneHotDepth2Pow62IsAnError) {
  OnnxModelBuilder b;
  b.int64s("i", {1}).int64s("depth", {k2Pow62}).floats("v", {2}, {0, 1});
  b.node("OneHot", {"i", "depth", "v"}, {"y"}, "onehot");
  b.output("y", onnx::TensorProto::FLOAT);
  expect_mentions(run_error(b), {"onehot", "too large"});
}

TEST(HostileSizes, ConstantOfShape2Pow62IsAnError) {
  OnnxModelBuilder b;
  b.int64s("shape", {k2Pow62});
  b.node("ConstantOfShape", {"shape"}, {"y"}, "fill");
  b.output("y", onnx::TensorProto::FLOAT);
  expect_mentions(run_error(b), {"fill", "too large"});
}

TEST(HostileSizes, TileRepeats2Pow62IsAnErrorNotEmpty) {
  // 4 * 2^62 wrapped to 0: an empty output.
  OnnxModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {4}).int64s("r", {k2Pow62});
  b.node("Tile", {"x", "r"}, {"y"}, "tile");
  b.output("y", onnx::TensorProto::FLOAT);
  expect_mentions(run_error(b), {"'tile'", "overflow"});
  // Without the wrap-around: a size error.
  OnnxModelBuilder c;
  c.input("x", onnx::TensorProto::FLOAT, {1}).int64s("r", {k2Pow62});
  c.node("Tile", {"x", "r"}, {"y"}, "tile");
  c.output("y", onnx::TensorProto::FLOAT);
  expect_mentions(run_error(c), {"'tile'", "too large"});
}

TEST(HostileSizes, ConvPadsOfInt64MaxAreAnError) {
  // x + 2 * INT64_MAX wrapped around and gave a 1x8x4x4 output.
  OnnxModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {1, 3, 4, 4}).floats("w", {8, 3, 1, 1}, std::vector<float>(24, 1.0f));
  test::set_ints(b.node("Conv", {"x", "w"}, {"y"}, "conv"), "pads", {kInt64Max, kInt64Max, kInt64Max, kInt64Max});
  b.output("y", onnx::TensorProto::FLOAT);
  expect_mentions(run_error(b), {"'conv'", "overflows 64-bit extents"});
}

TEST(HostileSizes, ExpandBeyondMemoryNamesTheLayer) {
  // An activation of 2^40 floats (4 TiB) in the context's memory: "out of memory" named nothing.
  OnnxModelBuilder b;
  b.input("x", onnx::TensorProto::FLOAT, {1}).int64s("s", {int64_t{1} << 40});
  b.node("Expand", {"x", "s"}, {"e"}, "expand");
  b.node("ReduceSum", {"e"}, {"y"}, "sum");
  b.output("y", onnx::TensorProto::FLOAT);
  expect_mentions(run_error(b), {"out of memory", "activation memory of optimization profile 0", "largest tensor 'e'",
                                 "layer 'expand'"});
}

TEST(HostileSizes, NetworkInputTooLargeIsNamed) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{kDynamic});
  net.mark_output(net.add_activation(x, ActivationType::kRelu)->output(0));
  BuilderConfig config;
  OptimizationProfile p;
  p.set_dimensions("x", Dims{1}, Dims{1}, Dims{k2Pow62});
  config.profiles.push_back(p);
  try {
    (void)Builder().build_serialized(net, config);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    expect_mentions(e.what(), {"input 'x' is too large"});
  }
}

}  // namespace
}  // namespace kiln
