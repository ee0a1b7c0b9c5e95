// kiln's side of the plugin library boundary (include/kiln/plugin.h, "the library boundary"):
// every call kiln makes into a plugin or a creator goes through the entry points of the library
// that made it, and a failed status becomes a kiln::Error that names where (the layer or ONNX
// node), the plugin and the method. Nothing here lets an exception of a plugin library reach
// kiln: the library's own entry points catch it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/plugin.h"

namespace kiln {

// What GuardedPlugin and the creator calls throw: the message with `where` and the method, and
// the status as the library returned it ("threw: ...", "returned 3: ...").
class PluginCallError : public Error {
 public:
  PluginCallError(const std::string& message, std::string status) : Error(message), status_(std::move(status)) {}
  const std::string& status_message() const { return status_; }

 private:
  std::string status_;
};

// The entry points to call `plugin` through: those of the library whose creator made it (or, for
// an object the program got from a creator directly, of the library that registered a creator of
// its type, version and namespace), else kiln's own.
const detail::PluginEntryPoints& entry_points_of(const Plugin& plugin);

// A plugin object kiln owns, called only through its library's entry points. `label` starts
// every error ("plugin layer 'swish3' (TemperatureSwish)", "ONNX node 'n7'"; none when empty).
class GuardedPlugin {
 public:
  GuardedPlugin(std::unique_ptr<Plugin> plugin, std::string label);
  GuardedPlugin(const GuardedPlugin&) = delete;
  GuardedPlugin& operator=(const GuardedPlugin&) = delete;

  const std::string& label() const { return label_; }
  // For kiln's own non-virtual settings (set_target_device) only: never call its virtual methods.
  Plugin& object() { return *plugin_; }

  struct Identity {
    std::string type, version, plugin_namespace;
  };
  Identity identity() const;
  int num_outputs() const;
  std::vector<DataType> output_types(const std::vector<DataType>& inputs) const;
  DimsExprs output_dims(int index, const std::vector<DimsExprs>& inputs, ExprBuilder& exprs) const;
  bool supports_format_combination(int pos, const std::vector<PluginTensorDesc>& in_out, int num_inputs,
                                   int num_outputs) const;
  void configure(const std::vector<DynamicPluginTensorDesc>& inputs,
                 const std::vector<DynamicPluginTensorDesc>& outputs);
  size_t workspace_size(const std::vector<PluginTensorDesc>& inputs,
                        const std::vector<PluginTensorDesc>& outputs) const;
  // The status as it came back (execute paths add the device and their own wording).
  PluginStatus enqueue(const std::vector<PluginTensorDesc>& input_descs,
                       const std::vector<PluginTensorDesc>& output_descs, const void* const* inputs,
                       void* const* outputs, void* workspace, const PluginExecContext& exec);
  std::vector<std::string> tactics(const std::vector<PluginTensorDesc>& inputs,
                                   const std::vector<PluginTensorDesc>& outputs) const;
  void set_tactic(const std::string& name);
  int aliased_input(int output_index) const;
  std::unique_ptr<GuardedPlugin> clone() const;
  void initialize();
  // Reports a failure through the logger (it runs in destructors).
  void terminate() noexcept;
  PluginFieldCollection fields() const;
  std::vector<uint8_t> serialize() const;

 private:
  [[noreturn]] void fail(const char* method, const PluginStatus& status) const;
  [[noreturn]] void fail_call(const std::string& call, const PluginStatus& status) const;
  std::unique_ptr<Plugin> plugin_;
  const detail::PluginEntryPoints* entry_;
  std::string label_;
};

// Calls into a creator through the entry points of the library that registered it; a failure
// throws kiln::Error "<where>: plugin '<name>' <method> <message>".
struct CreatorIdentity {
  std::string name, version, plugin_namespace;
};
CreatorIdentity creator_identity(const PluginCreator& creator);
std::vector<PluginFieldSpec> creator_field_schema(const PluginCreator& creator, const std::string& where);
PluginFieldCollection creator_example_fields(const PluginCreator& creator, const std::string& where);
// Null results are errors too ("returned no plugin").
std::unique_ptr<GuardedPlugin> creator_create(const PluginCreator& creator, const std::string& layer_name,
                                              const PluginFieldCollection& fields, const std::string& where);
std::unique_ptr<GuardedPlugin> creator_deserialize(const PluginCreator& creator, const std::string& layer_name,
                                                   const void* data, size_t size, const std::string& where);

}  // namespace kiln
