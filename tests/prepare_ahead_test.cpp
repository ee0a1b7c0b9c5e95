// The builder's helper thread that prepares candidate kernels ahead of their measurement
// (src/builder/tactic_selection.cpp, PrepareAhead: on CUDA, where it is on by default, plan
// building and runtime compilation overlap the device's measuring). On the CPU it runs with
// KILN_PREPARE_AHEAD=1, which this test sets (it works the same on either device): two test
// kernels join the CPU convolutions of
// layers named "ahead_probe*", one whose prepare() throws and one that records the thread that
// prepared it (the reference kernel, 20 ms late). With the helper, every candidate is prepared off
// the builder's thread, a failing prepare() is reported for its candidate and the others are
// still timed, and the engine computes what an engine built without the helper computes.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"
#include "cpu_engine_run.h"
#include "log_capture.h"
#include "op_harness.h"
#include "scoped_env.h"
#include "src/backends/kernel.h"

namespace kiln {
namespace {

bool is_probe(const Layer& layer) { return layer.name().rfind("ahead_probe", 0) == 0; }

bool linear_float(const Layer& layer, const std::vector<TensorDesc>& in) {
  if (!is_probe(layer) || in.empty() || in[0].type != DataType::kFloat32) return false;
  for (const TensorDesc& d : in) {
    if (d.present && d.format != TensorFormat::kLinear) return false;
  }
  return layer.output(0)->format() == TensorFormat::kLinear;
}

struct Record {
  std::mutex mutex;
  std::vector<std::thread::id> prepared_on;
};
Record& record() {
  static Record r;
  return r;
}

class ThrowingPrepare : public Kernel {
 public:
  void prepare(const Layer& layer, const std::vector<TensorDesc>&, const std::vector<TensorDesc>&, int) override {
    throw Error("test kernel: deliberately failing prepare() of '" + layer.name() + "'");
  }
  void execute(const KernelContext&) override { ADD_FAILURE() << "a kernel whose prepare() failed was run"; }
};

// Records the preparing thread and runs the reference kernel 20 ms late (so it is normally not
// chosen; under ThreadSanitizer or a loaded machine the real kernels can be slower, and then it
// still computes the right values).
class RecordingPrepare : public Kernel {
 public:
  explicit RecordingPrepare(const Layer& layer)
      : inner_(KernelRegistry::instance().find(DeviceType::kCPU, kLayerConvolution, "reference")->create(layer)) {}
  void prepare(const Layer& layer, const std::vector<TensorDesc>& in, const std::vector<TensorDesc>& out,
               int threads) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    inner_->prepare(layer, in, out, threads);
    std::lock_guard<std::mutex> lock(record().mutex);
    record().prepared_on.push_back(std::this_thread::get_id());
  }
  size_t workspace_size() const override { return inner_->workspace_size(); }
  void execute(const KernelContext& ctx) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    inner_->execute(ctx);
  }

 private:
  std::unique_ptr<Kernel> inner_;
};

const bool kRegistered = [] {
  KernelEntry throws;
  throws.device = DeviceType::kCPU;
  throws.layer_type = kLayerConvolution;
  throws.tactic = "test_ahead_throws";
  throws.priority = -1;  // after every real kernel: registry listings of the real ones keep their order
  throws.supports = linear_float;
  throws.create = [](const Layer&) { return std::make_unique<ThrowingPrepare>(); };
  KernelRegistry::instance().add(throws);
  KernelEntry records = throws;
  records.tactic = "test_ahead_records";
  records.priority = -2;
  records.create = [](const Layer& layer) { return std::make_unique<RecordingPrepare>(layer); };
  KernelRegistry::instance().add(records);
  return true;
}();

using test::ScopedEnv;

HostTensor random_f32(const Dims& dims, uint64_t seed, double scale) {
  return test::random_tensor(DataType::kFloat32, dims, seed, -scale, scale);
}

