// The serving runtime, end to end on every usable device (the CPU here; CUDA too in the GPU
// suite, scripts/gpu_suite.sh): an execution context under the patterns servers use — the input
// shapes changing every call within the profile, rotating input/output buffer sets, several
// contexts in parallel threads (each with its own stream on CUDA), user-managed memory — gives
// the results of a fresh context bit for bit, and once warmed up neither allocates (counted
// through the backend), nor synchronizes inside enqueue, nor prepares anything again (counted by
// ContextStats). The network has the pieces whose state depends on shapes: convolutions (oneDNN /
// cuDNN state per shape), a concatenation that is elided at batch 1 only, host-computed shape
// arithmetic (uploaded once per shape on devices) feeding a dynamic reshape, a constant output.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "data_dependent_io.h"
#include "kiln/kiln.h"
#include "src/backends/backend.h"

namespace kiln {
namespace {

using test::usable_devices;

constexpr int64_t kMaxN = 8, kMinH = 8, kMaxH = 16, kW = 12;

HostTensor random_tensor(DataType type, const Dims& dims, std::mt19937& rng, float scale = 0.5f) {
  HostTensor t(type, dims);
  std::uniform_real_distribution<float> u(-scale, scale);
  for (int64_t i = 0; i < t.count(); ++i) t.as<float>()[i] = u(rng);
  return t;
}

// x [N, 3, H, 12] -> conv3x3(8)+relu -> a; b = conv1x1(4)(a), c = conv1x1(4)(a); d = concat(b, c)
// (elided at batch 1); y = fc(flatten(global avgpool(d))) [N, 5]; flat = reshape(d, [Shape(x)[0],
// -1]) (the shape is computed on the host); k = a constant output.
std::unique_ptr<Network> serving_network() {
  auto net = std::make_unique<Network>();
  std::mt19937 rng(5);
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{kDynamic, 3, kDynamic, kW});
  ConvolutionDesc c3;
  c3.num_output_maps = 8;
  c3.kernel = {3, 3};
  c3.pads_begin = {1, 1};
  c3.pads_end = {1, 1};
  Layer* conv = net->add_convolution(x, c3, random_tensor(DataType::kFloat32, Dims{8, 3, 3, 3}, rng),
                                     random_tensor(DataType::kFloat32, Dims{8}, rng));
  Tensor* a = net->add_activation(conv->output(0), ActivationType::kRelu)->output(0);
  ConvolutionDesc c1;
  c1.num_output_maps = 4;
  c1.kernel = {1, 1};
  Tensor* b = net->add_convolution(a, c1, random_tensor(DataType::kFloat32, Dims{4, 8, 1, 1}, rng),
                                   random_tensor(DataType::kFloat32, Dims{4}, rng))
                  ->output(0);
  Tensor* c = net->add_convolution(a, c1, random_tensor(DataType::kFloat32, Dims{4, 8, 1, 1}, rng),
                                   random_tensor(DataType::kFloat32, Dims{4}, rng))
                  ->output(0);
  Tensor* d = net->add_concatenation({b, c}, 1)->output(0);
  PoolingDesc gap;
  gap.type = PoolingType::kAverage;
  gap.global = true;
  Tensor* g = net->add_pooling(d, gap)->output(0);
  Tensor* y = net->add_fully_connected(g, 5, random_tensor(DataType::kFloat32, Dims{5, 8}, rng),
                                       random_tensor(DataType::kFloat32, Dims{5}, rng))
                  ->output(0);
  y->set_name("y");
  net->mark_output(y);
  Tensor* shape = net->add_shape(x)->output(0);
  Tensor* zero = net->add_constant(HostTensor::from_vector<int64_t>(DataType::kInt64, Dims{1}, {0}), "zero")->output(0);
  Tensor* n = net->add_gather(shape, zero, 0)->output(0);
  Tensor* minus_one =
      net->add_constant(HostTensor::from_vector<int64_t>(DataType::kInt64, Dims{1}, {-1}), "minus_one")->output(0);
  Tensor* target = net->add_concatenation({n, minus_one}, 0)->output(0);
  Tensor* flat = net->add_shuffle_dynamic(d, target)->output(0);
  flat->set_name("flat");
  net->mark_output(flat);
  Tensor* k = net->add_constant(HostTensor::from_vector<float>(DataType::kFloat32, Dims{3}, {1.5f, -2.0f, 0.25f}), "k")
                  ->output(0);
  k->set_name("k");
  net->mark_output(k);
  return net;
}

std::shared_ptr<Engine> serving_engine(DeviceType device) {
  auto net = serving_network();
  BuilderConfig config;
  config.device = device;
  config.time_tactics = false;
  OptimizationProfile p;
  p.set_dimensions("x", Dims{1, 3, kMinH, kW}, Dims{4, 3, 12, kW}, Dims{kMaxN, 3, kMaxH, kW});
  config.profiles.push_back(p);
  const auto bytes = Builder().build_serialized(*net, config);
  return Runtime().deserialize(bytes.data(), bytes.size(), "serving test network");
}

const char* const kOutputs[] = {"y", "flat", "k"};

// One input/output buffer set in the engine's device memory, sized for the profile's largest shapes.
class BufferSet {
 public:
  BufferSet(Engine& engine, ExecutionContext& ctx) : backend_(get_backend(engine.device())) {
    ctx.set_input_shape("x", Dims{kMaxN, 3, kMaxH, kW});
    for (const TensorInfo& t : engine.io_tensors()) {
      const size_t bytes = static_cast<size_t>(ctx.max_tensor_shape(t.name).volume()) * data_type_size(t.type);
      buffers_[t.name] = backend_.allocate(std::max<size_t>(bytes, 64));
    }
  }
  ~BufferSet() {
    for (auto& [name, p] : buffers_) backend_.release(p);
  }
  BufferSet(const BufferSet&) = delete;
  BufferSet& operator=(const BufferSet&) = delete;
  void bind(ExecutionContext& ctx) const {
    for (const auto& [name, p] : buffers_) ctx.set_tensor_address(name, p);
  }
  void write(const std::string& name, const HostTensor& value) {
    backend_.copy_host_to_device(buffers_.at(name), value.data(), value.nbytes(), nullptr);
  }
  HostTensor read(ExecutionContext& ctx, Engine& engine, const std::string& name) {
    HostTensor t(engine.io_tensor(name).type, ctx.tensor_shape(name));
    backend_.copy_device_to_host(t.data(), buffers_.at(name), t.nbytes(), nullptr);
    return t;
  }

