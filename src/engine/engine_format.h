// The engine file format (docs/engine-format.md): a fixed header (magic, format version, kiln
// version, payload size, checksum over the payload), a section table and the sections. Every
// size, offset and count is validated on load against the actual data; a corrupt, truncated or
// foreign file raises kiln::EngineFormatError naming the file and what is wrong, never a crash
// or an allocation larger than the file.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/builder.h"
#include "kiln/network.h"
#include "kiln/types.h"
#include "src/backends/prepared_state.h"

namespace kiln {

// Everything an engine file holds.
struct EngineData {
  DeviceType device = DeviceType::kCPU;
  int num_threads = 0;
  std::unique_ptr<Network> network;            // the optimized network (with Constant layers)
  std::map<std::string, std::string> tactics;  // layer name -> chosen tactic
  // Layers whose tactic for plain launches (no CUDA graph) differs from `tactics`: the builder
  // times both the device time and the host's launch cost, and where a kernel's launch costs
  // more than its run, layer-by-layer launches are faster with another one (optional LAUNCH
  // section). Layer name -> tactic.
  std::map<std::string, std::string> launch_tactics;
  std::vector<OptimizationProfile> profiles;
  std::vector<uint64_t> activation_peak_bytes;  // per profile
  // Plugins the engine uses (filled by the plugin system): name, version, namespace, library.
  struct PluginRecord {
    std::string name, version, plugin_namespace, library;
  };
  std::vector<PluginRecord> plugins;
  // Plugin libraries embedded for self-contained deployment (BuilderConfig::
  // embed_plugin_libraries): the path a PluginRecord names and the library file's bytes. Stored
  // in the optional LIBS section, in strictly increasing path order.
  struct PluginLibrary {
    std::string path;
    std::vector<uint8_t> bytes;
  };
  std::vector<PluginLibrary> plugin_libraries;
  // Prepared kernel states of the chosen kernels (BuilderConfig::embed_compiled_plans: cuDNN
  // execution plans with their runtime-compiled kernels), in strictly increasing key order.
  // Stored in the optional KSTATE section; Runtime::deserialize registers them
  // (hold_prepared_states) for the engine's lifetime and empties this.
  std::vector<PreparedState> prepared_states;
  // Free-form build information shown by `kiln inspect` (sorted keys).
  std::map<std::string, std::string> build_info;
};

// Serializes deterministically (same EngineData -> same bytes).
std::vector<uint8_t> engine_serialize(const EngineData& data);
// Parses and validates. `source` (a file name or "<memory>") appears in every error message.
EngineData engine_deserialize(const uint8_t* bytes, size_t size, const std::string& source);

// 64-bit FNV-1a checksum used by the format.
uint64_t engine_checksum(const uint8_t* bytes, size_t size);

}  // namespace kiln
