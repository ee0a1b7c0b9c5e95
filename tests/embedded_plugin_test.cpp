// Self-contained deployment of an engine with an external plugin, done the way a user does it
// (like external_plugin_test.cpp, each step a fresh `kiln` process): the example library
// (examples/plugins/scaled_tanh.cpp) is compiled as a shared library, the example model built
// with `kiln build --plugins lib.so --embed-plugins`, and the library file then deleted, so only
// the engine's copy is left. `kiln run` without --plugins and without the opt-in fails, saying
// the library is embedded and how to opt in; with --allow-embedded-plugins it loads the copy and
// matches numpy's alpha * tanh(beta * x), leaving no temporary file behind. Engines record the
// library's file name, not the path typed at build time: an engine without the embedded copy
// loads its library from KILN_PLUGIN_PATH, and otherwise fails naming the copy next to the
// engine; loading one library by two paths is one load.
// Skipped when a C++ compiler or python3 with onnx and numpy is missing.
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

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct Result {
  int code = -1;
  std::string output;  // stdout and stderr together
};

class EmbeddedPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("kiln_embedded_plugin_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "tmp");
  }
  void TearDown() override {
    std::error_code ec;
    if (!HasFailure()) fs::remove_all(dir_, ec);
  }
  Result run(const std::string& command) {
    const fs::path log = dir_ / "log.txt";
    const std::string full = command + " >" + quote(log.string()) + " 2>&1 </dev/null";
    const int status = std::system(full.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    std::ifstream in(log, std::ios::binary);
    r.output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    return r;
  }
  // kiln with TMPDIR pointing into the test's folder, to see what it leaves there.
  Result kiln(const std::string& args, const std::string& env = "") {
    return run("TMPDIR=" + quote((dir_ / "tmp").string()) + " " + env + " " + quote(KILN_CLI_PATH) + " " + args);
  }
  fs::path dir_;
};

TEST_F(EmbeddedPluginTest, EngineCarriesItsPluginLibraryAndLoadsItOnlyWhenAllowed) {
  if (run("python3 -c 'import onnx, numpy'").code != 0) GTEST_SKIP() << "python3 with onnx and numpy is not available";
  const char* cxx_env = std::getenv("CXX");
  const std::string cxx = cxx_env && *cxx_env ? cxx_env : "c++";
  if (run(quote(cxx) + " --version").code != 0) GTEST_SKIP() << "no C++ compiler (" << cxx << ")";
  const std::string source = KILN_SOURCE_DIR;

  // 1. The example plugin library: kiln's symbols resolve against the kiln that loads it.
  const fs::path lib_dir = dir_ / "lib";
  fs::create_directories(lib_dir);
  const std::string lib = (lib_dir / "libkiln_example_plugins.so").string();
  Result r = run(quote(cxx) + " -std=c++20 -O1 -fPIC -shared -I" + quote(source + "/include") + " " +
                 quote(source + "/examples/plugins/scaled_tanh.cpp") + " -o " + quote(lib));
  ASSERT_EQ(r.code, 0) << "compiling the example plugin failed:\n" << r.output;

  // 2. The model and numpy's reference.
  const fs::path model = dir_ / "model";
  r = run("python3 " + quote(source + "/examples/plugins/make_model.py") + " --out-dir " + quote(model.string()) +
          " --alpha 1.5 --beta 0.5 --batch 2");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string onnx = (model / "model.onnx").string(), data = (model / "test_data").string();
  const std::string engine = (dir_ / "e.kiln").string();

  // 3. Build with the library embedded, then remove the library: only the engine has it now.
  r = kiln("build --plugins " + quote(lib) + " --embed-plugins --onnx " + quote(onnx) + " --save-engine " +
           quote(engine) + " --shapes x:2x3x8x8");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("embedded plugin library 'libkiln_example_plugins.so'"), std::string::npos) << r.output;
  fs::remove_all(lib_dir);

  // 4. Without the opt-in: a clear error, nothing run, nothing written.
  r = kiln("run --engine " + quote(engine) + " --inputs-dir " + quote(data));
  EXPECT_NE(r.code, 0) << r.output;
  for (const std::string& must :
       {std::string("ScaledTanh"), std::string("'libkiln_example_plugins.so'"), std::string("embeds their library"),
        std::string("--allow-embedded-plugins"), std::string("--plugins")}) {
    EXPECT_NE(r.output.find(must), std::string::npos) << "missing '" << must << "' in:\n" << r.output;
  }
  EXPECT_TRUE(fs::is_empty(dir_ / "tmp"));

  // 5. With it: the embedded copy runs and matches numpy; its temporary file is gone.
  r = kiln("run --allow-embedded-plugins --engine " + quote(engine) + " --inputs-dir " + quote(data) +
           " --compare-dir " + quote(data));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::is_empty(dir_ / "tmp")) << "kiln left its temporary copy of the library behind";

  // 6. An engine built without --embed-plugins still needs the library itself.
  fs::create_directories(lib_dir);
  ASSERT_EQ(run(quote(cxx) + " -std=c++20 -O1 -fPIC -shared -I" + quote(source + "/include") + " " +
                quote(source + "/examples/plugins/scaled_tanh.cpp") + " -o " + quote(lib))
                .code,
            0);
  const std::string plain = (dir_ / "plain.kiln").string();
  ASSERT_EQ(kiln("build --plugins " + quote(lib) + " --onnx " + quote(onnx) + " --save-engine " + quote(plain) +
                 " --shapes x:2x3x8x8")
                .code,
            0);
  r = kiln("run --allow-embedded-plugins --engine " + quote(plain) + " --inputs-dir " + quote(data));
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("load their libraries first"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("KILN_PLUGIN_PATH"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("found here"), std::string::npos)
      << "the library is neither next to the engine nor on the path";

  // 7. Its folder on KILN_PLUGIN_PATH: the engine finds the library by its file name and loads it.
  r = kiln("run --engine " + quote(plain) + " --inputs-dir " + quote(data) + " --compare-dir " + quote(data) + " -v",
           "KILN_PLUGIN_PATH=" + quote("/nonexistent:" + lib_dir.string()));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;

  // 8. The library next to the engine: not loaded from there (it would run code found beside a file),
  // but the error names it, ready to paste.
  fs::copy_file(lib, dir_ / "libkiln_example_plugins.so");
  r = kiln("run --engine " + quote(plain) + " --inputs-dir " + quote(data));
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("found here: --plugins " + (dir_ / "libkiln_example_plugins.so").string()), std::string::npos)
      << r.output;

  // 9. One library named by two paths (and twice by one) is one load, not an error.
  const std::string other_name = (lib_dir / ".." / "lib" / "libkiln_example_plugins.so").string();
  r = kiln("run --plugins " + quote(lib) + " --plugins " + quote(other_name) + " --plugins " + quote(lib) +
           " --engine " + quote(plain) + " --inputs-dir " + quote(data) + " --compare-dir " + quote(data));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kiln