 private:
  Backend& backend_;
  std::map<std::string, void*> buffers_;
};

using Outputs = std::map<std::string, HostTensor>;

// The outputs a context made fresh for this input gives (the reference of every comparison).
Outputs fresh_outputs(Engine& engine, const HostTensor& x) {
  auto ctx = engine.create_execution_context();
  ctx->set_num_threads(1);
  BufferSet io(engine, *ctx);
  ctx->set_input_shape("x", x.dims());
  io.bind(*ctx);
  io.write("x", x);
  ctx->execute();
  Outputs out;
  for (const char* name : kOutputs) out[name] = io.read(*ctx, engine, name);
  return out;
}

void expect_identical(const Outputs& got, const Outputs& want, const std::string& what) {
  for (const auto& [name, w] : want) {
    const HostTensor& g = got.at(name);
    ASSERT_EQ(g.dims(), w.dims()) << what << ": output " << name;
    ASSERT_EQ(std::memcmp(g.data(), w.data(), w.nbytes()), 0) << what << ": output " << name << " differs";
  }
}

// The shapes servers cycle through: batch and height change every call, some repeat.
std::vector<Dims> schedule() {
  std::vector<Dims> s;
  for (auto [n, h] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 8}, {8, 16}, {3, 12}, {8, 16}, {1, 8}, {5, 9}, {3, 12}, {2, 16}}) {
    s.push_back(Dims{n, 3, h, kW});
  }
  return s;
}

