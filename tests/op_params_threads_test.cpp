// params_of<P>() from many threads at once (issue 13): contexts of one engine prepare kernels in
// parallel and read the same layers' params. Meaningful under ThreadSanitizer and
// AddressSanitizer (the tsan and asan presets run it): two threads that both find the cache stale
// decode at the same time, and the second must not free the params the first one returned.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "kiln/network.h"
#include "src/ir/op_params.h"
#include "src/ir/pool_params.h"

namespace kiln {
namespace {

TEST(OpParamsThreads, ConcurrentReadsAfterAnEditShareOneDecodeThatStaysValid) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{1, 2, 9, 9});
  std::vector<Layer*> pools;
  for (int i = 0; i < 16; ++i) {
    Attributes a;
    a.set("mode", std::string("max"));
    a.set("kernel", std::vector<int64_t>{2, 2});
    pools.push_back(net.add_layer(kLayerPooling, {x}, 1, a, "p" + std::to_string(i)));
    net.mark_output(pools.back()->output(0));
  }
  constexpr int kThreads = 8;
  constexpr int kRounds = 60;
  std::atomic<int> wrong{0};
  for (int round = 0; round < kRounds; ++round) {
    // An edit makes every cached entry stale: the threads below all miss at once.
    const int64_t k = 1 + round % 3;
    for (Layer* p : pools) p->attrs().set("kernel", std::vector<int64_t>{k, k});
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < kThreads) std::this_thread::yield();
        for (int i = 0; i < 16; ++i) {
          const Layer& layer = *pools[static_cast<size_t>((i + t) % 16)];
          const PoolParams& params = params_of<PoolParams>(layer);
          // Read the params after other threads may have stored theirs.
          std::this_thread::yield();
          if (!params.is_max() || params.kernel != std::vector<int64_t>{k, k}) wrong.fetch_add(1);
        }
      });
    }
    for (std::thread& th : threads) th.join();
  }
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace kiln
