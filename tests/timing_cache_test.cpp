// The builder's timing cache file (src/builder/timing_cache.h): several builders saving one file at
// once keep every entry (a lock and a merge; without them the last writer drops the others'
// entries); the file on disk is always a complete cache; a damaged file or damaged lines are
// ignored with a warning and rewritten by the next save.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "builder/timing_cache.h"
#include "kiln/logger.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

class CaptureWarnings : public Logger {
 public:
  CaptureWarnings() { set_logger(this); }
  ~CaptureWarnings() override { set_logger(nullptr); }
  void log(Severity severity, const std::string& message) override {
    if (severity == Severity::kWarning) text += message + "\n";
  }
  std::string text;
};

class TimingCacheFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("kiln_timing_cache_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    path_ = (dir_ / "cache.txt").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  std::string path_;
};

TEST_F(TimingCacheFile, BuildersSavingOneFileAtOnceKeepEveryEntry) {
  constexpr int kBuilders = 4, kRounds = 25;
  std::vector<pid_t> children;
  for (int b = 0; b < kBuilders; ++b) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int status = 0;
      try {
        for (int r = 0; r < kRounds; ++r) {
          // A builder: reads the cache, times a layer, saves.
          TimingCache cache(path_);
          cache.put("builder" + std::to_string(b) + "/layer" + std::to_string(r), "tactic" + std::to_string(r));
          cache.save();
        }
      } catch (...) {
        status = 1;
      }
      std::_Exit(status);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  CaptureWarnings warnings;
  TimingCache cache(path_);
  EXPECT_EQ(warnings.text, "");
  EXPECT_EQ(cache.size(), static_cast<size_t>(kBuilders * kRounds));
  for (int b = 0; b < kBuilders; ++b) {
    for (int r = 0; r < kRounds; ++r) {
      const std::string* hit = cache.find("builder" + std::to_string(b) + "/layer" + std::to_string(r));
      ASSERT_NE(hit, nullptr) << b << " " << r;
      EXPECT_EQ(*hit, "tactic" + std::to_string(r));
    }
  }
  int temporaries = 0;
  for (const auto& e : fs::directory_iterator(dir_))
    temporaries += e.path().filename().string().find(".tmp-") != std::string::npos;
  EXPECT_EQ(temporaries, 0);
}

TEST_F(TimingCacheFile, ThisBuildersEntryWinsOverTheOneOnDisk) {
  {
    TimingCache first(path_);
    first.put("conv", "old");
    first.put("other", "kept");
    first.save();
  }
  TimingCache second(path_);
  second.put("conv", "new");
  second.save();
  TimingCache read(path_);
  ASSERT_NE(read.find("conv"), nullptr);
  EXPECT_EQ(*read.find("conv"), "new");
  ASSERT_NE(read.find("other"), nullptr);
}

TEST_F(TimingCacheFile, ADamagedFileIsIgnoredWithAWarningAndRewritten) {
  std::ofstream(path_, std::ios::binary) << std::string("\x00\xff\x13garbage\n\x01", 13);
  {
    CaptureWarnings warnings;
    TimingCache cache(path_);
    EXPECT_EQ(cache.size(), 0u);
    EXPECT_NE(warnings.text.find("is not a kiln timing cache"), std::string::npos) << warnings.text;
    EXPECT_NE(warnings.text.find(path_), std::string::npos) << warnings.text;
    cache.put("conv", "a");
    cache.save();  // the damaged content is not merged back
  }
  CaptureWarnings warnings;
  TimingCache again(path_);
  EXPECT_EQ(warnings.text, "");
  EXPECT_EQ(again.size(), 1u);
}

TEST_F(TimingCacheFile, DamagedLinesAreIgnoredWithAWarningAndTheRestKept) {
  std::ofstream(path_) << "kiln timing cache v1\nconv\tfast\nno tab here\n\tno key\nmm\tslow\n";
  CaptureWarnings warnings;
  TimingCache cache(path_);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_NE(warnings.text.find("2 line(s) that are not entries"), std::string::npos) << warnings.text;
  ASSERT_NE(cache.find("mm"), nullptr);
  EXPECT_EQ(*cache.find("mm"), "slow");
}

}  // namespace
}  // namespace kiln
