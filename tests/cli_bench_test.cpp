// Tests of `kiln bench` (tools/cmd_bench.cpp) on the CPU: the built binary (KILN_CLI_PATH) runs on
// small engines written here with the C++ API (a dynamic-batch MatMul+SoftMax and a network of
// Gathers fed by integer inputs) and on an ONNX model. They check the summary's numbers against
// what the run must have done: calls per stream add up, a shape schedule builds one shape plan per
// distinct step and hits the cache afterwards, every timed call is exported, the profile run
// covers every layer, random integer inputs stay within the axis they index (the CPU Gather throws
// on an index out of range), and the usage errors name the flag at fault.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/tensor_io.h"
#include "kiln/kiln.h"
#include "onnx/onnx_proto.h"
#include "tests/cli_runner.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using testing_cli::CommandResult;
using testing_cli::read_text;
using testing_cli::shell_quote;

void write_engine(const Network& network, const OptimizationProfile& profile, const std::string& file) {
  BuilderConfig config;
  config.num_threads = 1;
  config.profiles.push_back(profile);
  const std::vector<uint8_t> bytes = Builder().build_serialized(network, config);
  std::ofstream(file, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

class CliBenchTest : public testing_cli::KilnCliTest {
 protected:
  CliBenchTest() : KilnCliTest("kiln_bench_") {}

  // `kiln bench ARGS --json`, which must succeed; its summary.
  json bench_json(const std::string& args) {
    const CommandResult r = kiln("bench --json " + args);
    EXPECT_EQ(r.code, 0) << r.err;
    if (r.code != 0) return json::object();
    return json::parse(r.out);
  }
  // x float32 [N, 4] (N in 1..8, opt 2) -> FullyConnected(3) -> SoftMax -> y [N, 3].
  std::string dynamic_engine() {
    Network net;
    Tensor* x = net.add_input("x", DataType::kFloat32, {kDynamic, 4});
    std::vector<float> w(12), b(3);
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.1f * static_cast<float>(i) - 0.5f;
    Layer* fc = net.add_fully_connected(x, 3, HostTensor::from_vector(DataType::kFloat32, {3, 4}, w),
                                        HostTensor::from_vector(DataType::kFloat32, {3}, b));
    Layer* sm = net.add_softmax(fc->output(0), 1);
    sm->output(0)->set_name("y");
    net.mark_output(sm->output(0));
    OptimizationProfile p;
    p.set_dimensions("x", {1, 4}, {2, 4}, {8, 4});
    const std::string file = path("dyn.kiln");
    write_engine(net, p, file);
    return file;
  }
};

void expect_usage_error(const CommandResult& r, const std::string& must_mention, int code = 64) {
  EXPECT_EQ(r.code, code) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("kiln: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(must_mention), std::string::npos) << "expected '" << must_mention << "' in: " << r.err;
}

void expect_stats(const json& s, const std::vector<std::string>& extra = {}) {
  for (const char* key : {"min", "max", "mean", "median", "p50", "p90", "p95", "p99"})
    EXPECT_TRUE(s.contains(key)) << key << " missing in " << s.dump();
  for (const auto& key : extra) EXPECT_TRUE(s.contains(key)) << key << " missing in " << s.dump();
  if (s.contains("min") && s.contains("max")) {
    EXPECT_LE(s["min"].get<double>(), s["median"].get<double>());
    EXPECT_LE(s["median"].get<double>(), s["max"].get<double>());
    EXPECT_LE(s["p90"].get<double>(), s["p99"].get<double>());
  }
}

TEST_F(CliBenchTest, HelpListsTheFlagsWithExamples) {
  const CommandResult r = kiln("bench --help");
  EXPECT_EQ(r.code, 0);
  for (const char* flag :
       {"--duration", "--iterations", "--warmup", "--shape-schedule", "--streams", "--buffers", "--cuda-graph",
        "--no-data-transfers", "--shape-cache", "--graph-cache", "--percentile", "--export-times", "--export-profile",
        "--json", "--seed", "Examples:", "kiln bench --engine"})
    EXPECT_NE(r.out.find(flag), std::string::npos) << flag;
  EXPECT_NE(kiln("--help").out.find("bench"), std::string::npos);
}

TEST_F(CliBenchTest, RandomInputsTextSummary) {
  const std::string engine = dynamic_engine();
  const CommandResult r =
      kiln("bench --engine " + engine + " --duration 0.2 --iterations 5 --percentile 99.9 --warmup 3");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* text : {"=== Performance summary ===", "Throughput: ", " qps, ", "Latency: min = ",
                           "percentile(99%)", "percentile(99.9%)", "Compute Time (CPU engine: host time of enqueue): ",
                           "Enqueue Time: ", "Total Host Walltime: ", "Total Compute Time: ", "shape plans built 1",
                           "x: float32 2x4  <- random in [-1, 1] (seed 1)"})
    EXPECT_NE(r.out.find(text), std::string::npos) << text << " in:\n" << r.out;
  // CPU engines copy nothing: no H2D/D2H lines.
  EXPECT_EQ(r.out.find("H2D Latency"), std::string::npos);
}

TEST_F(CliBenchTest, JsonSummaryKeysAndCounts) {
  const std::string engine = dynamic_engine();
  const json j = bench_json("--engine " + engine + " --duration 0.3 --iterations 4 --percentile 99.9 --percentile 10");
  ASSERT_FALSE(j.empty());
  EXPECT_EQ(j["engine"], engine);
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["streams"], 1);
  EXPECT_EQ(j["buffers"], 1);
  EXPECT_EQ(j["cuda_graph"], "off");
  EXPECT_EQ(j["data_transfers"], false);
  const int64_t n = j["iterations"];
  EXPECT_GE(n, 4);
  // At least --duration seconds; throughput is calls over the wall time.
  EXPECT_GE(j["walltime_s"].get<double>(), 0.3);
  EXPECT_NEAR(j["throughput_qps"].get<double>(), static_cast<double>(n) / j["walltime_s"].get<double>(),
              1e-6 * j["throughput_qps"].get<double>());
  // items = dim 0 of the first input (the profile's opt, 2) per call.
  EXPECT_NEAR(j["throughput_items_per_s"].get<double>(), 2.0 * j["throughput_qps"].get<double>(),
              1e-6 * j["throughput_items_per_s"].get<double>());
  for (const char* key : {"latency_ms", "enqueue_ms", "gpu_compute_ms", "h2d_ms", "d2h_ms"})
    expect_stats(j[key], {"p99.9", "p10"});
  EXPECT_EQ(j["h2d_ms"]["max"], 0.0);
  EXPECT_LE(j["enqueue_ms"]["min"].get<double>(), j["latency_ms"]["max"].get<double>());
  ASSERT_EQ(j["per_shape"].size(), 1u);
  EXPECT_EQ(j["per_shape"][0]["shapes"], "x:2x4");
  EXPECT_EQ(j["per_shape"][0]["count"], n);
  ASSERT_EQ(j["per_stream"].size(), 1u);
  EXPECT_EQ(j["per_stream"][0]["iterations"], n);
  const json& c = j["context_stats"];
  for (const char* key : {"inferences", "shape_plans_built", "shape_plan_hits", "shape_plans_evicted", "graph_captures",
                          "graph_instantiations", "graph_updates", "graph_replays", "graph_capture_failures",
                          "plain_inferences", "device_allocations", "thread_reductions", "thread_restorations",
                          "shape_plan_ms", "capture_ms", "instantiate_ms", "update_ms"})
    EXPECT_TRUE(c.contains(key)) << key;
  EXPECT_EQ(c["inferences"].get<int64_t>(), n + j["warmup_iterations"].get<int64_t>());
  EXPECT_EQ(c["shape_plans_built"], 1);
  EXPECT_EQ(c["graph_replays"], 0);
}

TEST_F(CliBenchTest, ShapeScheduleBuildsOnePlanPerDistinctStep) {
  const std::string engine = dynamic_engine();
  // 4 steps, 3 distinct; a count warm-up of 1 still covers the schedule once (4 calls).
  const json j = bench_json("--engine " + engine + " --shape-schedule x:1x4,x:2x4 --shape-schedule x:8x4,x:2x4 " +
                            "--duration 0 --iterations 8 --warmup 1");
  ASSERT_FALSE(j.empty());
  EXPECT_EQ(j["warmup_iterations"], 4);
  EXPECT_EQ(j["iterations"], 8);
  ASSERT_EQ(j["per_shape"].size(), 3u);
  EXPECT_EQ(j["per_shape"][0]["shapes"], "x:1x4");
  EXPECT_EQ(j["per_shape"][0]["count"], 2);
  EXPECT_EQ(j["per_shape"][1]["shapes"], "x:2x4");
  EXPECT_EQ(j["per_shape"][1]["count"], 4);
  EXPECT_EQ(j["per_shape"][2]["shapes"], "x:8x4");
  EXPECT_EQ(j["per_shape"][2]["count"], 2);
  for (const auto& row : j["per_shape"]) {
    expect_stats(row["latency_ms"]);
    expect_stats(row["gpu_compute_ms"]);
  }
  const json& c = j["context_stats"];
  EXPECT_EQ(c["inferences"], 12);
  EXPECT_EQ(c["shape_plans_built"], 3);
  EXPECT_EQ(c["shape_plan_hits"], 9);
  EXPECT_EQ(c["shape_plans_evicted"], 0);
  // items: 2 x (1 + 2 + 8 + 2) over the 8 timed calls.
  EXPECT_EQ(j["items"], 26);

  // The same schedule from a file, one step per line, and the text table.
  std::ofstream(path("steps.txt")) << "# batch sizes\nx:1x4\nx:2x4\n\nx:8x4\nx:2x4\n";
  const CommandResult r =
      kiln("bench --engine " + engine + " --shape-schedule @" + path("steps.txt") + " --duration 0 --iterations 8");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("shape schedule: 4 step(s), 3 distinct"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Per shape (ms):"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("x:8x4"), std::string::npos) << r.out;

  // A shape cache of 1 plan evicts: 2 shapes alternating through it rebuild on every call.
  const json small = bench_json("--engine " + engine + " --shape-schedule x:1x4,x:8x4 --shape-cache 1 " +
                                "--duration 0 --iterations 4 --warmup 0");
  ASSERT_FALSE(small.empty());
  EXPECT_EQ(small["warmup_iterations"], 0);
  EXPECT_EQ(small["context_stats"]["shape_plans_built"], 4);
  EXPECT_EQ(small["context_stats"]["shape_plans_evicted"], 3);
}

TEST_F(CliBenchTest, StreamsAndBuffersAddUpAndTimesAreExported) {
  const std::string engine = dynamic_engine();
  const json j = bench_json("--engine " + engine + " --streams 2 --buffers 2 --duration 0.2 --iterations 5 " +
                            "--shape-schedule x:1x4,x:4x4,x:3x4 --export-times " + path("times.json"));
  ASSERT_FALSE(j.empty());
  EXPECT_EQ(j["streams"], 2);
  EXPECT_EQ(j["buffers"], 2);
  ASSERT_EQ(j["per_stream"].size(), 2u);
  int64_t sum = 0;
  for (const auto& s : j["per_stream"]) {
    EXPECT_GE(s["iterations"].get<int64_t>(), 5);
    EXPECT_GE(s["walltime_s"].get<double>(), 0.2);
    EXPECT_GT(s["throughput_qps"].get<double>(), 0.0);
    sum += s["iterations"].get<int64_t>();
  }
  EXPECT_EQ(j["iterations"].get<int64_t>(), sum);
  int64_t per_shape = 0;
  for (const auto& row : j["per_shape"]) per_shape += row["count"].get<int64_t>();
  EXPECT_EQ(per_shape, sum);
  // Each context warmed up over all 6 (step, buffer set) pairs at least.
  EXPECT_GE(j["warmup_iterations"].get<int64_t>(), 12);
  EXPECT_EQ(j["context_stats"]["inferences"].get<int64_t>(), sum + j["warmup_iterations"].get<int64_t>());
  EXPECT_EQ(j["context_stats"]["shape_plans_built"], 6);  // 3 shapes in each of 2 contexts

  const json times = json::parse(read_text(path("times.json")));
  ASSERT_TRUE(times.is_array());
  ASSERT_EQ(static_cast<int64_t>(times.size()), sum);
  std::vector<std::set<int64_t>> iterations(2);
  double previous = -1;
  for (const auto& t : times) {
    for (const char* key :
         {"stream", "iteration", "shapes", "start_ms", "latency_ms", "enqueue_ms", "gpu_ms", "h2d_ms", "d2h_ms"})
      ASSERT_TRUE(t.contains(key)) << key << " in " << t.dump();
    const int s = t["stream"];
    ASSERT_TRUE(s == 0 || s == 1);
    const int64_t i = t["iteration"];
    iterations[static_cast<size_t>(s)].insert(i);
    const char* expected[] = {"x:1x4", "x:4x4", "x:3x4"};
    EXPECT_EQ(t["shapes"], expected[i % 3]);
    EXPECT_GE(t["start_ms"].get<double>(), previous);  // in start order
    previous = t["start_ms"];
    EXPECT_GE(t["latency_ms"].get<double>(), t["enqueue_ms"].get<double>());
    EXPECT_EQ(t["h2d_ms"], 0.0);
    EXPECT_EQ(t["d2h_ms"], 0.0);
  }
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(static_cast<int64_t>(iterations[s].size()), j["per_stream"][s]["iterations"].get<int64_t>());
    EXPECT_EQ(*iterations[s].begin(), 0);
    EXPECT_EQ(*iterations[s].rbegin(), static_cast<int64_t>(iterations[s].size()) - 1);
  }
}

TEST_F(CliBenchTest, ExportProfileWritesPerLayerRows) {
  const std::string engine = dynamic_engine();
  const json j = bench_json("--engine " + engine + " --duration 0 --iterations 3 --shape-schedule x:1x4,x:8x4,x:2x4 " +
                            "--export-profile " + path("profile.json"));
  ASSERT_FALSE(j.empty());
  const json rows = json::parse(read_text(path("profile.json")));
  ASSERT_TRUE(rows.is_array());
  ASSERT_GE(rows.size(), 1u);
  double share = 0;
  std::set<std::string> types;
  for (const auto& row : rows) {
    for (const char* key : {"name", "type", "kernel", "runs", "elided_runs", "total_ms", "mean_ms", "share"})
      ASSERT_TRUE(row.contains(key)) << key << " in " << row.dump();
    EXPECT_FALSE(row["name"].get<std::string>().empty());
    // The schedule (3 steps) cycled to 12 runs (at least 10, a multiple of 3).
    EXPECT_EQ(row["runs"], 12);
    EXPECT_NEAR(row["mean_ms"].get<double>() * 12, row["total_ms"].get<double>(), 1e-9);
    share += row["share"].get<double>();
    types.insert(row["type"]);
  }
  EXPECT_NEAR(share, 1.0, 1e-9);
  EXPECT_TRUE(types.count("SoftMax")) << rows.dump();
  // The profiling context is not among the measured ones.
  EXPECT_EQ(j["context_stats"]["inferences"].get<int64_t>(),
            j["iterations"].get<int64_t>() + j["warmup_iterations"].get<int64_t>());
}

// ids int64 [N,5] -> Cast int32 -> Reshape [N*5] -> Gather(table1 [1, 2]); pos int32 [N,5] ->
// Gather(table2 [7, 3]); flag int64 [N,5] -> Cast float32 (indexes nothing).
TEST_F(CliBenchTest, IntegerInputsStayWithinTheAxisTheyIndex) {
  Network net;
  Tensor* ids = net.add_input("ids", DataType::kInt64, {kDynamic, 5});
  Tensor* pos = net.add_input("pos", DataType::kInt32, {kDynamic, 5});
  Tensor* flag = net.add_input("flag", DataType::kInt64, {kDynamic, 5});
  Tensor* table1 =
      net.add_constant(HostTensor::from_vector(DataType::kFloat32, {1, 2}, std::vector<float>{1, 2}))->output(0);
  std::vector<float> t2(21);
  for (size_t i = 0; i < t2.size(); ++i) t2[i] = static_cast<float>(i);
  Tensor* table2 = net.add_constant(HostTensor::from_vector(DataType::kFloat32, {7, 3}, t2))->output(0);
  Tensor* ids32 = net.add_cast(ids, DataType::kInt32)->output(0);
  Tensor* flat = net.add_shuffle(ids32, {}, {-1}, {})->output(0);
  Layer* g1 = net.add_gather(table1, flat, 0);
  Layer* g2 = net.add_gather(table2, pos, 0);
  Layer* c = net.add_cast(flag, DataType::kFloat32);
  g1->output(0)->set_name("e1");
  g2->output(0)->set_name("e2");
  c->output(0)->set_name("f");
  for (Layer* l : {g1, g2, c}) net.mark_output(l->output(0));
  OptimizationProfile p;
  for (const char* name : {"ids", "pos", "flag"}) p.set_dimensions(name, {1, 5}, {2, 5}, {4, 5});
  write_engine(net, p, path("gather.kiln"));

  const json j = bench_json("--engine " + path("gather.kiln") + " --duration 0 --iterations 20 --shapes ids:4x5 " +
                            "--shape-schedule pos:4x5+flag:4x5,pos:1x5 --seed 3");
  ASSERT_FALSE(j.empty());  // an out-of-range index would have failed the run
  ASSERT_EQ(j["inputs"].size(), 3u);
  EXPECT_EQ(j["inputs"][0]["name"], "ids");
  EXPECT_EQ(j["inputs"][0]["range"], json::array({0, 1}));
  EXPECT_EQ(j["inputs"][1]["range"], json::array({0, 7}));
  EXPECT_EQ(j["inputs"][2]["range"], json::array({0, 2}));
  EXPECT_EQ(j["inputs"][0]["source"], "random");
  EXPECT_EQ(j["per_shape"][0]["shapes"], "ids:4x5,pos:4x5,flag:4x5");
  EXPECT_EQ(j["per_shape"][1]["shapes"], "ids:4x5,pos:1x5,flag:2x5");
  const CommandResult text = kiln("bench --engine " + path("gather.kiln") + " --duration 0 --iterations 2");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("ids: int64 2x5  <- random in [0, 1) (indexes axis 0 (extent 1) of Gather"),
            std::string::npos)
      << text.out;
}