size_t distinct(const std::vector<Dims>& shapes) {
  std::set<std::string> seen;
  for (const Dims& d : shapes) seen.insert(d.to_string());
  return seen.size();
}

TEST(ServingRuntime, ShapeScheduleAndRotatingBuffersMatchFreshContexts) {
  for (DeviceType device : usable_devices()) {
    SCOPED_TRACE(to_string(device));
    auto engine = serving_engine(device);
    auto ctx = engine->create_execution_context();
    ctx->set_num_threads(1);
    std::vector<std::unique_ptr<BufferSet>> sets;
    for (int k = 0; k < 3; ++k) sets.push_back(std::make_unique<BufferSet>(*engine, *ctx));
    // Sizing the buffers (max_tensor_shape at the largest shape) prepared no kernel: shape
    // queries infer shapes only.
    EXPECT_EQ(ctx->stats().shape_plans_built, 0u);
    ctx->reset_stats();
    std::mt19937 rng(17);
    const auto shapes = schedule();
    int call = 0;
    for (int pass = 0; pass < 3; ++pass) {
      for (const Dims& dims : shapes) {
        BufferSet& io = *sets[static_cast<size_t>(call % 3)];
        const HostTensor x = random_tensor(DataType::kFloat32, dims, rng, 2.0f);
        ctx->set_input_shape("x", dims);
        io.bind(*ctx);
        io.write("x", x);
        ctx->execute();
        Outputs got;
        for (const char* name : kOutputs) got[name] = io.read(*ctx, *engine, name);
        ASSERT_EQ(got["flat"].dims(), (Dims{dims[0], 8 * dims[2] * kW}));
        expect_identical(got, fresh_outputs(*engine, x), "call " + std::to_string(call) + " at " + dims.to_string());
        ++call;
      }
    }
    const ContextStats st = ctx->stats();
    EXPECT_EQ(st.inferences, static_cast<uint64_t>(call));
    EXPECT_EQ(st.shape_plans_built, distinct(shapes)) << "one plan per distinct shape, built once";
    EXPECT_EQ(st.shape_plan_hits, static_cast<uint64_t>(call) - distinct(shapes));
    EXPECT_EQ(st.shape_plans_evicted, 0u);
    EXPECT_EQ(st.graph_capture_failures, 0u);
    if (device == DeviceType::kCUDA) {
      EXPECT_GT(st.graph_replays, 0u) << "CUDA contexts replay cached graphs";
    } else {
      EXPECT_EQ(st.plain_inferences, static_cast<uint64_t>(call));
    }
  }
}

TEST(ServingRuntime, NoAllocationSynchronizationOrPreparationAfterWarmUp) {
  for (DeviceType device : usable_devices()) {
    SCOPED_TRACE(to_string(device));
    auto engine = serving_engine(device);
    Backend& backend = get_backend(device);
    auto ctx = engine->create_execution_context();
    ctx->set_num_threads(1);
    std::vector<std::unique_ptr<BufferSet>> sets;
    for (int k = 0; k < 2; ++k) sets.push_back(std::make_unique<BufferSet>(*engine, *ctx));
    std::mt19937 rng(3);
    const auto shapes = schedule();
    void* stream = device == DeviceType::kCUDA ? backend.create_stream() : nullptr;
    const auto run_pass = [&](bool count) {
      uint64_t syncs_in_enqueue = 0;
      for (size_t i = 0; i < shapes.size() * 2; ++i) {
        const Dims& dims = shapes[i % shapes.size()];
        BufferSet& io = *sets[i % 2];
        ctx->set_input_shape("x", dims);
        io.bind(*ctx);
        io.write("x", random_tensor(DataType::kFloat32, dims, rng));
        const uint64_t before = backend.synchronization_count();
        ctx->enqueue(stream);
        syncs_in_enqueue += backend.synchronization_count() - before;
        backend.synchronize(stream);
      }
      if (count) {
        EXPECT_EQ(syncs_in_enqueue, 0u) << "enqueue synchronized with the device";
      }
    };
    // Warm-up: every (shape, buffer set) pair twice (on CUDA: the plain warm-up run, then the capture).
    run_pass(false);
    run_pass(false);
    const ContextStats warm = ctx->stats();
    const uint64_t allocations = backend.allocation_count();
    run_pass(true);
    run_pass(true);
    const ContextStats after = ctx->stats();
    EXPECT_EQ(backend.allocation_count(), allocations) << "the hot path allocated device memory";
    EXPECT_EQ(after.device_allocations, warm.device_allocations);
    EXPECT_EQ(after.shape_plans_built, warm.shape_plans_built) << "a seen shape was prepared again";
    EXPECT_EQ(after.graph_captures, warm.graph_captures) << "a seen (shape, buffers) pair was captured again";
    EXPECT_EQ(after.inferences - warm.inferences, shapes.size() * 4);
    if (device == DeviceType::kCUDA) {
      EXPECT_EQ(after.graph_replays - warm.graph_replays, shapes.size() * 4) << "every warm call replays a graph";
      backend.destroy_stream(stream);
    }
  }
}

