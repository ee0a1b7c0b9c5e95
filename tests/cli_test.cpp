// Tests of the `kiln` command (tools/): the built binary (KILN_CLI_PATH) is run as a user would,
// through the shell. They check every subcommand's --help, that bad flags, bad shape text and
// missing files give one "kiln: error:" line naming the problem and a non-zero exit code, that
// `kiln inspect --onnx` reports what a model (written here with the ONNX protobuf API) contains,
// and that build + run on a small Conv+Relu model reproduce a convolution computed here by
// plain loops, with --compare-dir passing on the right reference and failing on a wrong one.
// With the shared squeezenet1_1 model present (KILN_TEST_MODELS_DIR, else ../shared/models next to
// the repository) the whole pipeline is checked on it too.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/tensor_io.h"
#include "kiln/builder.h"
#include "kiln/types.h"
#include "onnx/onnx_proto.h"
#include "tests/cli_runner.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

using testing_cli::CommandResult;
using testing_cli::read_text;
using testing_cli::shell_quote;

class CliTest : public testing_cli::KilnCliTest {
 protected:
  CliTest() : KilnCliTest("kiln_cli_") {}
};

// A usage or file error: non-zero, nothing on stdout, exactly one "kiln: error:" line on stderr.
void expect_one_error_line(const CommandResult& r, const std::string& must_mention) {
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("kiln: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(must_mention), std::string::npos) << "expected '" << must_mention << "' in: " << r.err;
}

// ---- a small model written with the ONNX protobuf API ----------------------------------------

struct SmallModel {
  static constexpr int kC = 3, kM = 4, kH = 8, kW = 8;
  std::vector<float> weights = std::vector<float>(kM * kC * 9);
  std::vector<float> bias = std::vector<float>(kM);
};

// Deterministic values in [-1, 1).
float pseudo_random(uint32_t& state) {
  state = state * 1664525u + 1013904223u;
  return static_cast<float>(state >> 8) / static_cast<float>(1u << 23) - 1.0f;
}

void add_dim(onnx::ValueInfoProto* v, const std::vector<std::string>& dims) {
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  auto* shape = t->mutable_shape();
  for (const auto& d : dims) {
    auto* dim = shape->add_dim();
    if (std::isdigit(static_cast<unsigned char>(d[0])))
      dim->set_dim_value(std::stoll(d));
    else
      dim->set_dim_param(d);
  }
}

// x [N,3,8,8] -> Conv(3x3, pads 1, 4 maps, bias) -> Relu -> y [N,4,8,8]; optionally followed by
// a node of an op no importer knows (domain com.example).
SmallModel write_small_model(const std::string& file, bool with_unknown_op) {
  SmallModel m;
  uint32_t state = 12345;
  for (auto& w : m.weights) w = 0.5f * pseudo_random(state);
  for (auto& b : m.bias) b = 0.1f * pseudo_random(state);

  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("kiln_cli_test");
  model.add_opset_import()->set_version(17);
  if (with_unknown_op) {
    auto* op = model.add_opset_import();
    op->set_domain("com.example");
    op->set_version(1);
  }
  auto* g = model.mutable_graph();
  g->set_name("small");
  auto* x = g->add_input();
  x->set_name("x");
  add_dim(x, {"N", "3", "8", "8"});
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : {SmallModel::kM, SmallModel::kC, 3, 3}) w->add_dims(d);
  for (float v : m.weights) w->add_float_data(v);
  auto* b = g->add_initializer();
  b->set_name("b");
  b->set_data_type(onnx::TensorProto::FLOAT);
  b->add_dims(SmallModel::kM);
  for (float v : m.bias) b->add_float_data(v);

  auto* conv = g->add_node();
  conv->set_op_type("Conv");
  conv->set_name("conv0");
  conv->add_input("x");
  conv->add_input("w");
  conv->add_input("b");
  conv->add_output("c");
  auto* pads = conv->add_attribute();
  pads->set_name("pads");
  pads->set_type(onnx::AttributeProto::INTS);
  for (int i = 0; i < 4; ++i) pads->add_ints(1);
  auto* relu = g->add_node();
  relu->set_op_type("Relu");
  relu->set_name("relu0");
  relu->add_input("c");
  relu->add_output(with_unknown_op ? "r" : "y");
  if (with_unknown_op) {
    auto* odd = g->add_node();
    odd->set_op_type("Frobnicate");
    odd->set_domain("com.example");
    odd->set_name("frob0");
    odd->add_input("r");
    odd->add_output("y");
  }
  add_dim(g->add_output(), {"N", "4", "8", "8"});
  g->mutable_output(0)->set_name("y");

  std::ofstream out(file, std::ios::binary);
  EXPECT_TRUE(model.SerializeToOstream(&out));
  return m;
}

