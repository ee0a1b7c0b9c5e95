// Kernel (tactic) choice per layer: on the CPU the highest-priority kernel whose supports()
// accepts the layer at every profile point; on CUDA by timing (the CUDA backend's issue).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kiln/builder.h"
#include "src/backends/kernel.h"
#include "src/engine/engine_format.h"
#include "src/ir/shape_inference.h"

namespace kiln {

// Returns layer name -> tactic. Throws naming the layer when no kernel supports it. On CUDA
// (config.time_tactics) every supporting kernel is timed at the first state (the opt point of
// the first profile) and the fastest is kept; timings are read from and added to
// config.timing_cache_path. `report` (may be null) receives the timing counts.
std::map<std::string, std::string> select_tactics(const Network& network, const std::vector<Layer*>& steps,
                                                  const BuilderConfig& config, const std::vector<TensorStates>& states,
                                                  BuildReport* report = nullptr);

// Input descriptions of a layer under one set of tensor states (values of host-known tensors).
std::vector<TensorDesc> input_descs(const Layer& layer, const TensorStates& states);

// The plugin records of an engine (name, version, namespace, library) for the Plugin layers.
std::vector<EngineData::PluginRecord> collect_plugin_records(const Network& network);

}  // namespace kiln