TEST(ServingRuntime, ShapeCacheBoundEvictsTheLeastRecentlyUsed) {
  for (DeviceType device : usable_devices()) {
    SCOPED_TRACE(to_string(device));
    auto engine = serving_engine(device);
    auto ctx = engine->create_execution_context();
    ctx->set_num_threads(1);
    EXPECT_EQ(ctx->shape_cache_size(), 32);
    EXPECT_THROW(ctx->set_shape_cache_size(0), Error);
    BufferSet io(*engine, *ctx);
    io.bind(*ctx);
    ctx->set_shape_cache_size(2);
    ctx->reset_stats();
    std::mt19937 rng(9);
    const std::vector<Dims> three{Dims{1, 3, 8, kW}, Dims{2, 3, 9, kW}, Dims{3, 3, 10, kW}};
    for (int round = 0; round < 3; ++round) {
      for (const Dims& dims : three) {
        const HostTensor x = random_tensor(DataType::kFloat32, dims, rng);
        ctx->set_input_shape("x", dims);
        io.write("x", x);
        ctx->execute();
        Outputs got;
        for (const char* name : kOutputs) got[name] = io.read(*ctx, *engine, name);
        expect_identical(got, fresh_outputs(*engine, x), "round " + std::to_string(round) + " at " + dims.to_string());
      }
    }
    const ContextStats st = ctx->stats();
    EXPECT_EQ(st.shape_plans_built, 9u) << "three shapes through a cache of two: every call rebuilds";
    EXPECT_EQ(st.shape_plans_evicted, 7u) << "9 plans, 2 left (sizing the buffers built none)";
    // Two shapes fit: once both are built (the cache holds shapes 3 and 2, so shape 1 evicts
    // shape 2, which then evicts shape 3), no more builds.
    ctx->reset_stats();
    for (int round = 0; round < 3; ++round) {
      for (int i = 0; i < 2; ++i) {
        ctx->set_input_shape("x", three[static_cast<size_t>(i)]);
        ctx->execute();
      }
    }
    EXPECT_EQ(ctx->stats().shape_plans_built, 2u);
    EXPECT_EQ(ctx->stats().shape_plan_hits, 4u);
  }
}

