// Fault injection (the reliability issue): every allocation of a model's build, context creation
// and first inferences at two batch sizes fails in turn (inject_allocation_fault, the backends'
// allocators, host and device). Each failure is kiln's out-of-memory error, nothing leaks (the
// backend's bytes in use return to where they were), and what exists afterwards (the engine, a
// context) still works and gives the reference result. Saving an engine to a full disk (a file
// size limit) or into a folder nothing can be created in fails with a clear message and leaves
// the old file as it was and no temporary file.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <new>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif

#include "backends/backend.h"
#include "kiln/kiln.h"
#include "onnx_model_builder.h"

// The replacement operator new/delete below pair malloc with free; GCC cannot see that.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace kiln {
namespace {

namespace fs = std::filesystem;

HostTensor random_tensor(const Dims& dims, uint32_t seed) {
  HostTensor t(DataType::kFloat32, dims);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  auto* p = static_cast<float*>(t.data());
  for (int64_t i = 0; i < dims.volume(); ++i) p[i] = u(rng);
  return t;
}

// conv 3x3 -> relu -> conv 1x1 -> add (residual) -> global average pool -> fully connected, with a
// dynamic batch (profile 1..4).
std::unique_ptr<Network> small_net() {
  auto net = std::make_unique<Network>();
  Tensor* x = net->add_input("x", DataType::kFloat32, Dims{kDynamic, 8, 12, 12});
  ConvolutionDesc c3;
  c3.num_output_maps = 8;
  c3.kernel = {3, 3};
  c3.pads_begin = {1, 1};
  c3.pads_end = {1, 1};
  Layer* a = net->add_convolution(x, c3, random_tensor(Dims{8, 8, 3, 3}, 1), random_tensor(Dims{8}, 2));
  Layer* r = net->add_activation(a->output(0), ActivationType::kRelu);
  ConvolutionDesc c1;
  c1.num_output_maps = 8;
  c1.kernel = {1, 1};
  Layer* b = net->add_convolution(r->output(0), c1, random_tensor(Dims{8, 8, 1, 1}, 3), random_tensor(Dims{8}, 4));
  Layer* sum = net->add_elementwise(b->output(0), x, ElementWiseOp::kSum);
  PoolingDesc gp;
  gp.type = PoolingType::kAverage;
  gp.kernel = {12, 12};
  Layer* pool = net->add_pooling(sum->output(0), gp);
  Layer* fc = net->add_fully_connected(pool->output(0), 5, random_tensor(Dims{5, 8}, 5), random_tensor(Dims{5}, 6));
  fc->output(0)->set_name("y");
  net->mark_output(fc->output(0));
  return net;
}

BuilderConfig config_for(DeviceType device) {
  BuilderConfig config;
  config.device = device;
  config.num_threads = 1;
  // No kernel timing: timed choices (and so the allocations made and the results' last bits)
  // can differ between builds on a GPU; this test needs the same allocations every run.
  config.optimization_level = 0;
  OptimizationProfile profile;
  profile.set_dimensions("x", Dims{1, 8, 12, 12}, Dims{2, 8, 12, 12}, Dims{4, 8, 12, 12});
  config.profiles.push_back(profile);
  return config;
}

// The input and output buffers of the inferences, allocated before any fault is armed (the
// faults are for kiln's own allocations).
struct Buffers {
  Buffers(DeviceType device) : backend(get_backend(device)) {
    for (int64_t batch : {2, 4}) {
      const HostTensor x = random_tensor(Dims{batch, 8, 12, 12}, 9);
      xs.emplace_back(backend, x.nbytes());
      ys.emplace_back(backend, static_cast<size_t>(batch * 5) * sizeof(float));
      backend.copy_host_to_device(xs.back().data(), x.data(), x.nbytes(), nullptr);
    }
  }
  Backend& backend;
  std::vector<DeviceBuffer> xs, ys;
  std::vector<std::vector<float>> host_ys{std::vector<float>(10), std::vector<float>(20)};
  const std::string source = "fault injection test";  // made before any fault is armed
};

// One inference at batch 2 (slot 0) or 4 (slot 1); the result stays in io.host_ys[slot].
const std::vector<float>& infer(ExecutionContext& ctx, Buffers& io, int slot) {
  const int64_t batch = slot == 0 ? 2 : 4;
  std::vector<float>& y = io.host_ys[static_cast<size_t>(slot)];
  ctx.set_input_shape("x", Dims{batch, 8, 12, 12});
  ctx.set_tensor_address("x", io.xs[static_cast<size_t>(slot)].data());
  ctx.set_tensor_address("y", io.ys[static_cast<size_t>(slot)].data());
  ctx.execute();
  io.backend.copy_device_to_host(y.data(), io.ys[static_cast<size_t>(slot)].data(), y.size() * sizeof(float), nullptr);
  return y;
}

struct Outcome {
  std::shared_ptr<Engine> engine;
  std::unique_ptr<ExecutionContext> context;
  std::vector<float> y2, y4;
  std::string error;        // "" when every step worked
  bool in_network = false;  // the error came from the test's own code (the Network, copies)
  const char* step = "";    // the step that failed (a literal: setting it allocates nothing)
};

// Build, deserialize, create a context, infer at batch 2 and 4; stops at the first error.
Outcome scenario(DeviceType device, Buffers& io) {
  Outcome o;
  std::unique_ptr<Network> net;
  try {
    net = small_net();
  } catch (const std::exception& e) {
    o.error = e.what();
    o.in_network = true;
    return o;
  }
  try {
    o.step = "config";
    const BuilderConfig config = config_for(device);
    o.step = "build";
    const auto bytes = Builder().build_serialized(*net, config);
    o.step = "deserialize";
    o.engine = Runtime().deserialize(bytes.data(), bytes.size(), io.source);
    o.step = "context";
    o.context = o.engine->create_execution_context();
    o.step = "inference at batch 2";
    infer(*o.context, io, 0);
    o.step = "copy";  // the test's own allocation
    o.y2 = io.host_ys[0];
    o.step = "inference at batch 4";
    infer(*o.context, io, 1);
    o.step = "copy";
    o.y4 = io.host_ys[1];
  } catch (const std::exception& e) {
    // The caller's own code (as building the Network): the test's, not kiln's.
    o.in_network = std::string(o.step) == "config" || std::string(o.step) == "copy";
    o.error = e.what();
  }
  return o;
}

class FaultInjection : public ::testing::TestWithParam<DeviceType> {
 protected:
  void SetUp() override {
    std::string why;
    try {
      if (!get_backend(GetParam()).available(&why)) GTEST_SKIP() << why;
    } catch (const Error& e) {
      GTEST_SKIP() << e.what();
    }
  }
  void TearDown() override { inject_allocation_fault(0); }
};

TEST_P(FaultInjection, EveryAllocationOfBuildLoadAndFirstInferencesFailsCleanly) {
  const DeviceType device = GetParam();
  Backend& backend = get_backend(device);
  Buffers io(device);
  const uint64_t in_use_before = backend.bytes_in_use();
  // A first run fills what the backend keeps for the process (library handles, scratch), so
  // the counted runs make the same allocations as the faulted ones that follow.
  ASSERT_EQ(scenario(device, io).error, "");
  inject_allocation_fault(0);
  Outcome reference = scenario(device, io);
  const uint64_t total = inject_allocation_fault(0);
  ASSERT_EQ(reference.error, "");
  {
    inject_allocation_fault(0);
    Outcome again = scenario(device, io);
    ASSERT_EQ(inject_allocation_fault(0), total) << "two fault-free runs should allocate alike";
    ASSERT_EQ(again.y4, reference.y4);
  }
  ASSERT_GE(total, 1u) << "the scenario should allocate (activations; constants with oneDNN)";
  reference.context.reset();
  reference.engine.reset();
  EXPECT_EQ(backend.bytes_in_use(), in_use_before);

  int failed = 0;
  for (uint64_t k = 1; k <= total; ++k) {
    SCOPED_TRACE("allocation " + std::to_string(k) + " of " + std::to_string(total));
    inject_allocation_fault(k);
    Outcome o = scenario(device, io);
    inject_allocation_fault(0);
    if (o.error.empty()) {
      // The k-th allocation of this run was not one of the scenario's (none left): it worked.
      EXPECT_EQ(o.y4, reference.y4);
      continue;
    }
    ++failed;
    EXPECT_NE(o.error.find("out of memory"), std::string::npos) << o.error;
    EXPECT_NE(o.error.find("allocation " + std::to_string(k)), std::string::npos) << o.error;
    // What exists still works: the same context, or a new one of the engine.
    if (o.engine) {
      if (!o.context) o.context = o.engine->create_execution_context();
      EXPECT_EQ(infer(*o.context, io, 0), reference.y2);
      EXPECT_EQ(infer(*o.context, io, 1), reference.y4);
      EXPECT_EQ(infer(*o.context, io, 0), reference.y2);
    }
    o.context.reset();
    o.engine.reset();
    EXPECT_EQ(backend.bytes_in_use(), in_use_before) << "memory leaked after: " << o.error;
  }
  EXPECT_GE(failed, static_cast<int>(total) - 1) << "nearly every allocation should have been hit";
  std::cout << "[ faults   ] " << failed << " of " << total << " allocations failed in turn, each cleanly\n";
}

// ---- every host allocation (operator new) ------------------------------------------------------

// The kernels and the builder allocate host memory with new (std::vector, std::string...), not
// through the backend. This binary replaces the global operator new: when armed, its k-th call
// throws std::bad_alloc.
std::atomic<uint64_t> g_new_fail_at{0};
std::atomic<uint64_t> g_new_seen{0};

}  // namespace
}  // namespace kiln

