// Plugin layers in kiln's IR: how a plugin's identity and fields are stored on a Layer (so the
// engine serializes them like any attribute), how a plugin is re-created from a layer through
// its creator, and the checks kiln applies to every answer a plugin gives.
//
// Attributes of a Plugin layer: plugin_name, plugin_version, plugin_namespace (strings);
// "field.<name>" per field (float32/float64 -> floats, int32/int64 -> ints, string, tensor);
// or, for plugins that serialize themselves, plugin_bytes (uint8 tensor), plugin_bytes_size and
// plugin_bytes_checksum (ints).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/plugin.h"
#include "src/engine/engine_format.h"

namespace kiln {

// Adds a Plugin layer from a creator's name and fields (checked against its schema; errors name
// `where`, e.g. the ONNX node).
Layer* add_plugin_layer(Network& network, const std::vector<Tensor*>& inputs, const PluginCreator& creator,
                        const PluginFieldCollection& fields, const std::string& layer_name, const std::string& where);

// Re-creates the plugin of a Plugin layer for `device`. Throws a clear error when its creator is
// not registered (naming the plugin, version, namespace, recorded library and --plugins) or when
// its stored bytes do not match their recorded size or checksum.
class GuardedPlugin;
std::unique_ptr<GuardedPlugin> plugin_from_layer(const Layer& layer, DeviceType device);

// The fields stored on a Plugin layer, converted back by the creator's schema.
PluginFieldCollection plugin_fields_of(const Layer& layer, const PluginCreator& creator);

// Fails with a message naming every plugin of an engine that is not registered in this process.
void check_engine_plugins(const EngineData& data, const std::string& source);

// Loads the embedded copy (EngineData::plugin_libraries) of every library holding a plugin of
// the engine that is not registered in this process. Loading runs code from the engine file, so
// without `allow` (Runtime::set_allow_embedded_plugins) it throws instead, naming the plugins,
// the embedded libraries and both ways out (--allow-embedded-plugins, --plugins). With it, each
// library is written to a private temporary file (a new 0700 directory under $TMPDIR or /tmp),
// checked against the engine's checksum after writing, loaded with load_plugin_library and
// removed (the loaded code stays mapped). Plugins whose library is not embedded are left to
// check_engine_plugins.
void load_embedded_plugins(const EngineData& data, const std::string& source, bool allow);

// 64-bit FNV-1a of plugin bytes.
uint64_t plugin_bytes_checksum(const void* data, size_t size);

// The file name of a library path ("libfoo.so" of "/x/y/libfoo.so"): what engines record.
std::string library_file_name(const std::string& path);
// The folders of KILN_PLUGIN_PATH (colon-separated), in order.
std::vector<std::string> plugin_search_dirs();
// Loads, from the folders of KILN_PLUGIN_PATH, the libraries of the engine's plugins that are not
// registered (the first folder holding a file of the recorded name). Throws like
// load_plugin_library when one fails to load.
void load_engine_plugins_from_search_path(const EngineData& data, const std::string& source);

// The plugin records of an engine (name, version, namespace, library file name) for the Plugin layers.
std::vector<EngineData::PluginRecord> collect_plugin_records(const Network& network);

// The files of the libraries the records name (BuilderConfig::embed_plugin_libraries), one per
// library; plugins built into kiln (library "") have none. Throws naming a library that cannot
// be read.
std::vector<EngineData::PluginLibrary> read_plugin_libraries(const std::vector<EngineData::PluginRecord>& plugins);

}  // namespace kiln
