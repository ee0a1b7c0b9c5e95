// int16, uint16, uint32 and uint64 on CUDA (GPU suite; the CUDA tests skip without a device):
// ElementWise (every op), BitShift, Cast (to and from every other type) and the data-movement
// layers (Shuffle transposes, Concatenation, Slice, Gather, Identity) against the CPU reference,
// at values that exercise wrap-around (uint16 65535 + 1, int16 -32768 / -1, uint64 above 2^63,
// uint32/uint64 divisors of all ones). Each case runs two ways:
//   - through the op harness (tests/op_harness.h): every CUDA tactic of the layer type that
//     accepts the case, with guard bytes, against the CPU reference kernel, with no tolerance;
//   - as a one-layer engine built for the CPU and for CUDA (tactics timed, as in a real build),
//     whose outputs must agree byte for byte (the harness compares in double, which cannot tell
//     uint64 values above 2^53 apart).
// Edge cases also carry hand-computed results (modular arithmetic worked out by hand, not taken
// from kiln), checked on the CPU engine in every build and on the CUDA engine where there is a
// device. Layers whose CUDA kernels do not take these types must fail to build, naming the layer
// and the type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "kiln/builder.h"
#include "kiln/error.h"
#include "kiln/network.h"
#include "kiln/runtime.h"
#include "op_harness.h"
#include "src/backends/backend.h"
#include "src/core/half.h"

namespace kiln {
namespace {

using test::cuda_usable;

constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kTop = uint64_t{1} << 63;
constexpr DataType kWideTypes[] = {DataType::kInt16, DataType::kUInt16, DataType::kUInt32, DataType::kUInt64};

template <typename T>
HostTensor vec(DataType type, const std::vector<T>& v, Dims dims = Dims{}) {
  if (dims.rank() == 0) dims = Dims{static_cast<int64_t>(v.size())};
  return HostTensor::from_vector(type, dims, v);
}

test::InputSpec input(const HostTensor& v, bool constant = false) {
  test::InputSpec s;
  s.type = v.type();
  s.dims = v.dims();
  s.value = v;
  s.constant = constant;
  return s;
}

// An exact case: no tolerance in the harness.
test::OpCase op_case(const std::string& name, const std::string& layer_type, std::vector<test::InputSpec> inputs,
                     Attributes attrs = {}) {
  test::OpCase c;
  c.name = name;
  c.layer_type = layer_type;
  c.inputs = std::move(inputs);
  c.attrs = std::move(attrs);
  c.rtol = 0;
  c.atol = 0;
  return c;
}

// ---- values ------------------------------------------------------------------------------------

// Integer values of every width's edges (as int64 / uint64 bit patterns), converted to each
// integer type modulo 2^bits.
const std::vector<uint64_t>& edge_bits() {
  static const std::vector<uint64_t> kBits = {0,
                                              1,
                                              static_cast<uint64_t>(-1),
                                              127,
                                              128,
                                              255,
                                              256,
                                              static_cast<uint64_t>(-129),
                                              32767,
                                              32768,
                                              65535,
                                              65536,
                                              static_cast<uint64_t>(-32769),
                                              2147483647,
                                              2147483648u,
                                              4294967295u,
                                              4294967296u,
                                              kTop,
                                              kTop - 1,
                                              kTop + 5,
                                              kU64Max,
                                              0x9E3779B97F4A7C15ull,
                                              7,
                                              static_cast<uint64_t>(-7)};
  return kBits;
}

const std::vector<double>& float_values() {
  static const std::vector<double> kValues = {0.0,          -0.0,         2.5,          -3.7,    127.9,   -128.5,
                                              255.5,        32767.25,     -32768.75,    65535.9, 65536.0, 70000.5,
                                              -1.0,         2147483648.0, 4294967296.0, 9.3e18,  1e19,    -1e19,
                                              std::nan(""), INFINITY,     -INFINITY,    0.4999,  1e-30,   12345.0};
  return kValues;
}

const std::vector<double>& half_values() {
  static const std::vector<double> kValues = {0.0,      -0.0,      2.5,      -3.75,   127.875, -128.5,
                                              255.5,    32768.0,   -32768.0, 65504.0, -1.0,    std::nan(""),
                                              INFINITY, -INFINITY, 0.5,      1000.5};
  return kValues;
}

// A tensor of `type` holding edge values (integers: edge_bits() converted; floats: values
// that truncate, overflow and are NaN), as many as the type's list has.
HostTensor edge_tensor(DataType type) {
  auto ints = [&](auto zero) {
    using T = decltype(zero);
    std::vector<T> v;
    for (uint64_t b : edge_bits()) v.push_back(static_cast<T>(b));
    return vec<T>(type, v);
  };
  switch (type) {
    case DataType::kInt8:
      return ints(int8_t{});
    case DataType::kUInt8:
      return ints(uint8_t{});
    case DataType::kInt16:
      return ints(int16_t{});
    case DataType::kUInt16:
      return ints(uint16_t{});
    case DataType::kInt32:
      return ints(int32_t{});
    case DataType::kUInt32:
      return ints(uint32_t{});
    case DataType::kInt64:
      return ints(int64_t{});
    case DataType::kUInt64:
      return ints(uint64_t{});
    case DataType::kBool: {
      std::vector<uint8_t> v;
      for (uint64_t b : edge_bits()) v.push_back(b % 3 != 0);
      return vec<uint8_t>(type, v);
    }
    case DataType::kFloat32: {
      std::vector<float> v;
      for (double d : float_values()) v.push_back(static_cast<float>(d));
      return vec<float>(type, v);
    }
    case DataType::kFloat64:
      return vec<double>(type, float_values());
    case DataType::kFloat16: {
      HostTensor t(type, Dims{static_cast<int64_t>(half_values().size())});
      for (size_t i = 0; i < half_values().size(); ++i) t.as<half>()[i] = half(static_cast<float>(half_values()[i]));
      return t;
    }
    default:
      throw Error(std::string("edge_tensor: no values for ") + to_string(type));
  }
}

// n distinct values of an integer type spread over its whole range (the top bits included), so
// that a misplaced element shows.
HostTensor pattern_tensor(DataType type, const Dims& dims) {
  HostTensor t(type, dims);
  const size_t width = data_type_size(type);
  for (int64_t i = 0; i < t.count(); ++i) {
    const uint64_t v = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(i + 1) ^ (static_cast<uint64_t>(i) << 61);
    std::memcpy(static_cast<uint8_t*>(t.data()) + static_cast<size_t>(i) * width, &v, width);  // little endian
  }
  return t;
}

// Operands of a binary op of `type`: three rounds of the edge values (a) against the same values
// rotated by 1, 6 and 11 places (b), so that every edge value meets several others, 0 and -1
// (all ones) included.
std::pair<HostTensor, HostTensor> binary_operands(DataType type) {
  const HostTensor e = edge_tensor(type);
  const int64_t n = e.count();
  const size_t w = data_type_size(type);
  HostTensor a(type, Dims{n * 3}), b(type, Dims{n * 3});
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      const auto* src = static_cast<const uint8_t*>(e.data());
      std::memcpy(static_cast<uint8_t*>(a.data()) + static_cast<size_t>(r * n + i) * w,
                  src + static_cast<size_t>(i) * w, w);
      std::memcpy(static_cast<uint8_t*>(b.data()) + static_cast<size_t>(r * n + i) * w,
                  src + static_cast<size_t>((i + r * 5 + 1) % n) * w, w);
    }
  }
  return {a, b};
}