// The model's output computed by plain loops (the independent reference).
HostTensor reference_output(const SmallModel& m, const HostTensor& x) {
  const int64_t n = x.dims()[0];
  HostTensor y(DataType::kFloat32, Dims{n, SmallModel::kM, SmallModel::kH, SmallModel::kW});
  const float* in = x.as<float>();
  float* out = y.as<float>();
  for (int64_t b = 0; b < n; ++b)
    for (int o = 0; o < SmallModel::kM; ++o)
      for (int i = 0; i < SmallModel::kH; ++i)
        for (int j = 0; j < SmallModel::kW; ++j) {
          double acc = m.bias[static_cast<size_t>(o)];
          for (int c = 0; c < SmallModel::kC; ++c)
            for (int ki = 0; ki < 3; ++ki)
              for (int kj = 0; kj < 3; ++kj) {
                const int ii = i + ki - 1, jj = j + kj - 1;
                if (ii < 0 || jj < 0 || ii >= SmallModel::kH || jj >= SmallModel::kW) continue;
                acc += static_cast<double>(in[((b * SmallModel::kC + c) * SmallModel::kH + ii) * SmallModel::kW + jj]) *
                       m.weights[static_cast<size_t>(((o * SmallModel::kC + c) * 3 + ki) * 3 + kj)];
              }
          out[((b * SmallModel::kM + o) * SmallModel::kH + i) * SmallModel::kW + j] =
              static_cast<float>(std::max(acc, 0.0));
        }
  return y;
}

HostTensor random_input(int64_t n, uint32_t seed) {
  HostTensor x(DataType::kFloat32, Dims{n, SmallModel::kC, SmallModel::kH, SmallModel::kW});
  for (int64_t i = 0; i < x.count(); ++i) x.as<float>()[i] = pseudo_random(seed);
  return x;
}

// ---- help and usage -------------------------------------------------------------------------

TEST_F(CliTest, GlobalHelpListsEveryCommand) {
  CommandResult r = kiln("--help");
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* word : {"build", "run", "inspect", "version", "Examples"})
    EXPECT_NE(r.out.find(word), std::string::npos) << word << " missing from:\n" << r.out;
}

TEST_F(CliTest, EverySubcommandHasHelpWithAnExample) {
  for (const std::string sub : {"build", "run", "inspect", "debug", "version"}) {
    CommandResult r = kiln(sub + " --help");
    EXPECT_EQ(r.code, 0) << sub << ": " << r.err;
    EXPECT_NE(r.out.find("Example"), std::string::npos) << sub << ":\n" << r.out;
    EXPECT_NE(r.out.find("kiln " + sub), std::string::npos) << sub << ":\n" << r.out;
  }
  // Flags documented where they belong.
  EXPECT_NE(kiln("build --help").out.find("--max-shapes"), std::string::npos);
  EXPECT_NE(kiln("run --help").out.find("--compare-dir"), std::string::npos);
}

TEST_F(CliTest, VersionPrintsTheLibraryVersion) {
  CommandResult r = kiln("--version");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find(std::string("kiln ") + kiln::version()), std::string::npos) << r.out;
  EXPECT_NE(kiln("version").out.find(kiln::version()), std::string::npos);
}

