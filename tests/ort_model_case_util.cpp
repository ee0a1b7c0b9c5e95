// Implementation of the ONNX-model case helpers of tests/ort_model_case.h.
#include "tests/ort_model_case.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "kiln/kiln.h"
#include "src/core/tensor_io.h"
#include "src/ir/shape_inference.h"
#include "tests/op_harness.h"

namespace kiln::test::ortcase {

namespace fs = std::filesystem;

namespace {

const std::string kNodeTestDir = "/usr/include/onnx/backend/test/data/node/";

void compare_all(const std::vector<HostTensor>& got, const std::vector<HostTensor>& expected, double rtol, double atol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what << ": output count";
  for (size_t i = 0; i < got.size(); ++i) {
    std::string message;
    EXPECT_TRUE(compare_tensors(got[i], expected[i], rtol, atol, nullptr, &message))
        << what << " output " << i << ": " << message;
  }
}

}  // namespace

std::vector<HostTensor> run_model(const std::string& path, const std::vector<HostTensor>& inputs) {
  Network net;
  OnnxParser(net).parse_file(path);
  if (net.num_inputs() != static_cast<int>(inputs.size())) {
    throw Error(path + ": the network has " + std::to_string(net.num_inputs()) + " inputs, the case gives " +
                std::to_string(inputs.size()));
  }
  BuilderConfig config;
  OptimizationProfile profile;
  for (int i = 0; i < net.num_inputs(); ++i) {
    const Dims& d = inputs[static_cast<size_t>(i)].dims();
    profile.set_dimensions(net.input(i)->name(), d, d, d);
  }
  if (!inputs.empty()) config.profiles.push_back(profile);
  const auto bytes = Builder().build_serialized(net, config);
  auto engine = Runtime().deserialize(bytes.data(), bytes.size());
  auto ctx = engine->create_execution_context();
  std::vector<HostTensor> in;  // deep copies: execution wants writable addresses
  for (const auto& t : inputs) in.push_back(t.clone());
  for (int i = 0; i < net.num_inputs(); ++i) {
    ctx->set_input_shape(net.input(i)->name(), in[static_cast<size_t>(i)].dims());
    ctx->set_tensor_address(net.input(i)->name(), in[static_cast<size_t>(i)].data());
  }
  std::vector<HostTensor> outputs;
  for (int i = 0; i < net.num_outputs(); ++i) {
    const std::string name = net.output(i)->name();
    outputs.emplace_back(engine->io_tensor(name).type, ctx->tensor_shape(name));
    ctx->set_tensor_address(name, outputs.back().data());
  }
  ctx->execute();
  return outputs;
}

void check_node_test(const std::string& name, double rtol, double atol) {
  const std::string dir = kNodeTestDir + name + "/";
  if (!fs::exists(dir + "model.onnx")) GTEST_SKIP() << dir << " is not installed (libonnx-testdata)";
  const std::string data = dir + "test_data_set_0/";
  std::vector<HostTensor> inputs, expected;
  for (int i = 0; fs::exists(data + "input_" + std::to_string(i) + ".pb"); ++i) {
    inputs.push_back(load_tensor_pb(data + "input_" + std::to_string(i) + ".pb"));
  }
  for (int i = 0; fs::exists(data + "output_" + std::to_string(i) + ".pb"); ++i) {
    expected.push_back(load_tensor_pb(data + "output_" + std::to_string(i) + ".pb"));
  }
  compare_all(run_model(dir + "model.onnx", inputs), expected, rtol, atol, name);
}

std::vector<std::pair<DataType, Dims>> infer_outputs(const std::string& type, const std::vector<In>& inputs,
                                                     const Attributes& attrs, int num_outputs) {
  Network net;
  std::vector<Tensor*> tensors;
  std::vector<TensorState> states(inputs.size());
  std::vector<const TensorState*> ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    tensors.push_back(net.add_input("x" + std::to_string(i), inputs[i].type, inputs[i].dims));
    states[i].type = inputs[i].type;
    states[i].dims = inputs[i].dims;
    ptrs.push_back(&states[i]);
  }
  Layer* layer = net.add_layer(type, tensors, num_outputs, attrs, "op");
  return infer_layer(*layer, ptrs);
}

std::string infer_error(const std::string& type, const std::vector<In>& inputs, const Attributes& attrs,
                        int num_outputs) {
  try {
    infer_outputs(type, inputs, attrs, num_outputs);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace kiln::test::ortcase