HostTensor reshaped(const HostTensor& t, const Dims& dims) {
  return HostTensor::from_bytes(t.type(), dims, t.data(), t.nbytes());
}

HostTensor first(const HostTensor& t, int64_t n) {
  return HostTensor::from_bytes(t.type(), Dims{n}, t.data(), static_cast<size_t>(n) * data_type_size(t.type()));
}

// ---- engines -------------------------------------------------------------------------------------

// The case as a network: non-constant inputs are network inputs "in<i>", constants Constant
// layers, the outputs "out<k>". Built for `device` and run once; returns the outputs.
std::vector<HostTensor> run_engine(const test::OpCase& c, DeviceType device) {
  Network net;
  std::vector<Tensor*> ins;
  std::map<std::string, const HostTensor*> feeds;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const test::InputSpec& s = c.inputs[i];
    if (s.omitted) {
      ins.push_back(nullptr);
    } else if (s.constant) {
      ins.push_back(net.add_constant(s.value, "const" + std::to_string(i))->output(0));
    } else {
      const std::string name = "in" + std::to_string(i);
      ins.push_back(net.add_input(name, s.value.type(), s.value.dims()));
      feeds[name] = &s.value;
    }
  }
  Layer* layer = net.add_layer(c.layer_type, ins, c.num_outputs, c.attrs, "op");
  for (int k = 0; k < c.num_outputs; ++k) {
    layer->output(k)->set_name("out" + std::to_string(k));
    net.mark_output(layer->output(k));
  }
  BuilderConfig config;
  config.device = device;
  const auto bytes = Builder().build_serialized(net, config);
  auto engine = Runtime().deserialize(bytes.data(), bytes.size(), c.name);
  auto ctx = engine->create_execution_context();
  std::vector<HostTensor> outs;
  for (int k = 0; k < c.num_outputs; ++k) {
    const std::string name = "out" + std::to_string(k);
    outs.emplace_back(engine->io_tensor(name).type, ctx->tensor_shape(name));
  }
  if (device == DeviceType::kCPU) {
    for (const auto& [name, value] : feeds) ctx->set_tensor_address(name, const_cast<void*>(value->data()));
    for (int k = 0; k < c.num_outputs; ++k)
      ctx->set_tensor_address("out" + std::to_string(k), outs[static_cast<size_t>(k)].data());
    ctx->execute();
    return outs;
  }
  Backend& backend = get_backend(device);
  test::DeviceTensors mem(backend);
  for (const auto& [name, value] : feeds) ctx->set_tensor_address(name, mem.upload(*value));
  std::vector<void*> out_dev;
  for (int k = 0; k < c.num_outputs; ++k) {
    out_dev.push_back(mem.alloc(outs[static_cast<size_t>(k)].nbytes() + 1));
    ctx->set_tensor_address("out" + std::to_string(k), out_dev.back());
  }
  ctx->execute();
  for (size_t k = 0; k < outs.size(); ++k) {
    backend.copy_device_to_host(outs[k].data(), out_dev[k], outs[k].nbytes(), nullptr);
  }
  return outs;
}

