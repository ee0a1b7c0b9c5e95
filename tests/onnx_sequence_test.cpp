// Tests of the ONNX sequence importers (src/onnx/ops_sequence.cpp): small models built here with
// the ONNX protobuf API, imported, built into CPU engines and run. Expected tensors come from a
// plain host model of the ONNX spec in this file (slice / concatenate / stack of row-major
// arrays, sequence positions worked out by hand from the spec), not from kiln. Also the errors
// (non-constant positions, sequences as graph outputs, unknown extents, out-of-range positions)
// and the ONNX backend tests simple/test_sequence_model1..8 against their stored outputs.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/kiln.h"
#include "src/core/tensor_io.h"
#include "src/onnx/onnx_proto.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Ints = std::vector<int64_t>;

// ---- a host model of the arrays ------------------------------------------------------------------

// A row-major float array: the independent side of every comparison.
struct Array {
  Ints dims;
  std::vector<float> v;
};

int64_t volume(const Ints& d) { return std::accumulate(d.begin(), d.end(), int64_t{1}, std::multiplies<>()); }

// Distinct values base, base+1, ... so that a wrong element or order shows.
Array iota(const Ints& dims, float base) {
  Array a{dims, std::vector<float>(static_cast<size_t>(volume(dims)))};
  for (size_t i = 0; i < a.v.size(); ++i) a.v[i] = base + static_cast<float>(i);
  return a;
}

int64_t norm_axis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

// Extents before the axis, at it and after it.
void split_extents(const Ints& d, int64_t axis, int64_t& outer, int64_t& mid, int64_t& inner) {
  outer = volume(Ints(d.begin(), d.begin() + axis));
  mid = d[static_cast<size_t>(axis)];
  inner = volume(Ints(d.begin() + axis + 1, d.end()));
}

// numpy a[..., start:start+len, ...] along axis.
Array slice(const Array& a, int64_t axis, int64_t start, int64_t len) {
  axis = norm_axis(axis, a.dims.size());
  int64_t outer, mid, inner;
  split_extents(a.dims, axis, outer, mid, inner);
  Array r{a.dims, {}};
  r.dims[static_cast<size_t>(axis)] = len;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t m = start; m < start + len; ++m) {
      for (int64_t i = 0; i < inner; ++i) r.v.push_back(a.v[static_cast<size_t>((o * mid + m) * inner + i)]);
    }
  }
  return r;
}

// numpy.concatenate(parts, axis).
Array concat(const std::vector<Array>& parts, int64_t axis) {
  axis = norm_axis(axis, parts[0].dims.size());
  Array r{parts[0].dims, {}};
  r.dims[static_cast<size_t>(axis)] = 0;
  for (const auto& p : parts) r.dims[static_cast<size_t>(axis)] += p.dims[static_cast<size_t>(axis)];
  int64_t outer, mid, inner;
  split_extents(parts[0].dims, axis, outer, mid, inner);
  for (int64_t o = 0; o < outer; ++o) {
    for (const auto& p : parts) {
      const int64_t pm = p.dims[static_cast<size_t>(axis)];
      for (int64_t k = 0; k < pm * inner; ++k) r.v.push_back(p.v[static_cast<size_t>(o * pm * inner + k)]);
    }
  }
  return r;
}

// numpy.expand_dims(a, axis) (axis counts in the result's rank).
Array expand_dims(Array a, int64_t axis) {
  axis = norm_axis(axis, a.dims.size() + 1);
  a.dims.insert(a.dims.begin() + axis, 1);
  return a;
}

Array drop_axis(Array a, int64_t axis) {
  a.dims.erase(a.dims.begin() + norm_axis(axis, a.dims.size()));
  return a;
}

HostTensor to_host(const Array& a) { return HostTensor::from_vector(DataType::kFloat32, Dims::from(a.dims), a.v); }

void expect_equal(const HostTensor& got, const Array& want, const std::string& what) {
  ASSERT_EQ(got.type(), DataType::kFloat32) << what;
  ASSERT_EQ(got.dims(), Dims::from(want.dims)) << what;
  const float* g = got.as<float>();
  for (size_t i = 0; i < want.v.size(); ++i) {
    ASSERT_EQ(g[i], want.v[i]) << what << " element " << i;
  }
}

// ---- models ----------------------------------------------------------------------------------------