TEST(ServingRuntime, ParallelContextsGiveTheSerialResultsBitForBit) {
  constexpr int kThreads = 4, kCalls = 12;
  for (DeviceType device : usable_devices()) {
    SCOPED_TRACE(to_string(device));
    auto engine = serving_engine(device);
    Backend& backend = get_backend(device);
    const auto shapes = schedule();
    // Inputs per thread and call, and the serial reference of each.
    std::vector<std::vector<HostTensor>> inputs(kThreads);
    std::vector<std::vector<Outputs>> want(kThreads);
    std::mt19937 rng(21);
    {
      auto ref = engine->create_execution_context();
      ref->set_num_threads(1);
      BufferSet io(*engine, *ref);
      io.bind(*ref);
      for (int t = 0; t < kThreads; ++t) {
        for (int i = 0; i < kCalls; ++i) {
          const Dims& dims = shapes[static_cast<size_t>((i + 3 * t) % static_cast<int>(shapes.size()))];
          inputs[static_cast<size_t>(t)].push_back(random_tensor(DataType::kFloat32, dims, rng, 1.5f));
          ref->set_input_shape("x", dims);
          io.write("x", inputs[static_cast<size_t>(t)].back());
          ref->execute();
          Outputs o;
          for (const char* name : kOutputs) o[name] = io.read(*ref, *engine, name);
          want[static_cast<size_t>(t)].push_back(std::move(o));
        }
      }
    }
    std::vector<std::vector<Outputs>> got(kThreads);
    std::vector<std::string> errors(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        try {
          auto ctx = engine->create_execution_context();
          ctx->set_num_threads(1);
          void* stream = device == DeviceType::kCUDA ? backend.create_stream() : nullptr;
          std::vector<std::unique_ptr<BufferSet>> sets;
          for (int k = 0; k < 2; ++k) sets.push_back(std::make_unique<BufferSet>(*engine, *ctx));
          for (int rep = 0; rep < 2; ++rep) {  // the second pass replays graphs on CUDA
            got[static_cast<size_t>(t)].clear();
            for (int i = 0; i < kCalls; ++i) {
              const HostTensor& x = inputs[static_cast<size_t>(t)][static_cast<size_t>(i)];
              BufferSet& io = *sets[static_cast<size_t>(i % 2)];
              ctx->set_input_shape("x", x.dims());
              io.bind(*ctx);
              io.write("x", x);
              ctx->enqueue(stream);
              backend.synchronize(stream);
              Outputs o;
              for (const char* name : kOutputs) o[name] = io.read(*ctx, *engine, name);
              got[static_cast<size_t>(t)].push_back(std::move(o));
            }
          }
          ctx->check_device_errors();
          if (ctx->stats().graph_capture_failures) errors[static_cast<size_t>(t)] = "a graph capture failed";
          sets.clear();
          if (stream) backend.destroy_stream(stream);
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(t)] = e.what();
        }
      });
    }
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) {
      ASSERT_EQ(errors[static_cast<size_t>(t)], "") << "thread " << t;
      for (int i = 0; i < kCalls; ++i) {
        expect_identical(got[static_cast<size_t>(t)][static_cast<size_t>(i)],
                         want[static_cast<size_t>(t)][static_cast<size_t>(i)],
                         "thread " + std::to_string(t) + " call " + std::to_string(i));
      }
    }
  }
}

