// The engine's optional LIBS section (embedded plugin libraries, docs/engine-format.md) and the
// runtime's opt-in for loading them: round trip and determinism, no LIBS section (and the old
// layout) without libraries, damaged library bytes and inconsistent sections rejected by name,
// and Runtime::deserialize refusing an embedded library without set_allow_embedded_plugins and,
// with it, writing the copy to a private temporary directory that it removes again.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/network.h"
#include "kiln/runtime.h"
#include "src/engine/engine_format.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

uint32_t get_u32(const std::vector<uint8_t>& b, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(b[at + static_cast<size_t>(i)]) << (8 * i);
  return v;
}

void fix_checksum(std::vector<uint8_t>& b) {
  const uint64_t sum = engine_checksum(b.data() + 64, b.size() - 64);
  for (int i = 0; i < 8; ++i) b[40 + static_cast<size_t>(i)] = static_cast<uint8_t>(sum >> (8 * i));
}

// x -> Plugin "NoSuchEmbedded" -> y, the plugin recorded as coming from `library`.
EngineData engine_data(const std::string& library, std::vector<EngineData::PluginLibrary> libraries) {
  EngineData d;
  d.network = std::make_unique<Network>();
  Tensor* x = d.network->add_input("x", DataType::kFloat32, Dims{4});
  Attributes a;
  a.set("plugin_name", std::string("NoSuchEmbedded"));
  a.set("plugin_version", std::string("1"));
  a.set("plugin_namespace", std::string(""));
  Layer* p = d.network->add_layer(kLayerPlugin, {x}, 1, a, "p");
  p->output(0)->set_dims(Dims{4});
  d.network->mark_output(p->output(0));
  OptimizationProfile prof;
  prof.set_dimensions("x", Dims{4}, Dims{4}, Dims{4});
  d.profiles = {prof};
  d.activation_peak_bytes = {0};
  d.tactics = {{"p", "plugin"}};
  d.plugins = {{"NoSuchEmbedded", "1", "", library}};
  d.plugin_libraries = std::move(libraries);
  return d;
}

std::vector<uint8_t> marker_bytes() {
  std::vector<uint8_t> b;
  const std::string text = "<<an embedded library>>";
  for (int r = 0; r < 40; ++r) b.insert(b.end(), text.begin(), text.end());
  return b;
}

std::string load_error(const std::vector<uint8_t>& bytes) {
  try {
    (void)engine_deserialize(bytes.data(), bytes.size(), "libs.engine");
  } catch (const EngineFormatError& e) {
    return e.what();
  }
  return "";
}

TEST(EnginePluginLibraries, RoundTripAndDeterminism) {
  const std::vector<uint8_t> lib = marker_bytes();
  const auto bytes = engine_serialize(engine_data("/opt/libs/libmine.so", {{"/opt/libs/libmine.so", lib}}));
  EXPECT_EQ(get_u32(bytes, 48), 6u) << "five required sections and LIBS";
  const EngineData back = engine_deserialize(bytes.data(), bytes.size(), "libs.engine");
  ASSERT_EQ(back.plugin_libraries.size(), 1u);
  EXPECT_EQ(back.plugin_libraries[0].path, "/opt/libs/libmine.so");
  EXPECT_EQ(back.plugin_libraries[0].bytes, lib);
  EXPECT_EQ(engine_serialize(back), bytes);

  // Without embedded libraries the file keeps the five-section layout.
  const auto plain = engine_serialize(engine_data("/opt/libs/libmine.so", {}));
  EXPECT_EQ(get_u32(plain, 48), 5u);
  EXPECT_TRUE(engine_deserialize(plain.data(), plain.size(), "plain").plugin_libraries.empty());
}

TEST(EnginePluginLibraries, DamagedOrInconsistentLibrariesAreRejected) {
  const std::vector<uint8_t> lib = marker_bytes();
  const auto bytes = engine_serialize(engine_data("/opt/libs/libmine.so", {{"/opt/libs/libmine.so", lib}}));
  ASSERT_EQ(load_error(bytes), "");
  // Flip a byte inside the library, behind a valid file checksum: the library's own checksum.
  const std::string text = "<<an embedded library>>";
  const auto at = std::search(bytes.begin(), bytes.end(), text.begin(), text.end());
  ASSERT_NE(at, bytes.end());
  auto damaged = bytes;
  damaged[static_cast<size_t>(at - bytes.begin()) + 5] ^= 0x20;
  fix_checksum(damaged);
  const std::string err = load_error(damaged);
  EXPECT_NE(err.find("embedded plugin library '/opt/libs/libmine.so'"), std::string::npos) << err;
  EXPECT_NE(err.find("checksum mismatch"), std::string::npos) << err;
  EXPECT_NE(err.find("libs.engine"), std::string::npos) << err;

  // A library no plugin comes from.
  const auto stray = engine_serialize(engine_data("/opt/libs/other.so", {{"/opt/libs/libmine.so", lib}}));
  EXPECT_NE(load_error(stray).find("is not the library of any plugin"), std::string::npos) << load_error(stray);

  // Every truncation fails cleanly.
  for (size_t len = bytes.size() - lib.size() - 40; len < bytes.size(); len += 7) {
    EXPECT_NE(load_error(std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(len))), "");
  }
}

std::string runtime_error(const std::vector<uint8_t>& bytes, bool allow) {
  Runtime runtime;
  runtime.set_allow_embedded_plugins(allow);
  try {
    (void)runtime.deserialize(bytes.data(), bytes.size(), "libs.engine");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(EnginePluginLibraries, RuntimeNeedsTheOptInAndCleansUp) {
  const auto bytes = engine_serialize(engine_data("/opt/libs/libmine.so", {{"/opt/libs/libmine.so", marker_bytes()}}));
  EXPECT_FALSE(Runtime().allow_embedded_plugins());

  const std::string refused = runtime_error(bytes, false);
  for (const char* must : {"NoSuchEmbedded", "/opt/libs/libmine.so", "embeds their library", "--allow-embedded-plugins",
                           "set_allow_embedded_plugins(true)", "--plugins"}) {
    EXPECT_NE(refused.find(must), std::string::npos) << "missing '" << must << "' in: " << refused;
  }

  // With the opt-in the copy is written to a private directory under TMPDIR, checked and handed
  // to the loader, which rejects these bytes (not an ELF file); nothing is left behind.
  const fs::path tmp = fs::path(::testing::TempDir()) / ("kiln_embedded_libs_" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  ::setenv("TMPDIR", tmp.c_str(), 1);
  const std::string loaded = runtime_error(bytes, true);
  if (old) {
    ::setenv("TMPDIR", saved.c_str(), 1);
  } else {
    ::unsetenv("TMPDIR");
  }
  EXPECT_NE(loaded.find("embedded plugin library '/opt/libs/libmine.so'"), std::string::npos) << loaded;
  EXPECT_NE(loaded.find("cannot load plugin library '" + tmp.string() + "/kiln-plugins-"), std::string::npos) << loaded;
  EXPECT_TRUE(fs::is_empty(tmp)) << "the temporary copy must be removed";
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace kiln