// An ONNX model assembled node by node (default-domain opset 12 unless told).
class Model {
 public:
  explicit Model(int64_t opset = 12) {
    m_.set_ir_version(7);
    auto* op = m_.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    m_.mutable_graph()->set_name("sequence_test");
  }
  // A graph input; kDynamic extents get a symbolic name.
  Model& input(const std::string& name, const Ints& dims, int elem = onnx::TensorProto::FLOAT) {
    auto* t = m_.mutable_graph()->add_input();
    t->set_name(name);
    t->mutable_type()->mutable_tensor_type()->set_elem_type(elem);
    auto* shape = t->mutable_type()->mutable_tensor_type()->mutable_shape();
    for (int64_t d : dims) {
      if (d == kDynamic)
        shape->add_dim()->set_dim_param("n_" + name);
      else
        shape->add_dim()->set_dim_value(d);
    }
    return *this;
  }
  Model& output(const std::string& name, int elem = onnx::TensorProto::FLOAT) {
    auto* t = m_.mutable_graph()->add_output();
    t->set_name(name);
    t->mutable_type()->mutable_tensor_type()->set_elem_type(elem);
    return *this;
  }
  Model& sequence_output(const std::string& name) {
    auto* t = m_.mutable_graph()->add_output();
    t->set_name(name);
    t->mutable_type()->mutable_sequence_type()->mutable_elem_type()->mutable_tensor_type()->set_elem_type(
        onnx::TensorProto::FLOAT);
    return *this;
  }
  // An int64 initializer: a scalar when `scalar`, else 1-D.
  Model& ints(const std::string& name, const Ints& values, bool scalar = true) {
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    if (!scalar) t->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
    return *this;
  }
  Model& floats(const std::string& name, const Array& a) {
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : a.dims) t->add_dims(d);
    for (float v : a.v) t->add_float_data(v);
    return *this;
  }
  Model& node(const std::string& op, const std::vector<std::string>& in, const std::vector<std::string>& out,
              const std::map<std::string, int64_t>& attrs = {}, const std::string& name = "") {
    auto* n = m_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? out[0] + "_node" : name);
    for (const auto& s : in) n->add_input(s);
    for (const auto& s : out) n->add_output(s);
    for (const auto& [k, v] : attrs) {
      auto* a = n->add_attribute();
      a->set_name(k);
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(v);
    }
    return *this;
  }
  std::string bytes() const { return m_.SerializeAsString(); }
  onnx::ModelProto& proto() { return m_; }

 private:
  onnx::ModelProto m_;
};

void parse(const std::string& bytes, Network& net) {
  OnnxParser(net).parse_bytes(bytes.data(), bytes.size(), ".", "<test>");
}

// Imports, builds a CPU engine for the inputs' dims, runs; outputs by ONNX name.
std::map<std::string, HostTensor> run(const Model& model, const std::map<std::string, HostTensor>& inputs) {
  Network net;
  parse(model.bytes(), net);
  BuilderConfig config;
  OptimizationProfile profile;
  std::map<std::string, HostTensor> in;  // deep copies: execution wants writable addresses
  for (int i = 0; i < net.num_inputs(); ++i) {
    const std::string& name = net.input(i)->name();
    in[name] = inputs.at(name).clone();
    profile.set_dimensions(name, in[name].dims(), in[name].dims(), in[name].dims());
  }
  if (!in.empty()) config.profiles.push_back(profile);
  const auto engine_bytes = Builder().build_serialized(net, config);
  auto engine = Runtime().deserialize(engine_bytes.data(), engine_bytes.size());
  auto ctx = engine->create_execution_context();
  for (auto& [name, t] : in) {
    ctx->set_input_shape(name, t.dims());
    ctx->set_tensor_address(name, t.data());
  }
  std::map<std::string, HostTensor> out;
  for (int i = 0; i < net.num_outputs(); ++i) {
    const std::string name = net.output(i)->name();
    out[name] = HostTensor(engine->io_tensor(name).type, ctx->tensor_shape(name));
    ctx->set_tensor_address(name, out[name].data());
  }
  ctx->execute();
  return out;
}

// The ParseError message of importing the model ("" and a test failure when it imports).
std::string import_error(const Model& model) {
  Network net;
  try {
    parse(model.bytes(), net);
  } catch (const ParseError& e) {
    return e.what();
  }
  ADD_FAILURE() << "the model imported without error";
  return "";
}

int64_t scalar_int(const HostTensor& t) {
  EXPECT_EQ(t.type(), DataType::kInt64);
  EXPECT_EQ(t.dims(), Dims{});
  return t.to_int64().at(0);
}

// ---- the list operations ----------------------------------------------------------------------------