TEST_F(CliBenchTest, InputFilesAndOnnxModels) {
  const std::string engine = dynamic_engine();
  HostTensor x(DataType::kFloat32, {3, 4});
  save_npy(path("x.npy"), x);
  const json j = bench_json("--engine " + engine + " --input x=" + path("x.npy") + " --duration 0 --iterations 2");
  ASSERT_FALSE(j.empty());
  EXPECT_EQ(j["inputs"][0]["source"], path("x.npy"));
  EXPECT_EQ(j["per_shape"][0]["shapes"], "x:3x4");
  expect_usage_error(kiln("bench --engine " + engine + " --input x=" + path("x.npy") + " --shapes x:2x4"),
                     "its file '" + path("x.npy") + "' holds 3x4");

  // --onnx: the profile spans the schedule (min 1x4, max 6x4) when no shape flag names the input.
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  auto* g = model.mutable_graph();
  g->set_name("relu");
  for (auto* v : {g->add_input(), g->add_output()}) {
    v->set_name(v == &g->input(0) ? "x" : "y");
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_param("N");
    t->mutable_shape()->add_dim()->set_dim_value(4);
  }
  auto* node = g->add_node();
  node->set_op_type("Relu");
  node->add_input("x");
  node->add_output("y");
  {
    std::ofstream f(path("relu.onnx"), std::ios::binary);
    ASSERT_TRUE(model.SerializeToOstream(&f));
  }
  const json o =
      bench_json("--onnx " + path("relu.onnx") + " --shape-schedule x:1x4,x:6x4 --duration 0 --iterations 4");
  ASSERT_FALSE(o.empty());
  EXPECT_EQ(o["engine"], path("relu.onnx"));
  ASSERT_EQ(o["per_shape"].size(), 2u);
  EXPECT_EQ(o["per_shape"][1]["shapes"], "x:6x4");
  EXPECT_EQ(o["items"], 14);
}

