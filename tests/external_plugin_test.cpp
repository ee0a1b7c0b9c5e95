// End-to-end tests of kiln as installed, done the way a user does it: install this build of kiln
// to a temporary prefix (cmake --install), then
//  * the installed `kiln` runs with an empty environment (no LD_LIBRARY_PATH: its RPATH finds
//    the installed libraries, also after the prefix is moved);
//  * examples/plugins builds against the installed package (find_package(kiln) and
//    kiln_add_plugin), and with the installed `kiln`, each in a fresh process, on the example
//    ONNX model (examples/plugins/make_model.py, custom::ScaledTanh): `kiln build --plugins
//    lib.so` makes an engine and `kiln run --plugins lib.so` on it matches numpy's
//    alpha * tanh(beta * x); `kiln run` WITHOUT --plugins fails, naming ScaledTanh, its version
//    and namespace, the library and the --plugins flag; `kiln plugin check` passes both plugins of
//    the library and `kiln plugin list` shows them;
//  * the library's two-input plugin SigmoidGate, loaded into this process with
//    kiln::load_plugin_library, builds and runs through the C++ API at two batch sizes of one
//    engine, in both of its modes, against values computed here.
// The plugin tests are skipped when cmake, a C++ compiler for it, or python3 with onnx and numpy is
// missing.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

#ifdef KILN_BINARY_DIR
const std::string kBinaryDir = KILN_BINARY_DIR;
#else
// The kiln command is built at the top of the build tree.
const std::string kBinaryDir = fs::path(KILN_CLI_PATH).parent_path().string();
#endif
#ifdef KILN_CMAKE_COMMAND
const std::string kCmake = KILN_CMAKE_COMMAND;
#else
const std::string kCmake = "cmake";
#endif

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct Result {
  int code = -1;
  std::string output;  // stdout and stderr together
};

Result shell(const std::string& command, const fs::path& log) {
  const std::string full = command + " >" + quote(log.string()) + " 2>&1 </dev/null";
  const int status = std::system(full.c_str());
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  std::ifstream in(log, std::ios::binary);
  r.output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return r;
}

class ExternalPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("kiln_external_plugin_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    if (!HasFailure()) fs::remove_all(dir_, ec);
  }
  Result run(const std::string& command) { return shell(command, dir_ / "log.txt"); }
  Result kiln(const std::string& args) { return run(quote(KILN_CLI_PATH) + " " + args); }
  // Installs this build tree into `prefix`, as a user does.
  Result install(const fs::path& prefix) {
    return run(quote(kCmake) + " --install " + quote(kBinaryDir) + " --prefix " + quote(prefix.string()));
  }
  fs::path dir_;
};

// The installed command starts without LD_LIBRARY_PATH (its RPATH is relative to itself), loads
// the installed libkiln rather than the build tree's, and still does after the prefix is moved.
TEST_F(ExternalPluginTest, InstalledKilnRunsWithoutLibraryPath) {
  const fs::path prefix = dir_ / "prefix", moved = dir_ / "moved";
  Result r = install(prefix);
  ASSERT_EQ(r.code, 0) << "cmake --install failed:\n" << r.output;
  ASSERT_TRUE(fs::exists(prefix / "bin" / "kiln")) << r.output;
  const Result expected = kiln("version");
  ASSERT_EQ(expected.code, 0) << expected.output;
  ASSERT_EQ(expected.output.rfind("kiln ", 0), 0u) << expected.output;

  r = run("env -i " + quote((prefix / "bin" / "kiln").string()) + " version");
  EXPECT_EQ(r.code, 0) << "the installed kiln does not start with an empty environment:\n" << r.output;
  EXPECT_EQ(r.output, expected.output);

  fs::rename(prefix, moved);
  const std::string moved_kiln = (moved / "bin" / "kiln").string();
  r = run("env -i " + quote(moved_kiln) + " version");
  EXPECT_EQ(r.code, 0) << "the installed kiln does not start once its prefix is moved:\n" << r.output;
  EXPECT_EQ(r.output, expected.output);
  // Which libkiln it loads: the one in the moved prefix, and every library is found.
  r = run("env -i ldd " + quote(moved_kiln));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("not found"), std::string::npos) << r.output;
  const size_t at = r.output.find("libkiln.so");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
  EXPECT_NE(line.find(moved.string()), std::string::npos)
      << "libkiln does not come from the installed prefix: " << line;
}