TEST(OnnxSequence, InsertEraseAtFollowTheSpecPositions) {
  const Array x = iota({2, 3}, 0), y = iota({1, 3}, 100), z = iota({4, 3}, 200), w = iota({3, 3}, 300);
  Model m;
  m.input("x", {2, 3}).input("y", {1, 3}).input("z", {4, 3}).input("w", {3, 3});
  m.ints("p_minus1", {-1}).ints("p0", {0}).ints("p3", {3}).ints("p_minus2", {-2}).ints("p1", {1});
  m.ints("p_minus4", {-4});
  // [x, y, z] -insert w at -1-> [x, y, w, z] -erase 0-> [y, w, z] -insert x at 3 (= n, append)->
  // [y, w, z, x] -erase (default: last)-> [y, w, z] -insert y (default: append)-> [y, w, z, y]
  m.node("SequenceConstruct", {"x", "y", "z"}, {"s1"})
      .node("SequenceInsert", {"s1", "w", "p_minus1"}, {"s2"})
      .node("SequenceErase", {"s2", "p0"}, {"s3"})
      .node("SequenceInsert", {"s3", "x", "p3"}, {"s4"})
      .node("SequenceErase", {"s4"}, {"s5"})
      .node("SequenceInsert", {"s5", "y"}, {"s6"})
      .node("SequenceAt", {"s6", "p_minus2"}, {"at_minus2"})  // z
      .node("SequenceAt", {"s6", "p1"}, {"at_1"})             // w
      .node("SequenceAt", {"s6", "p_minus4"}, {"at_minus4"})  // y
      .node("SequenceAt", {"s4", "p3"}, {"s4_at_3"})          // x
      .node("SequenceLength", {"s6"}, {"len6"})
      .node("SequenceLength", {"s3"}, {"len3"});
  for (const char* o : {"at_minus2", "at_1", "at_minus4", "s4_at_3"}) m.output(o);
  m.output("len6", onnx::TensorProto::INT64).output("len3", onnx::TensorProto::INT64);
  auto out = run(m, {{"x", to_host(x)}, {"y", to_host(y)}, {"z", to_host(z)}, {"w", to_host(w)}});
  expect_equal(out.at("at_minus2"), z, "at -2");
  expect_equal(out.at("at_1"), w, "at 1");
  expect_equal(out.at("at_minus4"), y, "at -4");
  expect_equal(out.at("s4_at_3"), x, "s4 at 3");
  EXPECT_EQ(scalar_int(out.at("len6")), 4);
  EXPECT_EQ(scalar_int(out.at("len3")), 3);
}

TEST(OnnxSequence, ConstantElementsStayConstant) {
  // SequenceAt of an initializer is a known constant, so it can be Reshape's shape.
  Model m;
  m.input("x", {2, 6});
  m.ints("shape_a", {3, 4}, false).ints("shape_b", {4, 3}, false).ints("p1", {1});
  m.node("SequenceConstruct", {"shape_a", "shape_b"}, {"shapes"})
      .node("SequenceAt", {"shapes", "p1"}, {"shape"})
      .node("Reshape", {"x", "shape"}, {"y"})
      .output("y");
  Network net;
  parse(m.bytes(), net);
  const Tensor* y = net.find_tensor("y");
  ASSERT_NE(y, nullptr);
  const Tensor* shape = y->producer()->input(1);
  ASSERT_EQ(shape->producer()->type(), kLayerConstant);
  EXPECT_EQ(shape->producer()->attrs().get_tensor("value").to_int64(), (Ints{4, 3}));
  const Array x = iota({2, 6}, 1);
  Array want = x;
  want.dims = {4, 3};
  expect_equal(run(m, {{"x", to_host(x)}}).at("y"), want, "reshape");
}

// ---- ConcatFromSequence ------------------------------------------------------------------------

