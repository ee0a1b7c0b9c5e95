// Thread counts (issue 16): kMaxThreads bounds BuilderConfig::num_threads, the count engines
// store and ExecutionContext::set_num_threads; beyond it libgomp crashed or failed to create
// threads. A build never writes an engine that its own reader rejects.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "src/engine/engine_format.h"
#include "tests/onnx_model_builder.h"

namespace kiln {
namespace {

using test::expect_mentions;

std::unique_ptr<Network> relu_network() {
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{4});
  net->mark_output(net->add_activation(x, ActivationType::kRelu)->output(0));
  return net;
}

TEST(HostileThreads, BuilderRejectsThreadCountsOutsideTheLimit) {
  auto net = relu_network();
  for (const int threads : {-1, kMaxThreads + 1, 65535, 100000}) {
    BuilderConfig config;
    config.num_threads = threads;
    try {
      (void)Builder().build_serialized(*net, config);
      ADD_FAILURE() << threads << " threads accepted";
    } catch (const Error& e) {
      expect_mentions(e.what(), {"num_threads is " + std::to_string(threads), "0..1024"});
    }
  }
  BuilderConfig config;
  config.num_threads = kMaxThreads;
  const auto bytes = Builder().build_serialized(*net, config);
  EXPECT_NO_THROW((void)Runtime().deserialize(bytes.data(), bytes.size()));
}

TEST(HostileThreads, ContextRejectsThreadCountsOutsideTheLimit) {
  auto net = relu_network();
  BuilderConfig config;
  config.num_threads = 1;
  const auto bytes = Builder().build_serialized(*net, config);
  auto engine = Runtime().deserialize(bytes.data(), bytes.size());
  auto ctx = engine->create_execution_context();
  EXPECT_THROW(ctx->set_num_threads(kMaxThreads + 1), Error);
  EXPECT_THROW(ctx->set_num_threads(65535), Error);
  EXPECT_THROW(ctx->set_num_threads(-2), Error);
  ctx->set_num_threads(3);
  EXPECT_EQ(ctx->num_threads(), 3);
}

TEST(HostileThreads, EngineFileWithTooManyThreadsIsRejected) {
  auto net = relu_network();
  BuilderConfig config;
  config.num_threads = 3;
  auto bytes = Builder().build_serialized(*net, config);
  // The META section stores the device name ("cpu", length-prefixed) and then num_threads.
  const std::vector<uint8_t> pattern = {3, 0, 0, 0, 'c', 'p', 'u', 3, 0, 0, 0, 0, 0, 0, 0};
  auto it = std::search(bytes.begin(), bytes.end(), pattern.begin(), pattern.end());
  ASSERT_NE(it, bytes.end());
  const size_t at = static_cast<size_t>(it - bytes.begin()) + 7;
  for (const uint64_t threads : {uint64_t{1025}, uint64_t{65535}, uint64_t{65536}}) {
    auto bad = bytes;
    for (int k = 0; k < 8; ++k) bad[at + static_cast<size_t>(k)] = static_cast<uint8_t>(threads >> (8 * k));
    const uint64_t sum = engine_checksum(bad.data() + 64, bad.size() - 64);
    for (int k = 0; k < 8; ++k) bad[40 + static_cast<size_t>(k)] = static_cast<uint8_t>(sum >> (8 * k));
    try {
      (void)Runtime().deserialize(bad.data(), bad.size(), "t.engine");
      ADD_FAILURE() << threads << " threads accepted";
    } catch (const EngineFormatError& e) {
      expect_mentions(e.what(), {"num_threads is " + std::to_string(threads), "0..1024"});
    }
  }
}

}  // namespace
}  // namespace kiln
