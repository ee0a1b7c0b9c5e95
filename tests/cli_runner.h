// Running the built `kiln` binary (KILN_CLI_PATH) from a test as a user would, through the
// shell: a fixture giving each test its own directory (kept when the test fails) and kiln(ARGS)
// with stdout and stderr captured separately. Shared by the CLI tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace kiln::testing_cli {

namespace fs = std::filesystem;

struct CommandResult {
  int code = -1;    // exit status; 128 + the signal when killed by one
  std::string out;  // stdout
  std::string err;  // stderr
};

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Single-quotes `s` for the shell.
inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

class KilnCliTest : public ::testing::Test {
 protected:
  explicit KilnCliTest(std::string dir_prefix) : prefix_(std::move(dir_prefix)) {}

  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / (prefix_ + std::to_string(::getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    if (!HasFailure()) fs::remove_all(dir_, ec);
  }

  // Runs `kiln ARGS` with stdout and stderr captured separately.
  CommandResult kiln(const std::string& args) { return run_kiln("", args); }
  // The same under `timeout`: a command still running after `seconds` is killed (exit code 124),
  // so that a hang fails the test instead of stalling the suite.
  CommandResult kiln_timed(int seconds, const std::string& args) {
    return run_kiln("timeout -k 5 " + std::to_string(seconds) + " ", args);
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;

 private:
  CommandResult run_kiln(const std::string& prefix, const std::string& args) {
    const fs::path out = dir_ / "stdout.txt", err = dir_ / "stderr.txt";
    const std::string cmd = prefix + shell_quote(KILN_CLI_PATH) + " " + args + " >" + shell_quote(out.string()) +
                            " 2>" + shell_quote(err.string()) + " </dev/null";
    const int status = std::system(cmd.c_str());
    CommandResult r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    r.out = read_text(out);
    r.err = read_text(err);
    return r;
  }

  std::string prefix_;
};

}  // namespace kiln::testing_cli