TEST(OnnxSequence, ConcatFromSequenceConcatenatesOrStacks) {
  const Array a = iota({2, 3, 4}, 0), b = iota({2, 3, 4}, 1000), c = iota({2, 3, 4}, 2000);
  Model m;
  m.input("a", {2, 3, 4}).input("b", {2, 3, 4}).input("c", {2, 3, 4});
  m.node("SequenceEmpty", {}, {"e"})
      .node("SequenceInsert", {"e", "a"}, {"s1"})
      .node("SequenceInsert", {"s1", "b"}, {"s2"})
      .node("SequenceInsert", {"s2", "c"}, {"s"})
      .node("ConcatFromSequence", {"s"}, {"cat1"}, {{"axis", 1}})
      .node("ConcatFromSequence", {"s"}, {"cat_neg"}, {{"axis", -1}})
      .node("ConcatFromSequence", {"s"}, {"stack_last"}, {{"axis", -1}, {"new_axis", 1}})
      .node("ConcatFromSequence", {"s"}, {"stack1"}, {{"axis", 1}, {"new_axis", 1}})
      .node("ConcatFromSequence", {"s"}, {"stack_end"}, {{"axis", 3}, {"new_axis", 1}});
  for (const char* o : {"cat1", "cat_neg", "stack_last", "stack1", "stack_end"}) m.output(o);
  auto out = run(m, {{"a", to_host(a)}, {"b", to_host(b)}, {"c", to_host(c)}});
  expect_equal(out.at("cat1"), concat({a, b, c}, 1), "axis 1");
  expect_equal(out.at("cat_neg"), concat({a, b, c}, 2), "axis -1");
  const auto stack = [&](int64_t axis) {
    return concat({expand_dims(a, axis), expand_dims(b, axis), expand_dims(c, axis)}, axis);
  };
  expect_equal(out.at("stack_last"), stack(-1), "new_axis, axis -1");
  EXPECT_EQ(out.at("stack_last").dims(), (Dims{2, 3, 4, 3}));
  expect_equal(out.at("stack1"), stack(1), "new_axis, axis 1");
  expect_equal(out.at("stack_end"), stack(3), "new_axis, axis 3");
}

// ---- SplitToSequence ---------------------------------------------------------------------------

TEST(OnnxSequence, SplitToSequenceWithoutSplitKeepsOrDropsTheAxis) {
  const Array x = iota({2, 3, 4}, 0);
  Model m;
  m.input("x", {2, 3, 4});
  m.ints("p0", {0}).ints("p2", {2}).ints("p_minus1", {-1});
  m.node("SplitToSequence", {"x"}, {"keep"}, {{"axis", 1}})
      .node("SplitToSequence", {"x"}, {"drop"}, {{"axis", -1}, {"keepdims", 0}})
      .node("SequenceAt", {"keep", "p0"}, {"keep0"})
      .node("SequenceAt", {"keep", "p2"}, {"keep2"})
      .node("SequenceAt", {"drop", "p_minus1"}, {"drop_last"})
      .node("SequenceAt", {"drop", "p2"}, {"drop2"})
      .node("SequenceLength", {"keep"}, {"n_keep"})
      .node("SequenceLength", {"drop"}, {"n_drop"})
      .node("ConcatFromSequence", {"drop"}, {"restacked"}, {{"axis", -1}, {"new_axis", 1}});
  for (const char* o : {"keep0", "keep2", "drop_last", "drop2", "restacked"}) m.output(o);
  m.output("n_keep", onnx::TensorProto::INT64).output("n_drop", onnx::TensorProto::INT64);
  auto out = run(m, {{"x", to_host(x)}});
  expect_equal(out.at("keep0"), slice(x, 1, 0, 1), "keepdims=1 [0]");
  expect_equal(out.at("keep2"), slice(x, 1, 2, 1), "keepdims=1 [2]");
  expect_equal(out.at("drop_last"), drop_axis(slice(x, 2, 3, 1), 2), "keepdims=0 [-1]");
  expect_equal(out.at("drop2"), drop_axis(slice(x, 2, 2, 1), 2), "keepdims=0 [2]");
  expect_equal(out.at("restacked"), x, "split then stack");
  EXPECT_EQ(scalar_int(out.at("n_keep")), 3);
  EXPECT_EQ(scalar_int(out.at("n_drop")), 4);
}