// Element i as text (exact for 64-bit integers).
std::string element_text(const HostTensor& t, int64_t i) {
  std::ostringstream os;
  switch (t.type()) {
    case DataType::kUInt64:
      os << t.as<uint64_t>()[i];
      break;
    case DataType::kInt64:
      os << t.as<int64_t>()[i];
      break;
    case DataType::kUInt32:
      os << t.as<uint32_t>()[i];
      break;
    case DataType::kInt32:
      os << t.as<int32_t>()[i];
      break;
    case DataType::kUInt16:
      os << t.as<uint16_t>()[i];
      break;
    case DataType::kInt16:
      os << t.as<int16_t>()[i];
      break;
    case DataType::kUInt8:
      os << static_cast<int>(t.as<uint8_t>()[i]);
      break;
    case DataType::kInt8:
      os << static_cast<int>(t.as<int8_t>()[i]);
      break;
    case DataType::kBool:
      os << static_cast<int>(t.as<uint8_t>()[i]);
      break;
    case DataType::kFloat32:
      os << t.as<float>()[i];
      break;
    case DataType::kFloat64:
      os << t.as<double>()[i];
      break;
    case DataType::kFloat16:
      os << static_cast<float>(t.as<half>()[i]);
      break;
    default:
      os << "?";
      break;
  }
  return os.str();
}