TEST(ServingRuntime, UserManagedDeviceMemory) {
  for (DeviceType device : usable_devices()) {
    SCOPED_TRACE(to_string(device));
    auto engine = serving_engine(device);
    Backend& backend = get_backend(device);
    const uint64_t need = engine->device_memory_size(0);
    EXPECT_GE(need, engine->activation_peak_bytes(0) / 2);
    EXPECT_EQ(engine->device_memory_size(0), need) << "cached";
    EXPECT_THROW(engine->device_memory_size(1), Error);

    auto ctx = engine->create_execution_context(ContextMemory::kUserManaged);
    ctx->set_num_threads(1);
    BufferSet io(*engine, *ctx);
    io.bind(*ctx);
    std::mt19937 rng(4);
    const HostTensor x = random_tensor(DataType::kFloat32, Dims{8, 3, 16, kW}, rng);
    ctx->set_input_shape("x", x.dims());
    io.write("x", x);
    try {
      ctx->execute();
      ADD_FAILURE() << "ran without device memory";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("set_device_memory"), std::string::npos) << e.what();
    }
    void* memory = backend.allocate(need);
    try {
      ctx->set_device_memory(memory, need - 256);
      ADD_FAILURE() << "accepted too little memory";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(need)), std::string::npos) << e.what();
    }
    ctx->set_device_memory(memory, need);
    std::vector<HostTensor> xs;
    std::vector<Outputs> want;
    for (const Dims& dims : schedule()) {
      xs.push_back(random_tensor(DataType::kFloat32, dims, rng));
      want.push_back(fresh_outputs(*engine, xs.back()));
    }
    const uint64_t allocations = backend.allocation_count();
    std::vector<Outputs> got;
    for (const HostTensor& xi : xs) {
      ctx->set_input_shape("x", xi.dims());
      io.write("x", xi);
      ctx->execute();
      Outputs o;
      for (const char* name : kOutputs) o[name] = io.read(*ctx, *engine, name);
      got.push_back(std::move(o));
    }
    if (device == DeviceType::kCPU) {
      EXPECT_EQ(backend.allocation_count(), allocations) << "a user-managed CPU context allocated";
      EXPECT_EQ(ctx->stats().device_allocations, 0u);
    }
    for (size_t i = 0; i < xs.size(); ++i)
      expect_identical(got[i], want[i], "user memory at " + xs[i].dims().to_string());
    auto owns = engine->create_execution_context();
    EXPECT_THROW(owns->set_device_memory(memory, need), Error) << "a kStatic context owns its memory";
    ctx.reset();
    backend.release(memory);
  }
}