// y = alpha * a * sigmoid(b) + beta (mode 0) or a * sigmoid(b) (mode 1), computed in double here,
// independently of the plugin.
std::vector<float> sigmoid_gate_reference(const std::vector<float>& a, const std::vector<float>& b, double alpha,
                                          double beta, int mode) {
  std::vector<float> y(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double gate = a[i] / (1.0 + std::exp(-static_cast<double>(b[i])));
    y[i] = static_cast<float>(mode == 1 ? gate : alpha * gate + beta);
  }
  return y;
}

// The example's SigmoidGate through the C++ API, with the library loaded into this process: one
// engine with a dynamic batch (profile 1..8) runs batches 3 and 7 in the same context; mode 0
// and mode 1 each match the reference; a and b of different dims fail naming the layer, at run
// time (batches) and at build time (extents the network fixes).
void check_sigmoid_gate_through_the_api(const std::string& lib) {
  load_plugin_library(lib);
  auto& registry = PluginRegistry::instance();
  const PluginCreator* creator = registry.find("SigmoidGate", "1", "");
  ASSERT_NE(creator, nullptr) << "loading " << lib << " did not register SigmoidGate";
  const int64_t kWidth = 11;  // an odd extent, so a kernel that skips a remainder shows
  const float alpha = 1.5f, beta = -0.25f;
  for (const int mode : {0, 1}) {
    SCOPED_TRACE("mode " + std::to_string(mode));
    PluginFieldCollection given;
    given.add(PluginField::float32("alpha", {alpha}));
    given.add(PluginField::float32("beta", {beta}));
    given.add(PluginField::int64("mode", {mode}));
    auto plugin = creator->create("gate", registry.resolve_fields(*creator, given, "gate"));
    Network network;
    Tensor* a = network.add_input("a", DataType::kFloat32, Dims{-1, 2, kWidth});
    Tensor* b = network.add_input("b", DataType::kFloat32, Dims{-1, 2, kWidth});
    Layer* layer = add_plugin(network, {a, b}, *plugin, "gate");
    ASSERT_NE(layer, nullptr);
    layer->output(0)->set_name("y");
    network.mark_output(layer->output(0));
    BuilderConfig config;
    OptimizationProfile profile;
    profile.set_dimensions("a", {1, 2, kWidth}, {4, 2, kWidth}, {8, 2, kWidth});
    profile.set_dimensions("b", {1, 2, kWidth}, {4, 2, kWidth}, {8, 2, kWidth});
    config.profiles.push_back(profile);
    const std::vector<uint8_t> bytes = Builder().build_serialized(network, config);
    auto engine = Runtime().deserialize(bytes.data(), bytes.size());
    auto ctx = engine->create_execution_context();

    for (const int64_t batch : {3, 7}) {
      SCOPED_TRACE("batch " + std::to_string(batch));
      const size_t n = static_cast<size_t>(batch * 2 * kWidth);
      std::vector<float> av(n), bv(n), y(n, std::nanf(""));
      for (size_t i = 0; i < n; ++i) {  // a in [-2, 2], b in [-6, 6]: both tails of the sigmoid
        av[i] = -2.0f + 4.0f * static_cast<float>((i * 7) % n) / static_cast<float>(n);
        bv[i] = -6.0f + 12.0f * static_cast<float>((i * 13 + 5) % n) / static_cast<float>(n);
      }
      ctx->set_input_shape("a", {batch, 2, kWidth});
      ctx->set_input_shape("b", {batch, 2, kWidth});
      ctx->set_tensor_address("a", av.data());
      ctx->set_tensor_address("b", bv.data());
      ctx->set_tensor_address("y", y.data());
      ctx->execute();
      EXPECT_EQ(ctx->tensor_shape("y"), (Dims{batch, 2, kWidth}));
      const std::vector<float> want = sigmoid_gate_reference(av, bv, alpha, beta, mode);
      int wrong = 0;
      for (size_t i = 0; i < n; ++i) {
        if (!(std::fabs(y[i] - want[i]) <= 1e-5f * (1.0f + std::fabs(want[i]))) && wrong++ < 5) {
          ADD_FAILURE() << "y[" << i << "] = " << y[i] << ", expected " << want[i] << " (a " << av[i] << ", b " << bv[i]
                        << ")";
        }
      }
      EXPECT_EQ(wrong, 0) << "of " << n << " elements";
    }

    // a and b must have one shape (the plugin declares it with require_equal): batches 2 and 3
    // fail before anything runs, naming the layer.
    try {
      ctx->set_input_shape("a", {2, 2, kWidth});
      ctx->set_input_shape("b", {3, 2, kWidth});
      ctx->execute();
      ADD_FAILURE() << "a of batch 2 and b of batch 3 ran";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("gate"), std::string::npos) << e.what();
    }
  }

  // Extents the network fixes are checked when the engine is built: 2 against 3 fails there.
  auto plugin = creator->create("gate", registry.resolve_fields(*creator, {}, "gate"));
  try {
    Network network;
    Tensor* a = network.add_input("a", DataType::kFloat32, Dims{1, 2, kWidth});
    Tensor* b = network.add_input("b", DataType::kFloat32, Dims{1, 3, kWidth});
    network.mark_output(add_plugin(network, {a, b}, *plugin, "gate")->output(0));
    Builder().build_serialized(network, BuilderConfig());
    ADD_FAILURE() << "a of dims 1x2x11 and b of dims 1x3x11 built";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gate"), std::string::npos) << e.what();
  }
}