TEST(OnnxSequence, SplitToSequenceScalarAndListSplits) {
  const Array x = iota({7, 2}, 0);
  Model m;
  m.input("x", {7, 2});
  // A scalar split of 3 over 7: 3, 3, 1. A list split: 2, 0, 5 (keepdims is ignored).
  m.ints("three", {3}).ints("sizes", {2, 0, 5}, false).ints("p0", {0}).ints("p1", {1}).ints("p2", {2});
  m.node("SplitToSequence", {"x", "three"}, {"chunks"}, {{"keepdims", 0}})
      .node("SplitToSequence", {"x", "sizes"}, {"parts"}, {{"axis", -2}, {"keepdims", 0}})
      .node("SequenceAt", {"chunks", "p1"}, {"chunk1"})
      .node("SequenceAt", {"chunks", "p2"}, {"chunk2"})
      .node("SequenceAt", {"parts", "p0"}, {"part0"})
      .node("SequenceAt", {"parts", "p2"}, {"part2"})
      .node("SequenceLength", {"chunks"}, {"n_chunks"})
      .node("SequenceErase", {"parts", "p1"}, {"parts_nonempty"})  // drop the empty part
      .node("ConcatFromSequence", {"parts_nonempty"}, {"rejoined"}, {{"axis", 0}});
  for (const char* o : {"chunk1", "chunk2", "part0", "part2", "rejoined"}) m.output(o);
  m.output("n_chunks", onnx::TensorProto::INT64);
  auto out = run(m, {{"x", to_host(x)}});
  expect_equal(out.at("chunk1"), slice(x, 0, 3, 3), "scalar split [1]");
  expect_equal(out.at("chunk2"), slice(x, 0, 6, 1), "scalar split [2] (the remainder)");
  expect_equal(out.at("part0"), slice(x, 0, 0, 2), "list split [0]");
  expect_equal(out.at("part2"), slice(x, 0, 2, 5), "list split [2]");
  expect_equal(out.at("rejoined"), x, "list split rejoined");
  EXPECT_EQ(scalar_int(out.at("n_chunks")), 3);
}

TEST(OnnxSequence, SplitToSequenceFindsTheExtentThroughEarlierLayers) {
  // No value_info for "t": the extent comes from the network built so far (static inputs).
  const Array x = iota({3, 5}, 0);
  Model m;
  m.input("x", {3, 5});
  m.ints("p_minus1", {-1});
  m.node("Transpose", {"x"}, {"t"})  // [5, 3]
      .node("SplitToSequence", {"t"}, {"rows"}, {{"keepdims", 0}})
      .node("SequenceAt", {"rows", "p_minus1"}, {"last_row"})
      .node("SequenceLength", {"rows"}, {"n"})
      .output("last_row")
      .output("n", onnx::TensorProto::INT64);
  auto out = run(m, {{"x", to_host(x)}});
  // Row 4 of x^T is column 4 of x.
  Array want{{3}, {}};
  for (int r = 0; r < 3; ++r) want.v.push_back(x.v[static_cast<size_t>(r * 5 + 4)]);
  expect_equal(out.at("last_row"), want, "last row of the transpose");
  EXPECT_EQ(scalar_int(out.at("n")), 5);
}

// ---- errors --------------------------------------------------------------------------------------