TEST_F(CliBenchTest, ErrorsNameTheFlag) {
  const std::string engine = dynamic_engine();
  const std::string base = "bench --engine " + engine + " --duration 0 --iterations 1 ";
  expect_usage_error(kiln(base + "--shapes nope:1x4"), "--shapes names 'nope', which is not an input of the engine");
  expect_usage_error(kiln(base + "--shape-schedule x:2x4+y:1x4"), "names 'y', which is not an input");
  expect_usage_error(kiln(base + "--shape-schedule x:2x4,x:9x4"),
                     "--shape-schedule step 2 ('x:9x4') gives input 'x' the shape 9x4, outside the engine's profile "
                     "(min 1x4, max 8x4)");
  expect_usage_error(kiln(base + "--shape-schedule x:2x4x1"), "rank 3");
  expect_usage_error(kiln(base + "--shape-schedule x:2xA"), "'A' is not a whole number");
  expect_usage_error(kiln(base + "--streams 0"), "--streams 0: need at least 1");
  expect_usage_error(kiln(base + "--buffers 0"), "--buffers 0: need at least 1");
  expect_usage_error(kiln(base + "--cuda-graph"), "--cuda-graph needs a CUDA engine");
  expect_usage_error(kiln(base + "--no-data-transfers"), "--no-data-transfers applies to device engines");
  expect_usage_error(kiln(base + "--warmup 2h"), "--warmup '2h'");
  expect_usage_error(kiln(base + "--warmup fast"), "write a time like 200ms or 2s");
  expect_usage_error(kiln(base + "--percentile 101"), "--percentile 101 is outside 0..100");
  expect_usage_error(kiln(base + "--shape-cache 0"), "--shape-cache 0");
  expect_usage_error(kiln(base + "--min-shapes x:1x4"), "use them with --onnx");
  expect_usage_error(kiln(base + "--fp16"), "use them with --onnx");
  expect_usage_error(kiln("bench --duration 0"), "--engine FILE or the model with --onnx FILE");
  expect_usage_error(kiln("bench --engine " + path("missing.kiln")), "cannot open engine file", 1);
  expect_usage_error(kiln(base + "--shape-schedule @" + path("missing.txt")), "cannot open --shape-schedule file", 1);
  expect_usage_error(kiln(base + "--export-times " + path("no/such/dir/t.json")), "folder", 1);
}

}  // namespace
}  // namespace kiln
