// Implementation of the whole-model ONNX data cases (see onnx_case.h).
#include "onnx_case.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/kiln.h"
#include "src/core/tensor_io.h"
#include "tests/op_harness.h"

namespace kiln::test {

std::vector<OnnxDataCase> load_onnx_data_cases(const std::string& folder) {
  std::ifstream f(folder + "/cases.json");
  if (!f) return {};
  std::vector<OnnxDataCase> out;
  for (const auto& c : nlohmann::json::parse(f)) {
    out.push_back(OnnxDataCase{folder, c["name"], c["inputs"], c["outputs"], c["rtol"], c["atol"]});
  }
  return out;
}

void run_onnx_data_case(const OnnxDataCase& c) {
  const std::string base = c.folder + "/" + c.name;
  Network net;
  OnnxParser(net).parse_file(base + ".onnx");
  ASSERT_EQ(net.num_inputs(), c.num_inputs) << c.name;
  ASSERT_EQ(net.num_outputs(), c.num_outputs) << c.name;
  std::vector<HostTensor> inputs;
  OptimizationProfile profile;
  for (int i = 0; i < net.num_inputs(); ++i) {
    inputs.push_back(load_npy(base + "_in" + std::to_string(i) + ".npy"));
    profile.set_dimensions(net.input(i)->name(), inputs.back().dims(), inputs.back().dims(), inputs.back().dims());
  }
  BuilderConfig config;
  config.num_threads = 1;
  if (!inputs.empty()) config.profiles.push_back(profile);
  const auto bytes = Builder().build_serialized(net, config);
  auto engine = Runtime().deserialize(bytes.data(), bytes.size());
  auto ctx = engine->create_execution_context();
  for (int i = 0; i < net.num_inputs(); ++i) {
    ctx->set_input_shape(net.input(i)->name(), inputs[static_cast<size_t>(i)].dims());
    ctx->set_tensor_address(net.input(i)->name(), inputs[static_cast<size_t>(i)].data());
  }
  std::vector<HostTensor> outputs, expected;
  for (int i = 0; i < net.num_outputs(); ++i) {
    expected.push_back(load_npy(base + "_out" + std::to_string(i) + ".npy"));
    const std::string name = net.output(i)->name();
    ASSERT_EQ(engine->io_tensor(name).type, expected.back().type())
        << c.name << " output " << name << ": kiln gives " << to_string(engine->io_tensor(name).type)
        << ", ONNX Runtime " << to_string(expected.back().type());
    ASSERT_EQ(ctx->tensor_shape(name), expected.back().dims()) << c.name << " output " << name;
    outputs.emplace_back(expected.back().type(), expected.back().dims());
    ctx->set_tensor_address(name, outputs.back().data());
  }
  ctx->execute();
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::string message;
    EXPECT_TRUE(compare_tensors(outputs[i], expected[i], c.rtol, c.atol, nullptr, &message))
        << c.name << " output " << net.output(static_cast<int>(i))->name() << ": " << message;
  }
}

}  // namespace kiln::test
