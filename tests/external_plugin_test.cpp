// End-to-end test of an external plugin library, done the way a user does it: install this build
// of kiln to a temporary prefix (cmake --install), build examples/plugins against it with
// find_package(kiln), write the example ONNX model (examples/plugins/make_model.py, custom::
// ScaledTanh), then, each in a fresh `kiln` process:
//  * `kiln build --plugins lib.so` makes an engine, and `kiln run --plugins lib.so` on it matches
//    numpy's alpha * tanh(beta * x) (make_model.py writes the reference);
//  * `kiln run` WITHOUT --plugins fails, naming ScaledTanh, its version and namespace, the library
//    the engine was built with and the --plugins flag;
//  * `kiln plugin check` passes the library's plugin and `kiln plugin list` shows it.
// Skipped when cmake, a C++ compiler for it, or python3 with onnx and numpy is missing.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

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
  fs::path dir_;
};

TEST_F(ExternalPluginTest, BuildRunAndCheckAnInstalledPluginLibrary) {
  if (run("python3 -c 'import onnx, numpy'").code != 0) GTEST_SKIP() << "python3 with onnx and numpy is not available";
  if (run(quote(kCmake) + " --version").code != 0) GTEST_SKIP() << "cmake is not available";
  const std::string source = KILN_SOURCE_DIR;
  const fs::path prefix = dir_ / "prefix", build = dir_ / "plugin_build", model = dir_ / "model";

  // 1. Install kiln and build the example library against the installed package.
  Result r = run(quote(kCmake) + " --install " + quote(kBinaryDir) + " --prefix " + quote(prefix.string()));
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
  r = kiln("build --plugins " + quote(lib) + " --onnx " + quote(onnx) + " --save-engine " + quote(engine) +
           " --shapes x:2x3x8x8");
  ASSERT_EQ(r.code, 0) << r.output;
  r = kiln("run --plugins " + quote(lib) + " --engine " + quote(engine) + " --inputs-dir " + quote(data) +
           " --compare-dir " + quote(data));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;

  // The comparison can fail: a reference for other fields does not match.
  const fs::path other = dir_ / "other";
  ASSERT_EQ(run("python3 " + quote(source + "/examples/plugins/make_model.py") + " --out-dir " + quote(other.string()) +
                " --alpha 1.5 --beta 0.6 --batch 2")
                .code,
            0);
  r = kiln("run --plugins " + quote(lib) + " --engine " + quote(engine) + " --inputs-dir " + quote(data) +
           " --compare-dir " + quote((other / "test_data").string()));
  EXPECT_NE(r.code, 0) << r.output;

  // 4. Without --plugins: a clear error naming the plugin, its identity, library and the flag.
  r = kiln("run --engine " + quote(engine) + " --inputs-dir " + quote(data));
  EXPECT_NE(r.code, 0) << r.output;
  for (const std::string& must : {std::string("ScaledTanh"), std::string("version '1'"), std::string("namespace ''"), lib,
                                  std::string("--plugins")}) {
    EXPECT_NE(r.output.find(must), std::string::npos) << "missing '" << must << "' in:\n" << r.output;
  }

  // 5. The conformance suite passes the example plugin; `plugin list` shows where it came from.
  r = kiln("plugin check --plugins " + quote(lib) + " --name ScaledTanh --fields alpha=1.5,beta=0.5");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("PASSED"), std::string::npos) << r.output;
  r = kiln("plugin list --plugins " + quote(lib));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("ScaledTanh  version '1'  namespace ''  from " + lib), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("alpha: float32, default 1"), std::string::npos) << r.output;
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
  EXPECT_EQ(r.code, 1) << r.output;
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