TEST_F(CliTest, BadFlagsGiveOneErrorLine) {
  expect_one_error_line(kiln("build --onnx m.onnx --save-engine e.kiln --bogus"), "--bogus");
  expect_one_error_line(kiln("frobnicate"), "frobnicate");
  expect_one_error_line(kiln(""), "");
  expect_one_error_line(kiln("build --save-engine e.kiln"), "--onnx");
  expect_one_error_line(kiln("build --onnx m.onnx --save-engine e.kiln --device tpu"), "tpu");
  expect_one_error_line(kiln("run --engine e.kiln --onnx m.onnx --inputs-dir d"), "--onnx");
  expect_one_error_line(kiln("run --engine e.kiln --iterations 0 --inputs-dir d"), "--iterations");
  expect_one_error_line(kiln("inspect"), "--engine");
}

TEST_F(CliTest, MissingFilesAreNamed) {
  const std::string missing = path("no_such_model.onnx");
  CommandResult r = kiln("build --onnx " + missing + " --save-engine " + path("e.kiln"));
  expect_one_error_line(r, missing);
  EXPECT_FALSE(fs::exists(path("e.kiln")));
  expect_one_error_line(kiln("inspect --onnx " + missing), missing);
  const std::string engine = path("no_such_engine.kiln");
  expect_one_error_line(kiln("run --engine " + engine + " --inputs-dir " + dir_.string()), engine);
  expect_one_error_line(kiln("inspect --engine " + engine), engine);

  write_small_model(path("small.onnx"), false);
  const std::string no_dir = path("no_inputs_here");
  expect_one_error_line(kiln("run --onnx " + path("small.onnx") + " --inputs-dir " + no_dir), no_dir);
  const std::string no_npy = path("absent.npy");
  expect_one_error_line(kiln("run --onnx " + path("small.onnx") + " --input x=" + no_npy), no_npy);
}

