// The integer types int16, uint16, uint32 and uint64 on the CPU: HostTensor values, the
// ElementWise ops (max, min, mod, sub, pow with an unsigned exponent), BitShift and Cast on
// them, ONNX import of such tensors and nodes (typed uint64_data fields included), .pb/.npy
// files, and the error of a kernel without these types. Expected values are hand-computed from
// the type's modular arithmetic, not taken from kiln. Their CUDA kernels (and the CUDA build
// errors) are tested in cuda_int_types_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "kiln/builder.h"
#include "kiln/error.h"
#include "kiln/network.h"
#include "kiln/onnx_parser.h"
#include "kiln/runtime.h"
#include "src/core/tensor_io.h"
#include "src/onnx/onnx_proto.h"
#include "src/onnx/onnx_tensor.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

template <typename T>
HostTensor tensor(DataType type, const std::vector<T>& v) {
  return HostTensor::from_vector(type, Dims{static_cast<int64_t>(v.size())}, v);
}

template <typename T>
std::vector<T> values(const HostTensor& t) {
  return std::vector<T>(t.as<T>(), t.as<T>() + t.count());
}

std::shared_ptr<Engine> build_cpu(const Network& net) {
  BuilderConfig config;
  config.time_tactics = false;
  const auto bytes = Builder().build_serialized(net, config);
  return Runtime().deserialize(bytes.data(), bytes.size(), "int types test network");
}

// Runs the network once on the CPU; returns output "y" (owning its data).
HostTensor run(const Network& net, const std::map<std::string, HostTensor>& inputs) {
  auto engine = build_cpu(net);
  auto ctx = engine->create_execution_context();
  for (const auto& [name, value] : inputs) ctx->set_tensor_address(name, const_cast<void*>(value.data()));
  HostTensor y(engine->io_tensor("y").type, ctx->tensor_shape("y"));
  ctx->set_tensor_address("y", y.data());
  ctx->execute();
  // String elements point into the context's storage, which goes with the context.
  if (y.type() == DataType::kString) return HostTensor::from_bytes(y.type(), y.dims(), y.data(), y.nbytes());
  return y;
}

HostTensor binary(ElementWiseOp op, const HostTensor& a, const HostTensor& b, bool fmod = false) {
  Network net;
  Tensor* x0 = net.add_input("a", a.type(), a.dims());
  Tensor* x1 = net.add_input("b", b.type(), b.dims());
  Layer* l = net.add_elementwise(x0, x1, op);
  if (fmod) l->attrs().set("fmod", int64_t{1});
  l->output(0)->set_name("y");
  net.mark_output(l->output(0));
  return run(net, {{"a", a}, {"b", b}});
}

TEST(IntTypes, NamesSizesAndHostValues) {
  EXPECT_EQ(parse_data_type("uint64"), DataType::kUInt64);
  EXPECT_STREQ(to_string(DataType::kInt16), "int16");
  EXPECT_EQ(data_type_size(DataType::kUInt16), 2u);
  EXPECT_EQ(data_type_size(DataType::kUInt32), 4u);
  EXPECT_EQ(tensor<uint16_t>(DataType::kUInt16, {65535, 1}).to_int64(), (std::vector<int64_t>{65535, 1}));
  EXPECT_EQ(tensor<int16_t>(DataType::kInt16, {-32768, 7}).to_double(), (std::vector<double>{-32768.0, 7.0}));
  EXPECT_EQ(tensor<uint32_t>(DataType::kUInt32, {4294967295u}).to_int64(), (std::vector<int64_t>{4294967295}));
  EXPECT_EQ(tensor<uint64_t>(DataType::kUInt64, {kU64Max}).to_double(), (std::vector<double>{18446744073709551616.0}));
}