// Shape queries infer shapes and prepare no kernel (on a GPU preparing may compile kernels for
// seconds); the first inference at those dims builds the plan, and queries after it read it.
TEST(ServingRuntime, TensorShapesFollowEachInputShape) {
  auto engine = serving_engine(DeviceType::kCPU);
  auto ctx = engine->create_execution_context();
  for (const Dims& dims : schedule()) {
    ctx->set_input_shape("x", dims);
    EXPECT_EQ(ctx->tensor_shape("y"), (Dims{dims[0], 5}));
    EXPECT_EQ(ctx->tensor_shape("flat"), (Dims{dims[0], 8 * dims[2] * kW}));
    EXPECT_EQ(ctx->max_tensor_shape("flat"), (Dims{dims[0], 8 * dims[2] * kW}));
    EXPECT_EQ(ctx->tensor_shape("k"), (Dims{3}));
  }
  EXPECT_EQ(ctx->stats().shape_plans_built, 0u) << "a shape query prepared kernels";
  {
    auto run_ctx = engine->create_execution_context();
    const Dims dims = schedule().front();
    BufferSet io(*engine, *run_ctx);  // (sizes its buffers at the largest shape)
    EXPECT_EQ(run_ctx->stats().shape_plans_built, 0u);
    run_ctx->set_input_shape("x", dims);
    io.bind(*run_ctx);
    std::mt19937 rng(3);
    io.write("x", random_tensor(DataType::kFloat32, dims, rng, 2.0f));
    run_ctx->execute();
    EXPECT_EQ(run_ctx->stats().shape_plans_built, 1u);
    EXPECT_EQ(run_ctx->tensor_shape("flat"), (Dims{dims[0], 8 * dims[2] * kW}));
    EXPECT_EQ(run_ctx->stats().shape_plans_built, 1u) << "a query after the inference reads its plan";
  }
  try {
    ctx->set_input_shape("x", Dims{9, 3, 8, kW});
    ADD_FAILURE() << "accepted a batch outside the profile";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max 8x3x16x12"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ctx->tensor_address("x"), nullptr);
  EXPECT_THROW(ctx->tensor_address("nope"), Error);
}

TEST(ServingRuntime, AutomaticCpuThreadsShareTheCores) {
  auto engine = serving_engine(DeviceType::kCPU);
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  auto a = engine->create_execution_context();
  EXPECT_EQ(a->num_threads(), cores);
  {
    auto b = engine->create_execution_context();
    EXPECT_EQ(a->num_threads(), std::max(1, cores / 2));
    EXPECT_EQ(b->num_threads(), std::max(1, cores / 2));
    b->set_num_threads(3);
    EXPECT_EQ(b->num_threads(), 3);
  }
  EXPECT_EQ(a->num_threads(), cores) << "the cores go back when a context goes";
}

// What a server does (Triton's instances are initialized, and here warmed up, on a loading thread,
// one after the other, then each is executed from a thread of its own): contexts warmed up in one
// thread at every shape they will serve, with the buffers they will serve from, then run from
// other threads at once. Nothing is prepared or captured again and no capture fails. On CUDA
// this failed twice over: creating the second context changed the first one's (host) thread
// count, a key of its shape plans, so it prepared every shape again; and kernels took the
// calling thread's cuDNN handle (a new one in the serving thread, made or used for the first time
// inside a capture), so captures failed and those shapes ran without graphs from then on.
TEST(ServingRuntime, WarmedUpInOneThreadServedFromOthers) {
  constexpr int kContexts = 2;
  for (DeviceType device : usable_devices()) {
    SCOPED_TRACE(to_string(device));
    auto engine = serving_engine(device);
    Backend& backend = get_backend(device);
    const bool cuda = device == DeviceType::kCUDA;
    std::vector<Dims> shapes;  // each distinct shape of the schedule once
    for (const Dims& d : schedule()) {
      if (std::find(shapes.begin(), shapes.end(), d) == shapes.end()) shapes.push_back(d);
    }
    std::mt19937 rng(33);
    std::vector<HostTensor> xs;
    std::vector<Outputs> want;
    for (const Dims& dims : shapes) {
      xs.push_back(random_tensor(DataType::kFloat32, dims, rng));
      want.push_back(fresh_outputs(*engine, xs.back()));
    }
    std::vector<std::unique_ptr<ExecutionContext>> ctxs(kContexts);
    std::vector<std::unique_ptr<BufferSet>> io(kContexts);
    std::vector<void*> streams(kContexts, nullptr);
    std::vector<ContextStats> warm(kContexts);
    std::string load_error;
    std::thread loader([&] {
      try {
        for (int k = 0; k < kContexts; ++k) {  // one instance after the other, as Triton loads them
          ctxs[k] = engine->create_execution_context();
          // CUDA: the automatic thread setting, as a server leaves it; CPU contexts share the cores
          // among the live contexts unless told (a server gives each instance its share).
          if (!cuda) ctxs[k]->set_num_threads(1);
          io[k] = std::make_unique<BufferSet>(*engine, *ctxs[k]);
          if (cuda) streams[k] = backend.create_stream();
          for (size_t i = 0; i < shapes.size(); ++i) {
            ctxs[k]->set_input_shape("x", shapes[i]);
            io[k]->bind(*ctxs[k]);
            io[k]->write("x", xs[i]);
            for (int run = 0; run < 2; ++run) {  // CUDA: the plain first run, then the capture
              ctxs[k]->enqueue(streams[k]);
              backend.synchronize(streams[k]);
            }
          }
        }
      } catch (const std::exception& e) {
        load_error = e.what();
      }
    });
    loader.join();
    ASSERT_EQ(load_error, "");
    for (int k = 0; k < kContexts; ++k) warm[k] = ctxs[k]->stats();
    std::vector<std::string> errors(kContexts);
    std::vector<std::vector<Outputs>> got(kContexts);
    std::vector<std::thread> servers;
    std::atomic<int> ready{0};
    for (int k = 0; k < kContexts; ++k) {
      servers.emplace_back([&, k] {
        try {
          ++ready;
          while (ready.load() < kContexts) std::this_thread::yield();
          for (int pass = 0; pass < 3; ++pass) {
            for (size_t i = 0; i < shapes.size(); ++i) {
              const size_t s = (i + static_cast<size_t>(k + pass)) % shapes.size();  // not in warm-up order
              ctxs[k]->set_input_shape("x", shapes[s]);
              io[k]->bind(*ctxs[k]);
              io[k]->write("x", xs[s]);
              ctxs[k]->enqueue(streams[k]);
              backend.synchronize(streams[k]);
              Outputs o;
              for (const char* name : kOutputs) o[name] = io[k]->read(*ctxs[k], *engine, name);
              if (pass == 2) got[k].push_back(std::move(o));
            }
          }
        } catch (const std::exception& e) {
          errors[k] = e.what();
        }
      });
    }
    for (auto& th : servers) th.join();
    for (int k = 0; k < kContexts; ++k) {
      SCOPED_TRACE("context " + std::to_string(k));
      ASSERT_EQ(errors[k], "");
      for (size_t i = 0; i < shapes.size(); ++i) {
        const size_t s = (i + static_cast<size_t>(k + 2)) % shapes.size();
        expect_identical(got[k][i], want[s], "served at " + shapes[s].to_string());
      }
      const ContextStats st = ctxs[k]->stats();
      EXPECT_EQ(st.shape_plans_built, warm[k].shape_plans_built) << "a warmed-up shape was prepared again";
      EXPECT_EQ(st.graph_captures, warm[k].graph_captures) << "a warmed-up (shape, buffers) pair was captured again";
      EXPECT_EQ(st.graph_capture_failures, 0u) << "a capture failed (in the loading thread or a serving thread)";
      if (cuda) {
        EXPECT_EQ(warm[k].graph_captures, shapes.size()) << "the warm-up captured each shape once";
        EXPECT_EQ(st.graph_replays - warm[k].graph_replays, shapes.size() * 3) << "every served call replays";
      }
    }
    ctxs.clear();
    io.clear();
    for (void* s : streams) {
      if (s) backend.destroy_stream(s);
    }
  }
}

// A network whose later shapes depend on a size only known during the inference (NonZero),
// under a batch schedule: the plan of each batch is reused, the sizes read anew every call.
TEST(ServingRuntime, DataDependentSizesUnderAShapeSchedule) {
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{kDynamic, 6});
  Tensor* coords = net.add_layer(kLayerNonZero, {x}, 2, {}, "nz")->output(0);
  Tensor* positions = net.add_slice(coords, {1}, {2}, {0})->output(0);
  Tensor* flat = net.add_shuffle(positions, {}, {-1}, {})->output(0);
  Tensor* row = net.add_slice(x, {0}, {1}, {0})->output(0);
  Tensor* row_flat = net.add_shuffle(row, {}, {-1}, {})->output(0);
  Tensor* picked = net.add_gather(row_flat, flat, 0)->output(0);
  picked->set_name("picked");
  net.mark_output(picked);
  OptimizationProfile profile;
  profile.set_dimensions("x", Dims{1, 6}, Dims{2, 6}, Dims{4, 6});
  std::mt19937 rng(2);
  for (DeviceType device : usable_devices()) {
    SCOPED_TRACE(to_string(device));
    auto engine = test::build(net, device, &profile);
    auto ctx = engine->create_execution_context();
    for (int call = 0; call < 12; ++call) {
      const int64_t rows = 1 + (call * 3) % 4;
      HostTensor v(DataType::kFloat32, Dims{rows, 6});
      std::uniform_int_distribution<int> pick(0, 2);
      for (int64_t i = 0; i < v.count(); ++i) v.as<float>()[i] = pick(rng) == 0 ? 0.0f : static_cast<float>(i + 1);
      test::Io io(*engine, *ctx);
      io.input("x", v);
      io.output("picked");
      ctx->execute();
      const HostTensor out = io.read("picked");
      std::vector<float> want;
      for (int64_t i = 0; i < rows * 6; ++i) {
        if (v.as<float>()[i] != 0.0f) want.push_back(v.as<float>()[i % 6]);
      }
      ASSERT_EQ(out.count(), static_cast<int64_t>(want.size())) << "call " << call;
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_EQ(out.as<float>()[i], want[i]) << "call " << call << " element " << i;
    }
    EXPECT_EQ(ctx->stats().shape_plans_built, 4u) << "one plan per batch size, the sizes read every call";
  }
}

}  // namespace
}  // namespace kiln