// Byte-for-byte equality (NaNs included: both sides come from the same conversions).
void expect_same(const HostTensor& got, const HostTensor& expected, const std::string& what) {
  ASSERT_EQ(got.type(), expected.type()) << what;
  ASSERT_EQ(got.dims(), expected.dims()) << what;
  const size_t w = data_type_size(got.type());
  int bad = 0;
  std::string first;
  for (int64_t i = 0; i < got.count(); ++i) {
    const size_t off = static_cast<size_t>(i) * w;
    if (std::memcmp(static_cast<const uint8_t*>(got.data()) + off, static_cast<const uint8_t*>(expected.data()) + off,
                    w) == 0) {
      continue;
    }
    if (bad++ == 0) {
      first =
          "element " + std::to_string(i) + ": got " + element_text(got, i) + ", expected " + element_text(expected, i);
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.count() << " elements differ; first " << first;
}

// ---- the CUDA check of one case ------------------------------------------------------------------

// The case through every CUDA tactic (harness) and as a CUDA engine against the CPU engine, and
// against `expected` (output 0) when given.
void check_on_cuda(const test::OpCase& c, const HostTensor& expected = HostTensor()) {
  SCOPED_TRACE(c.name);
  bool claimed = false;
  for (const auto& r : test::run_op_case(c, DeviceType::kCUDA)) {
    EXPECT_NE(r.outcome, test::Outcome::kFailed) << c.name << " [" << r.tactic << "]: " << r.message;
    claimed = claimed || r.outcome == test::Outcome::kPassed;
  }
  EXPECT_TRUE(claimed) << c.name << ": no CUDA kernel of " << c.layer_type << " accepts the case";
  std::vector<HostTensor> cpu, gpu;
  try {
    cpu = run_engine(c, DeviceType::kCPU);
    gpu = run_engine(c, DeviceType::kCUDA);
  } catch (const std::exception& e) {
    ADD_FAILURE() << c.name << ": " << e.what();
    return;
  }
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t k = 0; k < cpu.size(); ++k)
    expect_same(gpu[k], cpu[k], c.name + " CUDA engine vs CPU engine, output " + std::to_string(k));
  if (!expected.empty()) expect_same(gpu[0], expected, c.name + " CUDA engine vs hand-computed");
}

#define KILN_REQUIRE_CUDA()                        \
  do {                                             \
    std::string why_;                              \
    if (!cuda_usable(&why_)) GTEST_SKIP() << why_; \
  } while (0)

// ---- cases ---------------------------------------------------------------------------------------

Attributes ew_attrs(ElementWiseOp op, bool fmod) {
  Attributes a;
  a.set("op", std::string(to_string(op)));
  a.set("fmod", int64_t{fmod ? 1 : 0});
  return a;
}

test::OpCase ew_case(const std::string& what, ElementWiseOp op, bool fmod, const HostTensor& a, const HostTensor& b) {
  return op_case(std::string(to_string(a.type())) + " " + to_string(op) + (fmod ? " fmod" : "") + " " + what,
                 kLayerElementWise, {input(a), input(b)}, ew_attrs(op, fmod));
}

constexpr int kNumEwOps = static_cast<int>(ElementWiseOp::kXor) + 1;

// Every op on same-shape operands (the flat, vectorized path), a few on broadcast operands (the
// general path) and a scalar operand.
std::vector<test::OpCase> elementwise_cases(DataType type) {
  std::vector<test::OpCase> cases;
  const auto [a, b] = binary_operands(type);
  for (int k = 0; k < kNumEwOps; ++k) {
    const auto op = static_cast<ElementWiseOp>(k);
    cases.push_back(ew_case("same shape", op, false, a, b));
    if (op == ElementWiseOp::kMod) cases.push_back(ew_case("same shape", op, true, a, b));
  }
  const int64_t n = a.count() / 3;
  const HostTensor a2 = reshaped(a, Dims{3, n});
  const HostTensor row = first(b, n);
  const HostTensor scalar = first(b, 1);
  for (const ElementWiseOp op : {ElementWiseOp::kSum, ElementWiseOp::kProd, ElementWiseOp::kDiv, ElementWiseOp::kMod,
                                 ElementWiseOp::kMax, ElementWiseOp::kGreater, ElementWiseOp::kFloorDiv}) {
    cases.push_back(ew_case("broadcast [3,n] x [n]", op, false, a2, row));
    cases.push_back(ew_case("broadcast [n] x [3,1]", op, false, row, reshaped(first(a, 3), Dims{3, 1})));
    cases.push_back(ew_case("scalar b", op, false, a, scalar));
  }
  return cases;
}

test::OpCase shift_case(const std::string& what, const HostTensor& x, const HostTensor& s, const char* direction) {
  Attributes attrs;
  attrs.set("direction", std::string(direction));
  return op_case(std::string(to_string(x.type())) + " BitShift " + direction + " " + what, kLayerBitShift,
                 {input(x), input(s)}, attrs);
}

// Shift amounts 0 .. width + 2 (at and beyond the width give 0) and all ones (negative for int16).
std::vector<test::OpCase> bit_shift_cases(DataType type) {
  std::vector<test::OpCase> cases;
  const size_t bits = data_type_size(type) * 8;
  const HostTensor x = pattern_tensor(type, Dims{static_cast<int64_t>(bits + 4)});
  HostTensor s(type, x.dims());
  const size_t w = data_type_size(type);
  for (int64_t i = 0; i < s.count(); ++i) {
    const uint64_t v = i == s.count() - 1 ? kU64Max : static_cast<uint64_t>(i);
    std::memcpy(static_cast<uint8_t*>(s.data()) + static_cast<size_t>(i) * w, &v, w);
  }
  for (const char* dir : {"left", "right"}) {
    cases.push_back(shift_case("same shape", x, s, dir));
    cases.push_back(shift_case("scalar amount", x, first(s, 1), dir));
    cases.push_back(shift_case("broadcast", reshaped(first(x, 4), Dims{4, 1}), reshaped(first(s, 3), Dims{1, 3}), dir));
  }
  return cases;
}

test::OpCase cast_case(const HostTensor& x, DataType to) {
  Attributes attrs;
  attrs.set("to", std::string(to_string(to)));
  return op_case(std::string("Cast ") + to_string(x.type()) + " -> " + to_string(to), kLayerCast, {input(x)}, attrs);
}

const std::vector<DataType>& all_numeric_types() {
  static const std::vector<DataType> kTypes = {
      DataType::kFloat32, DataType::kFloat16, DataType::kFloat64, DataType::kInt8,  DataType::kUInt8,  DataType::kInt16,
      DataType::kUInt16,  DataType::kInt32,   DataType::kUInt32,  DataType::kInt64, DataType::kUInt64, DataType::kBool};
  return kTypes;
}

// To and from every other type.
std::vector<test::OpCase> cast_cases(DataType type) {
  std::vector<test::OpCase> cases;
  for (DataType other : all_numeric_types()) {
    cases.push_back(cast_case(edge_tensor(type), other));
    if (other != type) cases.push_back(cast_case(edge_tensor(other), type));
  }
  return cases;
}

std::vector<test::OpCase> data_movement_cases(DataType type) {
  std::vector<test::OpCase> cases;
  const std::string t = to_string(type);
  const HostTensor x = pattern_tensor(type, Dims{3, 5, 7});
  for (const std::vector<int64_t>& perm : {std::vector<int64_t>{2, 0, 1}, std::vector<int64_t>{1, 0, 2}}) {
    Attributes a;
    a.set("first_transpose", perm);
    cases.push_back(
        op_case(t + " Shuffle transpose " + std::to_string(perm[0]) + std::to_string(perm[1]) + std::to_string(perm[2]),
                kLayerShuffle, {input(x)}, a));
  }
  {
    Attributes a;
    a.set("axis", int64_t{1});
    cases.push_back(op_case(t + " Concatenation axis 1", kLayerConcatenation,
                            {input(pattern_tensor(type, Dims{2, 3})), input(reshaped(first(x, 8), Dims{2, 4}))}, a));
  }
  cases.push_back(
      op_case(t + " Slice with a negative step", kLayerSlice,
              {input(reshaped(first(x, 24), Dims{4, 6})), input(vec<int64_t>(DataType::kInt64, {1, 5}), true),
               input(vec<int64_t>(DataType::kInt64, {4, 0}), true), input(vec<int64_t>(DataType::kInt64, {0, 1}), true),
               input(vec<int64_t>(DataType::kInt64, {1, -2}), true)}));
  {
    Attributes a;
    a.set("axis", int64_t{0});
    cases.push_back(op_case(
        t + " Gather axis 0", kLayerGather,
        {input(reshaped(first(x, 15), Dims{5, 3})), input(vec<int64_t>(DataType::kInt64, {4, 0, -1, 2}), true)}, a));
    Attributes b;
    b.set("axis", int64_t{1});
    cases.push_back(
        op_case(t + " Gather axis 1, int32 indices", kLayerGather,
                {input(reshaped(first(x, 15), Dims{5, 3})), input(vec<int32_t>(DataType::kInt32, {2, -3}), true)}, b));
  }
  cases.push_back(op_case(t + " Identity", kLayerIdentity, {input(x)}));
  return cases;
}

// ---- hand-computed edge cases --------------------------------------------------------------------

struct HandCase {
  test::OpCase c;
  HostTensor expected;
};

template <typename T>
HandCase hand_ew(DataType type, ElementWiseOp op, bool fmod, std::vector<T> a, std::vector<T> b, std::vector<T> y) {
  const bool to_bool = op == ElementWiseOp::kGreater || op == ElementWiseOp::kLess || op == ElementWiseOp::kEqual;
  HostTensor expected;
  if (to_bool) {
    std::vector<uint8_t> yb(y.begin(), y.end());
    expected = vec<uint8_t>(DataType::kBool, yb);
  } else {
    expected = vec<T>(type, y);
  }
  return {ew_case("hand", op, fmod, vec<T>(type, a), vec<T>(type, b)), expected};
}

std::vector<HandCase> hand_cases() {
  using E = ElementWiseOp;
  constexpr DataType kI16 = DataType::kInt16, kU16 = DataType::kUInt16, kU32 = DataType::kUInt32,
                     kU64 = DataType::kUInt64;
  std::vector<HandCase> h;
  // uint16: arithmetic modulo 2^16 (65535^2 = 4294836225 = 65535 * 65536 + 1; 300^2 = 90000 =
  // 65536 + 24464).
  h.push_back(hand_ew<uint16_t>(kU16, E::kSum, false, {65535, 65535, 1}, {1, 65535, 2}, {0, 65534, 3}));
  h.push_back(hand_ew<uint16_t>(kU16, E::kSub, false, {0, 3}, {1, 5}, {65535, 65534}));
  h.push_back(hand_ew<uint16_t>(kU16, E::kProd, false, {65535, 256, 300}, {65535, 256, 300}, {1, 0, 24464}));
  h.push_back(hand_ew<uint16_t>(kU16, E::kDiv, false, {65535, 7, 65535}, {65535, 0, 2}, {1, 0, 32767}));
  h.push_back(hand_ew<uint16_t>(kU16, E::kMod, false, {65535, 7, 10}, {65534, 0, 4}, {1, 0, 2}));
  h.push_back(hand_ew<uint16_t>(kU16, E::kGreater, false, {65535, 0}, {32768, 1}, {1, 0}));
  h.push_back(hand_ew<uint16_t>(kU16, E::kMax, false, {65535, 0}, {1, 40000}, {65535, 40000}));
  // int16: -32768 / -1 wraps to -32768 (32768 does not fit) and -32768 mod -1 is 0; mod follows
  // the divisor's sign, fmod the dividend's (-32768 = 7 * -4681 - 1); 182^2 = 33124 = 65536 - 32412.
  h.push_back(hand_ew<int16_t>(kI16, E::kSum, false, {32767, -32768}, {1, -1}, {-32768, 32767}));
  h.push_back(hand_ew<int16_t>(kI16, E::kDiv, false, {-32768, -7, 7, 5}, {-1, 2, -2, 0}, {-32768, -3, -3, 0}));
  h.push_back(hand_ew<int16_t>(kI16, E::kMod, false, {-4, 4, -32768, 5}, {3, -3, -1, 0}, {2, -2, 0, 0}));
  h.push_back(hand_ew<int16_t>(kI16, E::kMod, true, {-4, 4, -32768}, {3, -3, 7}, {-1, 1, -1}));
  h.push_back(hand_ew<int16_t>(kI16, E::kProd, false, {-32768, 256, 182}, {-1, 256, 182}, {-32768, 0, -32412}));
  h.push_back(hand_ew<int16_t>(kI16, E::kLess, false, {-32768, 5}, {32767, -5}, {1, 0}));
  h.push_back(hand_ew<int16_t>(kI16, E::kMin, false, {-32768, 32767}, {0, -5}, {-32768, -5}));
  // uint32: a divisor of all ones is 4294967295, not -1 (4000000000 = 7 * 571428571 + 3).
  h.push_back(hand_ew<uint32_t>(kU32, E::kSum, false, {4294967295u}, {1}, {0}));
  h.push_back(hand_ew<uint32_t>(kU32, E::kSub, false, {0}, {1}, {4294967295u}));
  h.push_back(hand_ew<uint32_t>(kU32, E::kProd, false, {65536, 4294967295u}, {65536, 4294967295u}, {0, 1}));
  h.push_back(
      hand_ew<uint32_t>(kU32, E::kDiv, false, {4294967295u, 4000000000u, 9}, {4294967295u, 7, 0}, {1, 571428571, 0}));
  h.push_back(hand_ew<uint32_t>(kU32, E::kMod, false, {9, 4000000000u, 4294967295u}, {4294967295u, 7, 2147483648u},
                                {9, 3, 2147483647}));
  h.push_back(hand_ew<uint32_t>(kU32, E::kGreater, false, {4000000000u, 1}, {7, 2147483648u}, {1, 0}));
  h.push_back(hand_ew<uint32_t>(kU32, E::kPow, false, {2, 3, 65536}, {31, 2, 2}, {2147483648u, 9, 0}));
  // uint64: 2^63 + 5 = 3 * 3074457345618258604 + 1; 2^64 - 1 = 10 * 1844674407370955161 + 5.
  h.push_back(hand_ew<uint64_t>(kU64, E::kSum, false, {kU64Max, kTop}, {1, kTop}, {0, 0}));
  h.push_back(hand_ew<uint64_t>(kU64, E::kSub, false, {0, kTop}, {1, kTop + 1}, {kU64Max, kU64Max}));
  h.push_back(
      hand_ew<uint64_t>(kU64, E::kProd, false, {kU64Max, uint64_t{1} << 32}, {kU64Max, uint64_t{1} << 32}, {1, 0}));
  h.push_back(
      hand_ew<uint64_t>(kU64, E::kDiv, false, {kTop + 5, kU64Max, 7}, {3, kU64Max, 0}, {3074457345618258604ull, 1, 0}));
  h.push_back(hand_ew<uint64_t>(kU64, E::kMod, false, {kTop + 5, 9, kU64Max}, {3, kU64Max, 10}, {1, 9, 5}));
  h.push_back(hand_ew<uint64_t>(kU64, E::kGreater, false, {kTop, 1}, {3, kTop}, {1, 0}));
  h.push_back(hand_ew<uint64_t>(kU64, E::kMax, false, {kU64Max, 5}, {1, kTop}, {kU64Max, kTop}));
  h.push_back(hand_ew<uint64_t>(kU64, E::kFloorDiv, false, {kU64Max}, {2}, {kTop - 1}));

  // BitShift: logical shifts of the bit pattern; amounts >= the width (-1 as int16) give 0.
  auto shift = [](const HostTensor& x, const HostTensor& s, const char* dir, const HostTensor& y) {
    return HandCase{shift_case("hand", x, s, dir), y};
  };
  h.push_back(shift(vec<uint16_t>(kU16, {1, 1, 0xFFFF}), vec<uint16_t>(kU16, {15, 16, 4}), "left",
                    vec<uint16_t>(kU16, {32768, 0, 0xFFF0})));
  h.push_back(shift(vec<int16_t>(kI16, {-32768, -1, -1}), vec<int16_t>(kI16, {15, -1, 8}), "right",
                    vec<int16_t>(kI16, {1, 0, 255})));
  h.push_back(shift(vec<uint32_t>(kU32, {0x80000000u, 16}), vec<uint32_t>(kU32, {31, 2}), "right",
                    vec<uint32_t>(kU32, {1, 4})));
  h.push_back(shift(vec<uint64_t>(kU64, {1, kU64Max, 5}), vec<uint64_t>(kU64, {63, 60, 64}), "left",
                    vec<uint64_t>(kU64, {kTop, 0xF000000000000000ull, 0})));

  // Cast: integers convert modulo 2^bits; float -> int truncates through int64 (NaN and values
  // beyond 9.2e18 give the type's minimum, 0 for unsigned types).
  auto cast = [](const HostTensor& x, DataType to, const HostTensor& y) { return HandCase{cast_case(x, to), y}; };
  h.push_back(cast(vec<uint16_t>(kU16, {65535, 32768, 5}), kI16, vec<int16_t>(kI16, {-1, -32768, 5})));
  h.push_back(cast(vec<int16_t>(kI16, {-1, -32768}), kU64, vec<uint64_t>(kU64, {kU64Max, kU64Max - 32767})));
  h.push_back(cast(vec<uint64_t>(kU64, {kTop, 3, kU64Max}), DataType::kFloat64,
                   vec<double>(DataType::kFloat64, {9223372036854775808.0, 3.0, 18446744073709551616.0})));
  h.push_back(cast(vec<uint64_t>(kU64, {kTop + 7, 65537}), kU16, vec<uint16_t>(kU16, {7, 1})));
  h.push_back(cast(vec<float>(DataType::kFloat32, {3.7f, 70000.0f, -1.0f, std::nanf(""), 1e19f}), kU32,
                   vec<uint32_t>(kU32, {3, 70000, 4294967295u, 0, 0})));
  h.push_back(cast(vec<float>(DataType::kFloat32, {-2.9f, 40000.0f}), kI16, vec<int16_t>(kI16, {-2, 40000 - 65536})));
  h.push_back(
      cast(vec<uint32_t>(kU32, {4294967295u, 0}), DataType::kInt64, vec<int64_t>(DataType::kInt64, {4294967295, 0})));
  h.push_back(cast(vec<uint16_t>(kU16, {0, 2, 65535}), DataType::kBool, vec<uint8_t>(DataType::kBool, {0, 1, 1})));
  return h;
}

// ---- tests -----------------------------------------------------------------------------------------

// The hand-computed values against the CPU engine (no device needed): checks the oracle that the
// CUDA tests compare with.
TEST(CudaIntTypes, HandComputedEdgeCasesOnTheCpu) {
  for (const HandCase& h : hand_cases()) {
    const auto out = run_engine(h.c, DeviceType::kCPU);
    expect_same(out.at(0), h.expected, h.c.name + " CPU engine vs hand-computed");
  }
}

// Every case of the CUDA tests on the CPU: each CPU tactic of the layer type against the reference
// and a CPU engine (no device needed), so that a malformed case shows without a GPU and the
// CPU's optimized tactics are held to the same values.
TEST(CudaIntTypes, CasesRunOnTheCpu) {
  std::vector<test::OpCase> all;
  for (DataType t : kWideTypes) {
    for (auto* make : {&elementwise_cases, &bit_shift_cases, &cast_cases, &data_movement_cases}) {
      for (auto& c : make(t)) all.push_back(std::move(c));
    }
  }
  for (const auto& c : all) {
    for (const auto& r : test::run_op_case(c, DeviceType::kCPU)) {
      EXPECT_NE(r.outcome, test::Outcome::kFailed) << c.name << " [" << r.tactic << "]: " << r.message;
    }
    EXPECT_NO_THROW((void)run_engine(c, DeviceType::kCPU)) << c.name;
  }
}

TEST(CudaIntTypes, HandComputedEdgeCases) {
  KILN_REQUIRE_CUDA();
  for (const HandCase& h : hand_cases()) check_on_cuda(h.c, h.expected);
}

TEST(CudaIntTypes, ElementWiseMatchesCpuReference) {
  KILN_REQUIRE_CUDA();
  for (DataType t : kWideTypes) {
    for (const auto& c : elementwise_cases(t)) check_on_cuda(c);
  }
}

TEST(CudaIntTypes, PowWithAWideExponent) {
  KILN_REQUIRE_CUDA();
  const HostTensor f = vec<float>(DataType::kFloat32, {2.0f, 3.0f, -1.5f, 0.5f});
  const HostTensor i = vec<int64_t>(DataType::kInt64, {2, -3, 7, 0});
  for (DataType t : kWideTypes) {
    const HostTensor e = first(edge_tensor(t), 4);  // 0, 1, all ones, 127
    check_on_cuda(ew_case("float32 base", ElementWiseOp::kPow, false, f, e));
    check_on_cuda(ew_case("int64 base", ElementWiseOp::kPow, false, i, e));
  }
}

TEST(CudaIntTypes, BitShiftMatchesCpuReference) {
  KILN_REQUIRE_CUDA();
  for (DataType t : kWideTypes) {
    for (const auto& c : bit_shift_cases(t)) check_on_cuda(c);
  }
}

TEST(CudaIntTypes, CastToAndFromEveryTypeMatchesCpuReference) {
  KILN_REQUIRE_CUDA();
  for (DataType t : kWideTypes) {
    for (const auto& c : cast_cases(t)) check_on_cuda(c);
  }
}

TEST(CudaIntTypes, DataMovementMatchesCpuReference) {
  KILN_REQUIRE_CUDA();
  for (DataType t : kWideTypes) {
    for (const auto& c : data_movement_cases(t)) check_on_cuda(c);
  }
}

// The message of a CUDA build that no kernel of the layer accepts (on a build without a device,
// the message is about the device, not the type: the type is no longer refused up front).
std::string cuda_build_error(const test::OpCase& c) {
  try {
    (void)run_engine(c, DeviceType::kCUDA);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << c.name << ": built and ran on CUDA";
  return "";
}

TEST(CudaIntTypes, TypesAreNotRefusedBeforeTheDeviceCheck) {
  std::string why;
  if (cuda_usable(&why)) GTEST_SKIP() << "a CUDA device is present (the CUDA tests cover this)";
  const std::string msg =
      cuda_build_error(ew_case("no device", ElementWiseOp::kMax, false, vec<uint32_t>(DataType::kUInt32, {1, 2}),
                               vec<uint32_t>(DataType::kUInt32, {3, 0})));
  EXPECT_EQ(msg.find("CPU only"), std::string::npos) << msg;
  EXPECT_NE(msg.find("backend"), std::string::npos) << msg;
}

TEST(CudaIntTypes, LayersWithoutSuchKernelsFailToBuildNamingLayerAndType) {
  KILN_REQUIRE_CUDA();
  const HostTensor u16 = vec<uint16_t>(DataType::kUInt16, {1, 2, 3, 4});
  Attributes neg;
  neg.set("op", std::string("neg"));
  Attributes arg;
  arg.set("op", std::string("max"));
  Attributes einsum;
  einsum.set("equation", std::string("i,i->"));
  Attributes scatter;
  scatter.set("mode", std::string("elements"));
  const std::vector<test::OpCase> cases = {
      op_case("unary", kLayerUnary, {input(u16)}, neg),
      op_case("argreduce", kLayerArgReduce, {input(vec<uint32_t>(DataType::kUInt32, {5, 1}))}, arg),
      op_case("einsum", kLayerEinsum,
              {input(vec<int16_t>(DataType::kInt16, {1, 2})), input(vec<int16_t>(DataType::kInt16, {3, 4}))}, einsum),
      op_case(
          "scatter", kLayerScatter,
          {input(u16), input(vec<int64_t>(DataType::kInt64, {0}), true), input(vec<uint16_t>(DataType::kUInt16, {9}))},
          scatter),
  };
  for (const auto& c : cases) {
    const std::string msg = cuda_build_error(c);
    EXPECT_NE(msg.find("layer 'op' (" + c.layer_type + ")"), std::string::npos) << msg;
    EXPECT_TRUE(msg.find("uint16") != std::string::npos || msg.find("uint32") != std::string::npos ||
                msg.find("int16") != std::string::npos)
        << msg;
  }
}

}  // namespace
}  // namespace kiln