// Four convolutions of at least three configurations.
std::unique_ptr<Network> probe_net() {
  auto net = std::make_unique<Network>();
  Tensor* t = net->add_input("x", DataType::kFloat32, Dims{1, 8, 14, 14});
  const int64_t channels[] = {8, 16, 12, 12};
  const int64_t kernels[] = {3, 1, 3, 3};
  for (int i = 0; i < 4; ++i) {
    ConvolutionDesc d;
    d.num_output_maps = i == 3 ? 12 : channels[i + 1];
    d.kernel = {kernels[i], kernels[i]};
    d.pads_begin = d.pads_end = {kernels[i] / 2, kernels[i] / 2};
    const int64_t in = channels[i];
    Layer* l = net->add_convolution(t, d, random_f32(Dims{d.num_output_maps, in, kernels[i], kernels[i]}, 10 + i, 0.3f),
                                    random_f32(Dims{d.num_output_maps}, 20 + i, 0.1f));
    l->set_name("ahead_probe_" + std::to_string(i));
    t = l->output(0);
  }
  t->set_name("y");
  net->mark_output(t);
  return net;
}

struct Built {
  std::vector<uint8_t> bytes;
  BuildReport report;
  std::vector<std::string> log;
  std::vector<std::thread::id> prepared_on;
};

Built build(const char* ahead) {
  ScopedEnv env("KILN_PREPARE_AHEAD", ahead);
  {
    std::lock_guard<std::mutex> lock(record().mutex);
    record().prepared_on.clear();
  }
  test::LogCapture capture(Severity::kVerbose);
  BuilderConfig config;
  config.device = DeviceType::kCPU;
  config.num_threads = 1;
  config.verbose = true;
  config.disabled_passes = {"layout"};  // the test kernels take linear memory only
  Built b;
  auto net = probe_net();
  b.bytes = Builder().build_serialized(*net, config, &b.report);
  b.log = capture.take();
  std::lock_guard<std::mutex> lock(record().mutex);
  b.prepared_on = record().prepared_on;
  return b;
}

int count_lines(const std::vector<std::string>& log, const std::string& a, const std::string& b = {}) {
  int n = 0;
  for (const std::string& line : log) {
    if (line.find(a) != std::string::npos && line.find(b) != std::string::npos) ++n;
  }
  return n;
}

TEST(PrepareAhead, CandidatesArePreparedOnTheHelperAndFailuresStayPerCandidate) {
  ASSERT_TRUE(kRegistered);
  const Built with = build("1");
  const Built without = build("0");
  for (const Built* b : {&with, &without}) {
    const bool helper = b == &with;
    SCOPED_TRACE(helper ? "KILN_PREPARE_AHEAD=1" : "KILN_PREPARE_AHEAD=0");
    const int timed = b->report.layers_timed;
    EXPECT_GE(timed, 3) << "three configurations";
    EXPECT_EQ(timed + b->report.layers_reused, 4);
    // Each timed layer: the failing candidate reported as skipped, the recording one timed.
    EXPECT_EQ(count_lines(b->log, "test_ahead_throws skipped: ", "deliberately failing prepare()"), timed)
        << ::testing::PrintToString(b->log);
    EXPECT_EQ(count_lines(b->log, ": test_ahead_records "), timed) << ::testing::PrintToString(b->log);
    ASSERT_EQ(b->prepared_on.size(), static_cast<size_t>(timed));
    for (const std::thread::id id : b->prepared_on) {
      EXPECT_EQ(id != std::this_thread::get_id(), helper)
          << (helper ? "prepared on the builder's thread with the helper on" : "prepared off the builder's thread");
    }
    EXPECT_EQ(count_lines(b->log, "waited for the helper thread"), helper ? 1 : 0) << ::testing::PrintToString(b->log);
  }
  EXPECT_EQ(with.report.tactics_timed, without.report.tactics_timed);
  const HostTensor x = random_f32(Dims{1, 8, 14, 14}, 7, 2.0f);
  test::expect_close(test::run_x_to_y(with.bytes, x, "prepare ahead"),
                     test::run_x_to_y(without.bytes, x, "prepare ahead"));
}

}  // namespace
}  // namespace kiln