TEST(OnnxSequence, NonConstantPositionNamesTheNodeAndTheInput) {
  Model m;
  m.input("x", {2}).input("pos", {}, onnx::TensorProto::INT64);
  m.node("SequenceConstruct", {"x", "x"}, {"s"}).node("SequenceAt", {"s", "pos"}, {"y"}, {}, "pick").output("y");
  const std::string msg = import_error(m);
  EXPECT_NE(msg.find("node 'pick'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("op SequenceAt"), std::string::npos) << msg;
  // The wording `kiln conformance` looks for to feed the input as a constant.
  EXPECT_NE(msg.find("input 'pos' (position) must be an initializer or constant"), std::string::npos) << msg;
}

TEST(OnnxSequence, SequenceGraphOutputNamesTheProducingNode) {
  Model m;
  m.input("x", {2});
  m.node("SequenceConstruct", {"x"}, {"s"}, {}, "make_seq").sequence_output("s");
  const std::string msg = import_error(m);
  EXPECT_NE(msg.find("node 'make_seq'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("op SequenceConstruct"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'s' is a graph output, but it is a sequence"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ConcatFromSequence"), std::string::npos) << msg;
}

TEST(OnnxSequence, OutOfRangePositionsAreErrors) {
  auto error_for = [](const std::string& op, int64_t pos) {
    Model m;
    m.input("x", {2});
    m.ints("pos", {pos});
    m.node("SequenceConstruct", {"x", "x", "x"}, {"s"});
    if (op == "SequenceInsert")
      m.node(op, {"s", "x", "pos"}, {"s2"}, {}, "op").node("ConcatFromSequence", {"s2"}, {"y"}, {{"axis", 0}});
    else if (op == "SequenceErase")
      m.node(op, {"s", "pos"}, {"s2"}, {}, "op").node("ConcatFromSequence", {"s2"}, {"y"}, {{"axis", 0}});
    else
      m.node(op, {"s", "pos"}, {"y"}, {}, "op");
    m.output("y");
    return import_error(m);
  };
  // n = 3: SequenceAt/Erase accept [-3, 2], SequenceInsert [-3, 3].
  for (const auto& [op, pos, range] :
       std::vector<std::tuple<std::string, int64_t, std::string>>{{"SequenceAt", 3, "[-3, 2]"},
                                                                  {"SequenceAt", -4, "[-3, 2]"},
                                                                  {"SequenceErase", 3, "[-3, 2]"},
                                                                  {"SequenceInsert", 4, "[-3, 3]"},
                                                                  {"SequenceInsert", -4, "[-3, 3]"}}) {
    const std::string msg = error_for(op, pos);
    EXPECT_NE(msg.find("node 'op': op " + op), std::string::npos) << msg;
    EXPECT_NE(msg.find("position " + std::to_string(pos) + " is out of range " + range), std::string::npos) << msg;
  }
}

TEST(OnnxSequence, SplitWithoutKnownExtentAndEmptyConcatAreErrors) {
  {
    Model m;
    m.input("x", {kDynamic, 2});
    m.node("SplitToSequence", {"x"}, {"s"}, {}, "split")
        .node("ConcatFromSequence", {"s"}, {"y"}, {{"axis", 0}})
        .output("y");
    const std::string msg = import_error(m);
    EXPECT_NE(msg.find("node 'split'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("extent of axis 0 of input 'x'"), std::string::npos) << msg;
  }
  {
    Model m;
    m.node("SequenceEmpty", {}, {"s"}).node("ConcatFromSequence", {"s"}, {"y"}, {{"axis", 0}}, "cat").output("y");
    const std::string msg = import_error(m);
    EXPECT_NE(msg.find("node 'cat'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("is empty"), std::string::npos) << msg;
  }
  {
    // Another op reading a sequence is reported as unsupported, not as a missing input.
    Model m;
    m.input("x", {2});
    m.node("SequenceConstruct", {"x"}, {"s"}).node("Identity", {"s"}, {"y"}, {}, "copy").output("y");
    const std::string msg = import_error(m);
    EXPECT_NE(msg.find("node 'copy'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("input 's' is a sequence"), std::string::npos) << msg;
  }
}

// ---- the ONNX backend tests ---------------------------------------------------------------------

// simple/test_sequence_model<k>: graph inputs that are initializers too (IR 3 style) are not
// fed; model 8 takes its split as a graph input, which kiln needs as a constant (as `kiln
// conformance` does, it becomes an initializer holding the data set's value).
TEST(OnnxSequence, BackendSimpleSequenceModels) {
  const std::string root = "/usr/include/onnx/backend/test/data/simple/";
  if (!fs::exists(root + "test_sequence_model1/model.onnx"))
    GTEST_SKIP() << root << " is not installed (libonnx-testdata)";
  for (int k = 1; k <= 8; ++k) {
    SCOPED_TRACE("test_sequence_model" + std::to_string(k));
    const std::string dir = root + "test_sequence_model" + std::to_string(k) + "/";
    Model m;
    {
      std::ifstream f(dir + "model.onnx", std::ios::binary);
      ASSERT_TRUE(m.proto().ParseFromIstream(&f));
    }
    auto& graph = *m.proto().mutable_graph();
    std::set<std::string> initializers;
    for (const auto& init : graph.initializer()) initializers.insert(init.name());
    std::map<std::string, HostTensor> inputs;
    int file = 0;
    google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> kept;
    for (const auto& v : graph.input()) {
      if (initializers.count(v.name())) continue;
      const std::string path = dir + "test_data_set_0/input_" + std::to_string(file++) + ".pb";
      if (v.name() == "Splits") {
        std::ifstream f(path, std::ios::binary);
        onnx::TensorProto* init = graph.add_initializer();
        ASSERT_TRUE(init->ParseFromIstream(&f));
        init->set_name(v.name());
        continue;
      }
      inputs[v.name()] = load_tensor_pb(path);
      *kept.Add() = v;
    }
    graph.mutable_input()->Swap(&kept);
    const auto out = run(m, inputs);
    ASSERT_EQ(graph.output_size(), 1);
    const HostTensor want = load_tensor_pb(dir + "test_data_set_0/output_0.pb");
    const HostTensor& got = out.at(graph.output(0).name());
    ASSERT_EQ(got.type(), want.type());
    ASSERT_EQ(got.dims(), want.dims());
    ASSERT_EQ(got.nbytes(), want.nbytes());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.nbytes()), 0);
  }
}

}  // namespace
}  // namespace kiln