TEST_F(ExternalPluginTest, BuildRunAndCheckAnInstalledPluginLibrary) {
  if (run("python3 -c 'import onnx, numpy'").code != 0) GTEST_SKIP() << "python3 with onnx and numpy is not available";
  if (run(quote(kCmake) + " --version").code != 0) GTEST_SKIP() << "cmake is not available";
  const std::string source = KILN_SOURCE_DIR;
  const fs::path prefix = dir_ / "prefix", build = dir_ / "plugin_build", model = dir_ / "model";
  // The installed command, as a user runs it.
  const auto installed_kiln = [&](const std::string& args) {
    return run(quote((prefix / "bin" / "kiln").string()) + " " + args);
  };

  // 1. Install kiln and build the example library against the installed package.
  Result r = install(prefix);
  ASSERT_EQ(r.code, 0) << "cmake --install failed:\n" << r.output;
  ASSERT_TRUE(fs::exists(prefix / "include" / "kiln" / "plugin.h"));
  r = run(quote(kCmake) + " -S " + quote(source + "/examples/plugins") + " -B " + quote(build.string()) +
          " -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=" + quote(prefix.string()));
  ASSERT_EQ(r.code, 0) << "configuring examples/plugins with find_package(kiln) failed:\n" << r.output;
  r = run(quote(kCmake) + " --build " + quote(build.string()));
  ASSERT_EQ(r.code, 0) << "building examples/plugins failed:\n" << r.output;
  const std::string lib = fs::absolute(build / "libkiln_example_plugins.so").string();
  ASSERT_TRUE(fs::exists(lib)) << r.output;

  // 2. The model and numpy's reference.
  r = run("python3 " + quote(source + "/examples/plugins/make_model.py") + " --out-dir " + quote(model.string()) +
          " --alpha 1.5 --beta 0.5 --batch 2");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string onnx = (model / "model.onnx").string(), data = (model / "test_data").string();
  const std::string engine = (dir_ / "e.kiln").string();

  // 3. Build and run in separate processes; the output matches numpy.
  r = installed_kiln("build --plugins " + quote(lib) + " --onnx " + quote(onnx) + " --save-engine " + quote(engine) +
                     " --shapes x:2x3x8x8");
  ASSERT_EQ(r.code, 0) << r.output;
  r = installed_kiln("run --plugins " + quote(lib) + " --engine " + quote(engine) + " --inputs-dir " + quote(data) +
                     " --compare-dir " + quote(data));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;

  // The comparison can fail: a reference for other fields does not match.
  const fs::path other = dir_ / "other";
  ASSERT_EQ(run("python3 " + quote(source + "/examples/plugins/make_model.py") + " --out-dir " + quote(other.string()) +
                " --alpha 1.5 --beta 0.6 --batch 2")
                .code,
            0);
  r = installed_kiln("run --plugins " + quote(lib) + " --engine " + quote(engine) + " --inputs-dir " + quote(data) +
                     " --compare-dir " + quote((other / "test_data").string()));
  EXPECT_NE(r.code, 0) << r.output;

  // 4. Without --plugins: a clear error naming the plugin, its identity, library (by its file
  //    name at least) and the flag.
  r = installed_kiln("run --engine " + quote(engine) + " --inputs-dir " + quote(data));
  EXPECT_NE(r.code, 0) << r.output;
  for (const std::string& must : {std::string("ScaledTanh"), std::string("version '1'"), std::string("namespace ''"),
                                  fs::path(lib).filename().string(), std::string("--plugins")}) {
    EXPECT_NE(r.output.find(must), std::string::npos) << "missing '" << must << "' in:\n" << r.output;
  }

  // 5. The conformance suite passes the example plugin; `plugin list` shows where it came from.
  r = installed_kiln("plugin check --plugins " + quote(lib) + " --name ScaledTanh --fields alpha=1.5,beta=0.5");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("PASSED"), std::string::npos) << r.output;
  r = installed_kiln("plugin list --plugins " + quote(lib));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("ScaledTanh  version '1'  namespace ''  from " + lib), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("alpha: float32, default 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("SigmoidGate  version '1'  namespace ''  from " + lib), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("mode: int64, default 0"), std::string::npos) << r.output;
  for (const std::string mode : {"0", "1"}) {
    r = installed_kiln("plugin check --plugins " + quote(lib) +
                       " --name SigmoidGate --fields alpha=1.5,beta=-0.25,mode=" + mode);
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("2 input(s), 1 output(s)"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("PASSED"), std::string::npos) << r.output;
  }

  // 6. The two-input plugin through the C++ API, in this process.
  check_sigmoid_gate_through_the_api(lib);
}

// `kiln plugin check` on a built-in plugin, with fields from the command line, and its errors.
TEST_F(ExternalPluginTest, PluginCheckCommandOnBuiltinPlugin) {
  Result r = kiln("plugin check --name TemperatureSwish --fields temperature=2.5");
  if (r.output.find("is not registered") != std::string::npos) GTEST_SKIP() << "TemperatureSwish is not built in";
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("fields: temperature=2.5"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("types float32:linear -> float32:linear"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("PASSED"), std::string::npos) << r.output;

  r = kiln("plugin check --name TemperatureSwish --fields temp=2");
  EXPECT_EQ(r.code, 64) << r.output;  // a usage error (sysexits' EX_USAGE), like a malformed --fields
  EXPECT_NE(r.output.find("has no field 'temp' (its fields: temperature)"), std::string::npos) << r.output;
  r = kiln("plugin check --name NoSuchPlugin");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("--plugins"), std::string::npos) << r.output;
  r = kiln("plugin check --plugins " + quote((dir_ / "missing.so").string()) + " --name X");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kiln