TEST_F(CliTest, BadShapeTextIsAUsageError) {
  write_small_model(path("small.onnx"), false);
  const std::string base = "build --onnx " + path("small.onnx") + " --save-engine " + path("e.kiln") + " ";
  struct Case {
    std::string flags, mention;
  };
  for (const Case& c : std::vector<Case>{{"--shapes x:1xAx8x8", "'A'"},
                                         {"--shapes x", "missing ':'"},
                                         {"--shapes x:", "empty"},
                                         {"--shapes :1x3x8x8", "name"},
                                         {"--shapes x:1x0x8x8", "at least 1"},
                                         {"--shapes x:1x3x8x8,x:2x3x8x8", "more than once"},
                                         {"--shapes x:-1x3x8x8", "-1"},
                                         {"--min-shapes x:1x3x8x8", "--max-shapes"},
                                         {"--memory-limit 12Q", "12Q"}}) {
    SCOPED_TRACE(c.flags);
    CommandResult r = kiln(base + c.flags);
    expect_one_error_line(r, c.mention);
    EXPECT_EQ(r.code, 64);
  }
  // Well-formed but wrong for this model: named input, rank and fixed dims are checked.
  for (const Case& c : std::vector<Case>{
           {"--shapes y:1x3x8x8", "'y'"},
           {"--shapes x:1x3x8", "rank"},
           {"--shapes x:1x5x8x8", "fixed to 3"},
           {"--min-shapes x:2x3x8x8 --opt-shapes x:1x3x8x8 --max-shapes x:4x3x8x8", "min <= opt <= max"}}) {
    SCOPED_TRACE(c.flags);
    CommandResult r = kiln(base + c.flags);
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find("kiln: error: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.mention), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(path("e.kiln")));
  }
}

// ---- builder optimization levels, workspace limit, pass names (issue 18) ---------------------

TEST_F(CliTest, BuildOptimizationLevelAndWorkspaceLimitFlags) {
  const std::string help = kiln("build --help").out;
  for (const char* flag : {"--builder-optimization-level", "--workspace-limit", "--no-timing", "--disable-pass"})
    EXPECT_NE(help.find(flag), std::string::npos) << flag << " missing from:\n" << help;
  write_small_model(path("small.onnx"), false);
  const std::string base = "build --onnx " + path("small.onnx") + " --save-engine " + path("e.kiln") + " ";
  for (const char* level : {"6", "-1", "three"}) {
    SCOPED_TRACE(level);
    CommandResult r = kiln(base + "--builder-optimization-level " + level);
    expect_one_error_line(r, "--builder-optimization-level");
    EXPECT_EQ(r.code, 64);
    if (std::string(level) != "three") {
      // CLI11's wording: "range 0 to 5" (Debian 12's 2.3), "range [0 - 5]" (Ubuntu 24.04's).
      EXPECT_TRUE(r.err.find("range 0 to 5") != std::string::npos || r.err.find("range [0 - 5]") != std::string::npos)
          << r.err;
    }
    EXPECT_FALSE(fs::exists(path("e.kiln")));
  }
  CommandResult bad_size = kiln(base + "--workspace-limit 12Q");
  expect_one_error_line(bad_size, "12Q");
  EXPECT_EQ(bad_size.code, 64);
  // An unknown pass name is a usage error listing the valid names.
  CommandResult bad_pass = kiln(base + "--disable-pass no_such_pass");
  expect_one_error_line(bad_pass, "no_such_pass");
  for (const std::string& name : builder_pass_names())
    EXPECT_NE(bad_pass.err.find(name), std::string::npos) << bad_pass.err;

  for (const char* level : {"0", "5"}) {
    SCOPED_TRACE(level);
    CommandResult r =
        kiln(base + "--shapes x:1x3x8x8 --builder-optimization-level " + level + " --workspace-limit 64M");
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find(std::string("optimization level: ") + level), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("workspace limit: 64.0 MiB"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("kernel workspace"), std::string::npos) << r.out;
    CommandResult info = kiln("inspect --engine " + path("e.kiln"));
    ASSERT_EQ(info.code, 0) << info.err;
    EXPECT_NE(info.out.find(std::string("optimization_level: ") + level), std::string::npos) << info.out;
    EXPECT_NE(info.out.find("workspace_bytes: "), std::string::npos) << info.out;
    EXPECT_NE(info.out.find("workspace_limit_bytes: 67108864"), std::string::npos) << info.out;
  }
  CommandResult untimed = kiln(base + "--shapes x:1x3x8x8 --no-timing");
  ASSERT_EQ(untimed.code, 0) << untimed.err;
  EXPECT_NE(untimed.out.find("with --no-timing"), std::string::npos) << untimed.out;
  EXPECT_NE(untimed.out.find("kernel timing: none"), std::string::npos) << untimed.out;
  EXPECT_NE(kiln("inspect --engine " + path("e.kiln")).out.find("optimization_level: 3 (timing off"),
            std::string::npos);
}

// ---- inspect --------------------------------------------------------------------------------

TEST_F(CliTest, InspectOnnxReportsIoAndOps) {
  write_small_model(path("small.onnx"), false);
  CommandResult text = kiln("inspect --onnx " + path("small.onnx"));
  EXPECT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("x: float [N, 3, 8, 8]"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("y: float [N, 4, 8, 8]"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("Conv 1"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("Relu 1"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("unsupported nodes: none"), std::string::npos) << text.out;

  CommandResult r = kiln("inspect --json --onnx " + path("small.onnx"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["inputs"].size(), 1u);  // the initializers are not inputs
  EXPECT_EQ(j["inputs"][0]["name"], "x");
  EXPECT_EQ(j["inputs"][0]["dims"], nlohmann::json::parse(R"(["N", 3, 8, 8])"));
  EXPECT_EQ(j["outputs"][0]["name"], "y");
  EXPECT_EQ(j["op_types"], nlohmann::json::parse(R"({"Conv": 1, "Relu": 1})"));
  EXPECT_EQ(j["nodes"], 2);
  EXPECT_EQ(j["weights_bytes"], 4 * (SmallModel::kM * SmallModel::kC * 9 + SmallModel::kM));
  EXPECT_EQ(j["opsets"]["ai.onnx"], 17);
  EXPECT_TRUE(j["supported"].get<bool>());
}

TEST_F(CliTest, InspectOnnxListsUnsupportedNodesAndExitsTwo) {
  write_small_model(path("odd.onnx"), true);
  CommandResult r = kiln("inspect --onnx " + path("odd.onnx"));
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.out.find("Frobnicate"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("com.example"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("frob0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("com.example::Frobnicate 1"), std::string::npos) << r.out;

  CommandResult js = kiln("inspect --json --onnx " + path("odd.onnx"));
  EXPECT_EQ(js.code, 2);
  const auto j = nlohmann::json::parse(js.out);
  ASSERT_EQ(j["unsupported"].size(), 1u) << js.out;  // Conv and Relu are supported
  EXPECT_EQ(j["unsupported"][0]["op_type"], "Frobnicate");
  EXPECT_EQ(j["unsupported"][0]["domain"], "com.example");
  EXPECT_EQ(j["unsupported"][0]["node"], "frob0");
  EXPECT_FALSE(j["unsupported"][0]["reason"].get<std::string>().empty());
}

// ---- build + run ----------------------------------------------------------------------------

TEST_F(CliTest, BuildRunAndCompareOnASmallModel) {
  const SmallModel m = write_small_model(path("small.onnx"), false);
  const HostTensor x = random_input(2, 777);
  const HostTensor expected = reference_output(m, x);
  save_npy(path("x.npy"), x);
  fs::create_directories(path("good"));
  save_tensor_pb(path("good/output_0.pb"), expected, "y");
  HostTensor wrong = expected.clone();
  for (int64_t i = 0; i < wrong.count(); ++i) wrong.as<float>()[i] = wrong.as<float>()[i] * 1.01f + 0.01f;
  fs::create_directories(path("bad"));
  save_npy(path("bad/y.npy"), wrong);

  CommandResult build = kiln("build --onnx " + path("small.onnx") + " --save-engine " + path("small.kiln") +
                             " --shapes x:2x3x8x8 --threads 1");
  ASSERT_EQ(build.code, 0) << build.out << build.err;
  EXPECT_TRUE(fs::file_size(path("small.kiln")) > 0);
  EXPECT_NE(build.out.find("saved engine"), std::string::npos) << build.out;
  EXPECT_NE(build.out.find("layers"), std::string::npos) << build.out;

  CommandResult run = kiln("run --engine " + path("small.kiln") + " --input x=" + path("x.npy") + " --output-dir " +
                           path("out") + " --compare-dir " + path("good") + " --iterations 3 --warmup 1 --threads 1");
  ASSERT_EQ(run.code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("PASS"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("median"), std::string::npos) << run.out;
  const HostTensor got = load_npy(path("out/y.npy"));
  ASSERT_EQ(got.dims(), expected.dims());
  for (int64_t i = 0; i < got.count(); ++i)
    ASSERT_NEAR(got.as<float>()[i], expected.as<float>()[i], 1e-4) << "element " << i;

  CommandResult bad =
      kiln("run --engine " + path("small.kiln") + " --input x=" + path("x.npy") + " --compare-dir " + path("bad"));
  EXPECT_EQ(bad.code, 3) << bad.out << bad.err;
  EXPECT_NE(bad.out.find("FAIL"), std::string::npos) << bad.out;

  CommandResult js = kiln("run --json --engine " + path("small.kiln") + " --input x=" + path("x.npy") +
                          " --iterations 4 --warmup 0 --compare-dir " + path("good"));
  ASSERT_EQ(js.code, 0) << js.err;
  const auto j = nlohmann::json::parse(js.out);
  EXPECT_EQ(j["latency_ms"]["iterations"], 4);
  EXPECT_EQ(j["batch"], 2);
  EXPECT_EQ(j["outputs"][0]["dims"], nlohmann::json::parse("[2, 4, 8, 8]"));
  EXPECT_LE(j["latency_ms"]["min"].get<double>(), j["latency_ms"]["median"].get<double>());
  EXPECT_LE(j["latency_ms"]["median"].get<double>(), j["latency_ms"]["max"].get<double>());
  EXPECT_TRUE(j["pass"].get<bool>());

  // A shape outside the engine's profile is refused with the input's name.
  save_npy(path("x3.npy"), random_input(3, 5));
  CommandResult out_of_range = kiln("run --engine " + path("small.kiln") + " --input x=" + path("x3.npy"));
  EXPECT_NE(out_of_range.code, 0);
  EXPECT_NE(out_of_range.err.find("'x'"), std::string::npos) << out_of_range.err;

  CommandResult inspect = kiln("inspect --engine " + path("small.kiln"));
  EXPECT_EQ(inspect.code, 0) << inspect.err;
  EXPECT_FALSE(inspect.out.empty());
  CommandResult inspect_json = kiln("inspect --json --engine " + path("small.kiln"));
  ASSERT_EQ(inspect_json.code, 0) << inspect_json.err;
  const auto ij = nlohmann::json::parse(inspect_json.out);
  EXPECT_EQ(ij["device"], "cpu");
  EXPECT_EQ(ij["profiles"][0]["x"]["max"], nlohmann::json::parse("[2, 3, 8, 8]"));
}

TEST_F(CliTest, RunOnnxDirectlyAndDefaultDynamicDims) {
  const SmallModel m = write_small_model(path("small.onnx"), false);
  fs::create_directories(path("data"));
  const HostTensor x = random_input(3, 99);
  save_tensor_pb(path("data/input_0.pb"), x, "x");
  save_tensor_pb(path("data/output_0.pb"), reference_output(m, x), "y");
  CommandResult run =
      kiln("run --onnx " + path("small.onnx") + " --inputs-dir " + path("data") + " --compare-dir " + path("data"));
  EXPECT_EQ(run.code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("PASS"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("batch 3"), std::string::npos) << run.out;

  // No --shapes: the dynamic N becomes 1, and the user is told how to choose.
  CommandResult build = kiln("build --onnx " + path("small.onnx") + " --save-engine " + path("n1.kiln"));
  ASSERT_EQ(build.code, 0) << build.err;
  EXPECT_NE(build.out.find("input 'x' has dynamic dims ?x3x8x8; using 1x3x8x8"), std::string::npos) << build.out;
  EXPECT_NE(build.out.find("--shapes x:Nx3x8x8"), std::string::npos) << build.out;
}

TEST_F(CliTest, SqueezenetBuildRunCompare) {
  const char* env = std::getenv("KILN_TEST_MODELS_DIR");
  const fs::path model_dir =
      fs::path(env && *env ? env : std::string(KILN_SOURCE_DIR) + "/../shared/models") / "squeezenet1_1";
  if (!fs::exists(model_dir / "model.onnx")) GTEST_SKIP() << model_dir << " is not present";
  CommandResult build = kiln("build --onnx " + (model_dir / "model.onnx").string() + " --save-engine " +
                             path("squeezenet.kiln") + " --shapes input:1x3x224x224");
  ASSERT_EQ(build.code, 0) << build.out << build.err;
  const std::string data = (model_dir / "test_data_set_0").string();
  CommandResult run =
      kiln("run --engine " + path("squeezenet.kiln") + " --inputs-dir " + data + " --compare-dir " + data);
  EXPECT_EQ(run.code, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("PASS"), std::string::npos) << run.out;
}

// ---- kiln debug and --layer-precisions -----------------------------------------------------------

// x [1,32] -> MatMul "mm0" (w [32,32]) -> Add "add0" (bias [32]) -> y: a model whose layers have
// float16 CPU kernels, so an --fp16 engine differs from float32 by float16's rounding.
void write_matmul_model(const std::string& file) {
  uint32_t state = 99;
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  auto* g = model.mutable_graph();
  g->set_name("mm");
  auto* x = g->add_input();
  x->set_name("x");
  add_dim(x, {"1", "32"});
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(32);
  w->add_dims(32);
  for (int i = 0; i < 32 * 32; ++i) w->add_float_data(pseudo_random(state));
  auto* b = g->add_initializer();
  b->set_name("b");
  b->set_data_type(onnx::TensorProto::FLOAT);
  b->add_dims(32);
  for (int i = 0; i < 32; ++i) b->add_float_data(pseudo_random(state));
  auto* mm = g->add_node();
  mm->set_op_type("MatMul");
  mm->set_name("mm0");
  mm->add_input("x");
  mm->add_input("w");
  mm->add_output("h");
  auto* add = g->add_node();
  add->set_op_type("Add");
  add->set_name("add0");
  add->add_input("h");
  add->add_input("b");
  add->add_output("y");
  add_dim(g->add_output(), {"1", "32"});
  g->mutable_output(0)->set_name("y");
  std::ofstream out(file, std::ios::binary);
  EXPECT_TRUE(model.SerializeToOstream(&out));
}

TEST_F(CliTest, DebugLayersNamesTheFirstLayerOutOfTolerance) {
  write_matmul_model(path("mm.onnx"));
  uint32_t state = 7;
  HostTensor x(DataType::kFloat32, Dims{1, 32});
  for (int64_t i = 0; i < x.count(); ++i) x.as<float>()[i] = pseudo_random(state);
  save_npy(path("x.npy"), x);

  // float32 against the float32 reference: every layer within tolerance.
  CommandResult same = kiln("debug layers --onnx " + path("mm.onnx") + " --input x=" + path("x.npy"));
  ASSERT_EQ(same.code, 0) << same.out << same.err;
  EXPECT_NE(same.out.find("mm0 (MatrixMultiply) -> h"), std::string::npos) << same.out;
  EXPECT_NE(same.out.find("add0 (ElementWise) -> y"), std::string::npos) << same.out;
  EXPECT_NE(same.out.find("every compared layer output is within tolerance (2 tensors)"), std::string::npos)
      << same.out;

  // float16 with a tolerance float16 cannot meet: the MatMul is the first culprit.
  CommandResult fp16 =
      kiln("debug layers --fp16 --rtol 1e-6 --atol 0 --onnx " + path("mm.onnx") + " --input x=" + path("x.npy"));
  EXPECT_EQ(fp16.code, 3) << fp16.out << fp16.err;
  EXPECT_NE(fp16.out.find("first layer out of tolerance whose inputs are within it: mm0 (MatrixMultiply)"),
            std::string::npos)
      << fp16.out;

  // --layer-precisions keeps mm0 in float32: the culprit moves on to add0.
  CommandResult pinned = kiln("debug layers --fp16 --rtol 1e-6 --atol 0 --layer-precisions mm*:fp32 --onnx " +
                              path("mm.onnx") + " --input x=" + path("x.npy"));
  EXPECT_EQ(pinned.code, 3) << pinned.out << pinned.err;
  EXPECT_NE(pinned.out.find("1 layer(s) set by --layer-precisions"), std::string::npos) << pinned.out;
  EXPECT_NE(pinned.out.find("inputs are within it: add0 (ElementWise)"), std::string::npos) << pinned.out;
}

TEST_F(CliTest, DebugPrecisionFindsLayersToKeepInFp32) {
  write_matmul_model(path("mm.onnx"));
  uint32_t state = 8;
  HostTensor x(DataType::kFloat32, Dims{1, 32});
  for (int64_t i = 0; i < x.count(); ++i) x.as<float>()[i] = pseudo_random(state);
  save_npy(path("x.npy"), x);
  // The float32 engine's output is the reference.
  CommandResult ref =
      kiln("run --onnx " + path("mm.onnx") + " --input x=" + path("x.npy") + " --output-dir " + path("ref"));
  ASSERT_EQ(ref.code, 0) << ref.err;

  CommandResult plain = kiln("run --fp16 --rtol 1e-6 --atol 0 --onnx " + path("mm.onnx") +
                             " --input x=" + path("x.npy") + " --compare-dir " + path("ref"));
  EXPECT_EQ(plain.code, 3) << plain.out << plain.err;

  CommandResult found =
      kiln("debug precision --rtol 1e-6 --atol 0 --onnx " + path("mm.onnx") + " --input x=" + path("x.npy") +
           " --compare-dir " + path("ref") + " --save " + path("fp32.txt"));
  ASSERT_EQ(found.code, 0) << found.out << found.err;
  // Both layers round to float16 (the MatMul's result and the Add's), but a CPU build fuses the
  // Add of the constant bias into the MatMul (activation_fusion): with mm0 in float32 the bias is
  // added there, in float32, and add0 has no layer of its own.
  EXPECT_NE(found.out.find("1 of 2 layer(s) in fp32 make the fp16 engine pass"), std::string::npos) << found.out;
  EXPECT_EQ(read_text(path("fp32.txt")), "mm0:fp32");

  CommandResult fixed =
      kiln("run --fp16 --rtol 1e-6 --atol 0 --onnx " + path("mm.onnx") + " --input x=" + path("x.npy") +
           " --compare-dir " + path("ref") + " --layer-precisions @" + path("fp32.txt"));
  EXPECT_EQ(fixed.code, 0) << fixed.out << fixed.err;

  // --refine tries the MatMul back in float16: at this tolerance it must stay float32.
  CommandResult refined =
      kiln("debug precision --refine --rtol 1e-6 --atol 0 --onnx " + path("mm.onnx") + " --input x=" + path("x.npy") +
           " --compare-dir " + path("ref") + " --save " + path("fp32_refined.txt"));
  ASSERT_EQ(refined.code, 0) << refined.out << refined.err;
  EXPECT_NE(refined.out.find("refining: 1 matrix product / convolution layer(s)"), std::string::npos) << refined.out;
  EXPECT_NE(refined.out.find("'mm0' in fp16: max rel err"), std::string::npos) << refined.out;
  EXPECT_EQ(read_text(path("fp32_refined.txt")), "mm0:fp32");

  // With a tolerance float16 meets, nothing needs float32.
  CommandResult loose = kiln("debug precision --rtol 2e-2 --onnx " + path("mm.onnx") + " --input x=" + path("x.npy"));
  ASSERT_EQ(loose.code, 0) << loose.out << loose.err;
  EXPECT_NE(loose.out.find("the fp16 engine passes as it is"), std::string::npos) << loose.out;
}

TEST_F(CliTest, LayerPrecisionsErrorsNameTheEntry) {
  write_matmul_model(path("mm.onnx"));
  expect_one_error_line(
      kiln("build --onnx " + path("mm.onnx") + " --save-engine " + path("e.kiln") + " --layer-precisions nosuch:fp32"),
      "no layer is named 'nosuch'");
  expect_one_error_line(
      kiln("build --onnx " + path("mm.onnx") + " --save-engine " + path("e.kiln") + " --layer-precisions mm0:int8"),
      "unknown precision 'int8'");
  expect_one_error_line(
      kiln("build --onnx " + path("mm.onnx") + " --save-engine " + path("e.kiln") + " --layer-precisions mm0"),
      "is not NAME:PRECISION");
  expect_one_error_line(kiln("run --engine " + path("e.kiln") + " --input x=x.npy --layer-precisions mm0:fp32"),
                        "--layer-precisions applies when building");
}

}  // namespace
}  // namespace kiln
