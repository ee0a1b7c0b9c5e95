// Hostile files (issue 16): devices, FIFOs and folders given as engines or models are refused
// without reading (reads used to run forever); external data reached through symbolic links or
// '..' outside the model's folder is refused; atomic writes never follow a planted link, never
// replace a folder, a device or a link, and leave no temporary file behind. Initializers whose
// dims claim more than their data holds fail before anything is allocated for them.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kiln.h"
#include "src/core/file_io.h"
#include "tests/onnx_model_builder.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using test::expect_mentions;
using test::OnnxModelBuilder;

// The message of the kiln::Error that importing throws ("" when it imports).
std::string import_error(const OnnxModelBuilder& b) {
  try {
    (void)test::import_model(b);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(HostileInitializers, ClaimingMoreThanTheyHoldFailsBeforeAllocating) {
  // 2^40 floats claimed (4 TiB, which cannot be allocated), 16 bytes given: the mismatch must be
  // reported, not an allocation failure.
  for (const int64_t elements : {int64_t{1} << 30, int64_t{1} << 40}) {
    OnnxModelBuilder b;
    b.input("x", onnx::TensorProto::FLOAT, {1});
    onnx::TensorProto& w = b.initializer();
    w.set_name("w");
    w.set_data_type(onnx::TensorProto::FLOAT);
    w.add_dims(elements);
    w.set_raw_data(std::string(16, '\0'));
    b.node("Add", {"x", "w"}, {"y"});
    b.output("y", onnx::TensorProto::FLOAT);
    const auto t0 = std::chrono::steady_clock::now();
    expect_mentions(import_error(b), {"initializer 'w'", "raw_data has 16 bytes"});
    // Allocating and zeroing 4 GiB first took seconds.
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  }
}

class HostileFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("kiln_hostile_" + std::to_string(::getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "model");
    fs::create_directories(dir_ / "outside");
  }
  void TearDown() override {
    std::error_code ec;
    if (!HasFailure()) fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static void write(const std::string& file, const std::string& text) { std::ofstream(file, std::ios::binary) << text; }
  static std::string read(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  fs::path dir_;
};

// Reading a device, a FIFO or a folder used to read forever (or block); now a clear error.
TEST_F(HostileFiles, NonRegularFilesAreRefusedWithoutReading) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/dev/zero", "not a regular file (a character device)"},
      {"/dev/urandom", "not a regular file (a character device)"},
      {path("fifo"), "not a regular file (a FIFO)"},
      {path("model"), "it is a directory"},
      {path("missing"), "no such file"}};
  for (const auto& [file, why] : cases) {
    try {
      (void)Runtime().deserialize_file(file);
      ADD_FAILURE() << file << " read";
    } catch (const Error& e) {
      expect_mentions(e.what(), {"engine file '" + file + "'", why});
    }
    Network net;
    try {
      OnnxParser(net).parse_file(file);
      ADD_FAILURE() << file << " parsed";
    } catch (const Error& e) {
      expect_mentions(e.what(), {"ONNX model '" + file + "'", why});
    }
  }
  EXPECT_THROW((void)read_whole_file(path("fifo"), "x"), Error);
  write(path("big"), std::string(100, 'x'));
  try {
    (void)read_whole_file(path("big"), "flag file", 64);
    ADD_FAILURE() << "limit ignored";
  } catch (const Error& e) {
    expect_mentions(e.what(), {"100 bytes, more than the limit of 64 bytes"});
  }
}

// A model whose external data goes through a symbolic link to a file (or a folder) outside its
// folder: refused. Links that stay inside work.
TEST_F(HostileFiles, ExternalDataThroughLinksOutsideTheFolderIsRefused) {
  const std::string secret(16, 's');
  write(path("outside/secret.bin"), secret);
  write(path("model/inside.bin"), std::string(16, '\0'));
  fs::create_symlink(dir_ / "outside/secret.bin", dir_ / "model/link_to_file.bin");
  fs::create_symlink(dir_ / "outside", dir_ / "model/link_to_folder");
  fs::create_symlink("inside.bin", dir_ / "model/link_inside.bin");
  const auto model_with = [&](const std::string& location) {
    OnnxModelBuilder b;
    b.input("x", onnx::TensorProto::FLOAT, {4});
    onnx::TensorProto& w = b.initializer();
    w.set_name("w");
    w.set_data_type(onnx::TensorProto::FLOAT);
    w.add_dims(4);
    w.set_data_location(onnx::TensorProto::EXTERNAL);
    auto* kv = w.add_external_data();
    kv->set_key("location");
    kv->set_value(location);
    b.node("Add", {"x", "w"}, {"y"});
    b.output("y", onnx::TensorProto::FLOAT);
    const std::string file = path("model/m.onnx");
    b.save(file);
    Network net;
    OnnxParser(net).parse_file(file);
  };
  for (const std::string location : {"link_to_file.bin", "link_to_folder/secret.bin"}) {
    try {
      model_with(location);
      ADD_FAILURE() << location << " was read";
    } catch (const Error& e) {
      expect_mentions(e.what(), {"initializer 'w'", "outside the model's folder", "symbolic link"});
    }
  }
  try {
    model_with("../outside/secret.bin");
    ADD_FAILURE() << "a location with '..' was read";
  } catch (const Error& e) {
    expect_mentions(e.what(), {"initializer 'w'", "leaves the model's folder ('..')"});
  }
  const std::string absolute = path("outside/secret.bin");
  try {
    model_with(absolute);
    ADD_FAILURE() << "an absolute location was read";
  } catch (const Error& e) {
    expect_mentions(e.what(), {"absolute path"});
  }
  EXPECT_NO_THROW(model_with("inside.bin"));
  EXPECT_NO_THROW(model_with("link_inside.bin"));
}

TEST_F(HostileFiles, AtomicWriteNeverFollowsLinksOrReplacesOtherFiles) {
  const std::string victim = path("outside/victim");
  write(victim, "precious");
  // The old writer wrote E.tmp (following a planted link) and renamed it over E.
  fs::create_symlink(victim, dir_ / "model/e.kiln.tmp");
  write_file_atomically(path("model/e.kiln"), "new", 3, "engine file");
  EXPECT_EQ(read(victim), "precious");
  EXPECT_EQ(read(path("model/e.kiln")), "new");
  write_file_atomically(path("model/e.kiln"), "newer", 5, "engine file");
  EXPECT_EQ(read(path("model/e.kiln")), "newer");
  // No temporary file is left behind.
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir_ / "model")) files += entry.path().filename().string()[0] == '.';
  EXPECT_EQ(files, 0);

  const std::vector<std::pair<std::string, std::string>> refused = {
      {path("model"), "it is a directory"},
      {"/dev/full", "not a regular file (a character device)"},
      {"/dev/null", "not a regular file (a character device)"},
      {path("model/e.kiln.tmp"), "symbolic link"},
      {path("nowhere/e.kiln"), "does not exist"}};
  for (const auto& [target, why] : refused) {
    try {
      write_file_atomically(target, "x", 1, "engine file");
      ADD_FAILURE() << target << " written";
    } catch (const Error& e) {
      expect_mentions(e.what(), {"cannot write engine file '" + target + "'", why});
    }
  }
  struct stat st {};
  ASSERT_EQ(::lstat("/dev/full", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(read(victim), "precious");
}

}  // namespace
}  // namespace kiln