TEST(IntTypes, MaxMinAtTheTypeLimits) {
  // Computed in int64 or with a sign, uint64 max would lose to 1.
  const HostTensor a = tensor<uint64_t>(DataType::kUInt64, {kU64Max, 5, 0});
  const HostTensor b = tensor<uint64_t>(DataType::kUInt64, {1, 9, uint64_t{1} << 63});
  EXPECT_EQ(values<uint64_t>(binary(ElementWiseOp::kMax, a, b)),
            (std::vector<uint64_t>{kU64Max, 9, uint64_t{1} << 63}));
  EXPECT_EQ(values<uint64_t>(binary(ElementWiseOp::kMin, a, b)), (std::vector<uint64_t>{1, 5, 0}));
  const HostTensor c = tensor<uint32_t>(DataType::kUInt32, {4294967295u, 2});
  const HostTensor d = tensor<uint32_t>(DataType::kUInt32, {3, 2147483648u});
  EXPECT_EQ(values<uint32_t>(binary(ElementWiseOp::kMax, c, d)), (std::vector<uint32_t>{4294967295u, 2147483648u}));
  const HostTensor e = tensor<int16_t>(DataType::kInt16, {-32768, 32767, -1});
  const HostTensor f = tensor<int16_t>(DataType::kInt16, {0, -5, -2});
  EXPECT_EQ(values<int16_t>(binary(ElementWiseOp::kMin, e, f)), (std::vector<int16_t>{-32768, -5, -2}));
  const HostTensor g = tensor<uint16_t>(DataType::kUInt16, {65535, 0});
  const HostTensor h = tensor<uint16_t>(DataType::kUInt16, {1, 40000});
  EXPECT_EQ(values<uint16_t>(binary(ElementWiseOp::kMax, g, h)), (std::vector<uint16_t>{65535, 40000}));
}

TEST(IntTypes, ModAndWrappingArithmetic) {
  // int16, fmod = 0: the result takes the divisor's sign (-4 mod 3 = 2, 4 mod -3 = -2); fmod = 1:
  // the dividend's (-4 fmod 3 = -1).
  // -32768 = 7 * -4681 - 1.
  const HostTensor a = tensor<int16_t>(DataType::kInt16, {-4, 4, 7, -32768});
  const HostTensor b = tensor<int16_t>(DataType::kInt16, {3, -3, 7, 7});
  EXPECT_EQ(values<int16_t>(binary(ElementWiseOp::kMod, a, b)), (std::vector<int16_t>{2, -2, 0, 6}));
  EXPECT_EQ(values<int16_t>(binary(ElementWiseOp::kMod, a, b, true)), (std::vector<int16_t>{-1, 1, 0, -1}));
  // 4000000000 = 7 * 571428571 + 3; 2^64-1 = 10 * 1844674407370955161 + 5.
  EXPECT_EQ(values<uint32_t>(binary(ElementWiseOp::kMod, tensor<uint32_t>(DataType::kUInt32, {4000000000u, 9}),
                                    tensor<uint32_t>(DataType::kUInt32, {7, 4}))),
            (std::vector<uint32_t>{3, 1}));
  EXPECT_EQ(values<uint64_t>(binary(ElementWiseOp::kMod, tensor<uint64_t>(DataType::kUInt64, {kU64Max}),
                                    tensor<uint64_t>(DataType::kUInt64, {10}))),
            (std::vector<uint64_t>{5}));
  // Unsigned subtraction wraps modulo 2^16 / 2^64.
  EXPECT_EQ(values<uint16_t>(binary(ElementWiseOp::kSub, tensor<uint16_t>(DataType::kUInt16, {3}),
                                    tensor<uint16_t>(DataType::kUInt16, {5}))),
            (std::vector<uint16_t>{65534}));
  EXPECT_EQ(values<uint64_t>(binary(ElementWiseOp::kSub, tensor<uint64_t>(DataType::kUInt64, {0}),
                                    tensor<uint64_t>(DataType::kUInt64, {1}))),
            (std::vector<uint64_t>{kU64Max}));
}

