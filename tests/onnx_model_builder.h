// Small ONNX models written in C++ with the protobuf API, for tests that need a model with an
// exact, often hostile, content (huge dims, bad opsets, cycles, odd names): graph inputs and
// outputs, int64 and float initializers or raw protos, nodes with int / ints attributes; and
// the two helpers the hostile-input tests share (import, expect_mentions).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "kiln/network.h"
#include "kiln/onnx_parser.h"
#include "kiln/types.h"
#include "src/onnx/onnx_proto.h"

namespace kiln::test {

class OnnxModelBuilder {
 public:
  explicit OnnxModelBuilder(int64_t opset = 17) {
    model_.set_ir_version(8);
    auto* op = model_.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    model_.mutable_graph()->set_name("g");
  }

  // A graph input or output; dims < 0 are symbolic ("N").
  OnnxModelBuilder& input(const std::string& name, int32_t elem_type, const std::vector<int64_t>& dims) {
    value(*model_.mutable_graph()->add_input(), name, elem_type, dims);
    return *this;
  }
  OnnxModelBuilder& output(const std::string& name, int32_t elem_type) {
    auto* v = model_.mutable_graph()->add_output();
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(elem_type);
    return *this;
  }

  // An int64 initializer (a scalar when `scalar`, else 1-D).
  OnnxModelBuilder& int64s(const std::string& name, const std::vector<int64_t>& values, bool scalar = false) {
    auto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    if (!scalar) t->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
    return *this;
  }
  OnnxModelBuilder& floats(const std::string& name, const std::vector<int64_t>& dims,
                           const std::vector<float>& values) {
    auto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    for (float v : values) t->add_float_data(v);
    return *this;
  }
  onnx::TensorProto& initializer() { return *model_.mutable_graph()->add_initializer(); }

  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::string& name = "") {
    onnx::NodeProto& n = *model_.mutable_graph()->add_node();
    n.set_op_type(op);
    if (!name.empty()) n.set_name(name);
    for (const auto& i : inputs) n.add_input(i);
    for (const auto& o : outputs) n.add_output(o);
    return n;
  }

  onnx::ModelProto& model() { return model_; }
  std::string bytes() const { return model_.SerializeAsString(); }
  void save(const std::string& path) const {
    std::ofstream out(path, std::ios::binary);
    out << bytes();
  }

 private:
  static void value(onnx::ValueInfoProto& v, const std::string& name, int32_t elem_type,
                    const std::vector<int64_t>& dims) {
    v.set_name(name);
    auto* tt = v.mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem_type);
    auto* shape = tt->mutable_shape();
    for (int64_t d : dims) {
      if (d >= 0) {
        shape->add_dim()->set_dim_value(d);
      } else {
        shape->add_dim()->set_dim_param("N");
      }
    }
  }
  onnx::ModelProto model_;
};

inline void set_int(onnx::NodeProto& n, const std::string& name, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

inline void set_ints(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

// The model imported into a new Network (kiln::ParseError and other kiln::Errors propagate).
inline std::unique_ptr<Network> import_model(const OnnxModelBuilder& b) {
  auto net = std::make_unique<Network>();
  const std::string bytes = b.bytes();
  OnnxParser(*net).parse_bytes(bytes.data(), bytes.size());
  return net;
}

// Fails unless `message` is non-empty and contains every one of `parts`.
inline void expect_mentions(const std::string& message, const std::vector<std::string>& parts) {
  EXPECT_FALSE(message.empty()) << "no error";
  for (const auto& p : parts) EXPECT_NE(message.find(p), std::string::npos) << "'" << p << "' not in: " << message;
}

}  // namespace kiln::test