void* operator new(std::size_t n) {
  const uint64_t at = kiln::g_new_fail_at.load(std::memory_order_relaxed);
  if (at != 0 && kiln::g_new_seen.fetch_add(1, std::memory_order_relaxed) + 1 == at) throw std::bad_alloc();
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// The nothrow form too (std::stable_sort's temporary buffer uses it and frees with the plain
// delete): under AddressSanitizer, one of them replaced and the other not is a reported
// new/free mismatch.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return ::operator new(n);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace kiln {
namespace {

// Fails each of the CPU scenario's host allocations in turn, in a child process (a failure that
// ends in std::terminate must fail the test, not end the test program). Every failure must be an
// exception the caller can catch, and the engine and context that exist afterwards must work.
TEST(FaultInjectionHost, EveryHostAllocationOfBuildLoadAndFirstInferencesFailsCleanly) {
  Buffers io(DeviceType::kCPU);
  Outcome reference = scenario(DeviceType::kCPU, io);
  ASSERT_EQ(reference.error, "");
  g_new_seen = 0;
  g_new_fail_at = ~uint64_t{0};  // counting only
  (void)scenario(DeviceType::kCPU, io);
  g_new_fail_at = 0;
  const uint64_t total = g_new_seen.exchange(0);
  ASSERT_GT(total, 100u);
  const std::string report = ::testing::TempDir() + "/kiln_fault_host_" + std::to_string(::getpid()) + ".txt";
  std::vector<uint64_t> ks;
  for (uint64_t k = 1; k <= total; ++k) ks.push_back(k);
  std::fflush(stdout);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::FILE* out = std::fopen(report.c_str(), "w");
    int bad = 0, failed = 0, bare = 0;
    std::set<std::string> reported;
    for (uint64_t k : ks) {
      std::fprintf(out, "k %llu\n", static_cast<unsigned long long>(k));
      std::fflush(out);
      g_new_seen = 0;
      g_new_fail_at = k;
      Outcome o = scenario(DeviceType::kCPU, io);
      g_new_fail_at = 0;
      if (o.error.empty()) {
        if (o.y4 != reference.y4)
          std::fprintf(out, "BAD k %llu: wrong result\n", static_cast<unsigned long long>(k)), ++bad;
        continue;
      }
      ++failed;
      if (!o.in_network && o.error.find("out of host memory") == std::string::npos &&
          o.error.find("out of memory") == std::string::npos) {
        const std::string line = std::string("BAD: unclear message in ") + o.step + ": '" + o.error + "'";
        if (reported.insert(line).second)
          std::fprintf(out, "%s (first at k %llu)\n", line.c_str(), static_cast<unsigned long long>(k));
        ++bad;
      }
      if (o.in_network) ++bare;
      try {
        if (o.engine) {
          if (!o.context) o.context = o.engine->create_execution_context();
          if (infer(*o.context, io, 0) != reference.y2 || infer(*o.context, io, 1) != reference.y4) {
            std::fprintf(out, "BAD k %llu: wrong result after '%s'\n", static_cast<unsigned long long>(k),
                         o.error.c_str());
            ++bad;
          }
        }
      } catch (const std::exception& e) {
        std::fprintf(out, "BAD k %llu: unusable after '%s': %s\n", static_cast<unsigned long long>(k), o.error.c_str(),
                     e.what());
        ++bad;
      }
    }
#ifdef __SANITIZE_ADDRESS__
    // Under the asan preset: whatever the failed scenarios allocated and lost (their objects are
    // gone by now) is a leak.
    if (__lsan_do_recoverable_leak_check() != 0) {
      std::fprintf(out, "BAD: LeakSanitizer found leaks after the failed allocations (see its report)\n");
      ++bad;
    }
#endif
    std::fprintf(out, "done %d failed (%d in the test's own code) %d bad\n", failed, bare, bad);
    std::fclose(out);
    std::_Exit(bad == 0 ? 0 : 1);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  std::ifstream in(report);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove(report);
  std::string bad_lines, last_k, summary;
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (line.rfind("BAD", 0) == 0) bad_lines += line + "\n";
    if (line.rfind("k ", 0) == 0) last_k = line;
    if (line.rfind("done", 0) == 0) summary = line;
    at = end == std::string::npos ? text.size() : end + 1;
  }
  ASSERT_TRUE(WIFEXITED(status)) << "the child died (signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0)
                                 << ") with the host allocation fault at " << last_k;
  EXPECT_EQ(bad_lines, "");
  EXPECT_NE(summary, "") << text.substr(text.size() > 2000 ? text.size() - 2000 : 0);
  std::cout << "[ faults   ] host allocations: " << ks.size() << " of " << total << " failed in turn: " << summary
            << "\n";
}

INSTANTIATE_TEST_SUITE_P(Devices, FaultInjection, ::testing::Values(DeviceType::kCPU, DeviceType::kCUDA),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// ---- files ------------------------------------------------------------------------------------

std::string run_shell(const std::string& command, int* status) {
  const std::string out = ::testing::TempDir() + "/kiln_fault_" + std::to_string(::getpid()) + ".txt";
  const int rc = std::system((command + " > " + out + " 2>&1").c_str());
  *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
  std::ifstream in(out);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove(out);
  return text;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

class FaultInjectionFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("kiln_fault_files_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    // y = x * W with a 64x64 W: an engine of about 16 KiB.
    test::OnnxModelBuilder b;
    b.input("x", onnx::TensorProto::FLOAT, {1, 64}).output("y", onnx::TensorProto::FLOAT);
    std::vector<float> w(64 * 64);
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 7) * 0.25f;
    b.floats("W", {64, 64}, w);
    b.node("MatMul", {"x", "W"}, {"y"}, "matmul");
    b.save((dir_ / "model.onnx").string());
  }
  void TearDown() override { fs::remove_all(dir_); }
  int temporaries() const {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir_))
      n += e.path().filename().string().find(".tmp-") != std::string::npos;
    return n;
  }
  fs::path dir_;
};