TEST(IntTypes, PowWithUnsignedExponent) {
  const HostTensor base = HostTensor::from_vector(DataType::kFloat32, Dims{3}, std::vector<float>{2.0f, 3.0f, -1.5f});
  EXPECT_EQ(values<float>(binary(ElementWiseOp::kPow, base, tensor<uint32_t>(DataType::kUInt32, {10, 2, 3}))),
            (std::vector<float>{1024.0f, 9.0f, -3.375f}));
  EXPECT_EQ(values<float>(binary(ElementWiseOp::kPow, base, tensor<uint64_t>(DataType::kUInt64, {0, 4, 1}))),
            (std::vector<float>{1.0f, 81.0f, -1.5f}));
}

TEST(IntTypes, BitShift) {
  auto shift = [](const HostTensor& x, const HostTensor& s, const char* direction) {
    Network net;
    Tensor* a = net.add_input("a", x.type(), x.dims());
    Tensor* b = net.add_input("b", s.type(), s.dims());
    Attributes attrs;
    attrs.set("direction", std::string(direction));
    Layer* l = net.add_layer(kLayerBitShift, {a, b}, 1, std::move(attrs));
    l->output(0)->set_name("y");
    net.mark_output(l->output(0));
    return run(net, {{"a", x}, {"b", s}});
  };
  EXPECT_EQ(values<uint16_t>(shift(tensor<uint16_t>(DataType::kUInt16, {1, 1, 0xFFFF}),
                                   tensor<uint16_t>(DataType::kUInt16, {15, 16, 4}), "left")),
            (std::vector<uint16_t>{32768, 0, 0xFFF0}));
  EXPECT_EQ(values<uint32_t>(shift(tensor<uint32_t>(DataType::kUInt32, {0x80000000u, 16}),
                                   tensor<uint32_t>(DataType::kUInt32, {31, 2}), "right")),
            (std::vector<uint32_t>{1, 4}));
  EXPECT_EQ(values<uint64_t>(shift(tensor<uint64_t>(DataType::kUInt64, {1, kU64Max}),
                                   tensor<uint64_t>(DataType::kUInt64, {63, 60}), "left")),
            (std::vector<uint64_t>{uint64_t{1} << 63, 0xF000000000000000ull}));
}

TEST(IntTypes, Cast) {
  auto cast = [](const HostTensor& x, DataType to) {
    Network net;
    Tensor* a = net.add_input("a", x.type(), x.dims());
    Layer* l = net.add_cast(a, to);
    l->output(0)->set_name("y");
    net.mark_output(l->output(0));
    return run(net, {{"a", x}});
  };
  EXPECT_EQ(values<int16_t>(cast(tensor<uint16_t>(DataType::kUInt16, {65535, 32768, 5}), DataType::kInt16)),
            (std::vector<int16_t>{-1, -32768, 5}));
  EXPECT_EQ(values<double>(cast(tensor<uint64_t>(DataType::kUInt64, {uint64_t{1} << 63, 3}), DataType::kFloat64)),
            (std::vector<double>{9223372036854775808.0, 3.0}));
  EXPECT_EQ(
      values<uint32_t>(cast(HostTensor::from_vector(DataType::kFloat32, Dims{2}, std::vector<float>{3.7f, 70000.0f}),
                            DataType::kUInt32)),
      (std::vector<uint32_t>{3, 70000}));
  EXPECT_EQ(cast(tensor<uint64_t>(DataType::kUInt64, {kU64Max}), DataType::kString).string_at(0),
            "18446744073709551615");
}

TEST(IntTypes, DataMovementLayers) {
  // Concatenation then Gather move elements by width: uint64 values above 2^63 survive.
  Network net;
  Tensor* a = net.add_input("a", DataType::kUInt64, Dims{2});
  Tensor* b = net.add_input("b", DataType::kUInt64, Dims{1});
  Attributes cat;
  cat.set("axis", int64_t{0});
  Tensor* joined = net.add_layer(kLayerConcatenation, {a, b}, 1, std::move(cat))->output(0);
  Tensor* idx = net.add_constant(HostTensor::from_vector<int64_t>(DataType::kInt64, Dims{2}, {2, 0}))->output(0);
  Layer* g = net.add_layer(kLayerGather, {joined, idx}, 1);
  g->output(0)->set_name("y");
  net.mark_output(g->output(0));
  const HostTensor y = run(net, {{"a", tensor<uint64_t>(DataType::kUInt64, {kU64Max, 1})},
                                 {"b", tensor<uint64_t>(DataType::kUInt64, {uint64_t{1} << 63})}});
  EXPECT_EQ(values<uint64_t>(y), (std::vector<uint64_t>{uint64_t{1} << 63, kU64Max}));
}

TEST(IntTypes, OnnxTensorsAndNodes) {
  // A typed uint64_data field (values above 2^63) and an int32_data field for uint16.
  onnx::TensorProto p;
  p.set_data_type(onnx::TensorProto::UINT64);
  p.add_dims(2);
  p.add_uint64_data(kU64Max);
  p.add_uint64_data(7);
  EXPECT_EQ(values<uint64_t>(tensor_from_proto(p, ".", "uint64 test")), (std::vector<uint64_t>{kU64Max, 7}));
  onnx::TensorProto q;
  q.set_data_type(onnx::TensorProto::UINT16);
  q.add_dims(1);
  q.add_int32_data(65535);
  EXPECT_EQ(values<uint16_t>(tensor_from_proto(q, ".", "uint16 test")), (std::vector<uint16_t>{65535}));

  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  for (const char* name : {"a", "b"}) {
    auto* v = g->add_input();
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::UINT32);
    v->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(2);
  }
  auto* out = g->add_output();
  out->set_name("y");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::UINT32);
  auto* n = g->add_node();
  n->set_op_type("Max");
  n->add_input("a");
  n->add_input("b");
  n->add_output("y");
  const std::string bytes = m.SerializeAsString();
  Network net;
  OnnxParser(net).parse_bytes(bytes.data(), bytes.size());
  const HostTensor y = run(net, {{"a", tensor<uint32_t>(DataType::kUInt32, {4000000000u, 1})},
                                 {"b", tensor<uint32_t>(DataType::kUInt32, {2, 3000000000u})}});
  EXPECT_EQ(values<uint32_t>(y), (std::vector<uint32_t>{4000000000u, 3000000000u}));
}

TEST(IntTypes, TensorFiles) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_int_types_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const HostTensor t = tensor<uint64_t>(DataType::kUInt64, {kU64Max, 0, 12345});
  save_tensor_pb((dir / "t.pb").string(), t, "t");
  EXPECT_EQ(values<uint64_t>(load_tensor_pb((dir / "t.pb").string())), (std::vector<uint64_t>{kU64Max, 0, 12345}));
  const HostTensor s = tensor<int16_t>(DataType::kInt16, {-2, 300});
  save_npy((dir / "s.npy").string(), s);
  const HostTensor back = load_npy((dir / "s.npy").string());
  EXPECT_EQ(back.type(), DataType::kInt16);
  EXPECT_EQ(values<int16_t>(back), (std::vector<int16_t>{-2, 300}));
  fs::remove_all(dir);
}

TEST(IntTypes, ClearErrorsWhereUnsupported) {
  // A kernel without these types names the layer and the type at run time.
  Network unary;
  Tensor* x = unary.add_input("x", DataType::kUInt16, Dims{2});
  Attributes attrs;
  attrs.set("op", std::string("neg"));
  Layer* neg = unary.add_layer(kLayerUnary, {x}, 1, std::move(attrs), "negate");
  neg->output(0)->set_name("y");
  unary.mark_output(neg->output(0));
  try {
    (void)run(unary, {{"x", tensor<uint16_t>(DataType::kUInt16, {1, 2})}});
    ADD_FAILURE() << "ran";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("negate"), std::string::npos) << msg;
    EXPECT_NE(msg.find("uint16"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace kiln