TEST_F(FaultInjectionFiles, AFullDiskLeavesTheOldEngineAndNoTemporaryFile) {
  const fs::path target = dir_ / "saved.engine";
  std::ofstream(target) << "the old engine";
  // A file size limit of 8 blocks (4-8 KiB) makes the write of the ~16 KiB engine fail part way
  // (EFBIG, as ENOSPC on a full disk); SIGXFSZ is ignored, as a server would.
  int status = 0;
  const std::string out =
      run_shell("trap '' XFSZ; ulimit -f 8; exec '" + std::string(KILN_CLI_PATH) + "' build --onnx '" +
                    (dir_ / "model.onnx").string() + "' --save-engine '" + target.string() + "'",
                &status);
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(out.find("cannot write"), std::string::npos) << out;
  EXPECT_NE(out.find(target.string()), std::string::npos) << out;
  EXPECT_EQ(read_file(target), "the old engine");
  EXPECT_EQ(temporaries(), 0);
}

TEST_F(FaultInjectionFiles, AFolderNothingCanBeCreatedInGivesAClearError) {
  int status = 0;
  const std::string out = run_shell("'" + std::string(KILN_CLI_PATH) + "' build --onnx '" +
                                        (dir_ / "model.onnx").string() + "' --save-engine /proc/kiln_test.engine",
                                    &status);
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(out.find("cannot write engine file '/proc/kiln_test.engine'"), std::string::npos) << out;
  EXPECT_EQ(out.find("terminate"), std::string::npos) << out;
}

}  // namespace
}  // namespace kiln
