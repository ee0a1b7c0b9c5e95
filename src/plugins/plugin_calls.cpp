#include "src/plugins/plugin_calls.h"

#include <utility>

#include "kiln/error.h"
#include "kiln/logger.h"
#include "src/core/text.h"

namespace kiln {

namespace detail {
namespace {
struct KilnOwnCalls {};  // a type of libkiln itself: the instantiation below is kiln's copy
}  // namespace
const PluginEntryPoints& in_process_entry_points() { return LibraryEntryPoints<KilnOwnCalls>::instance(); }
}  // namespace detail

const detail::PluginEntryPoints& entry_points_of(const Plugin& plugin) {
  if (const detail::PluginEntryPoints* e = plugin.entry_points()) return *e;
  // An object the program got from a creator itself (creator->create(...)): the entry points of
  // the library that registered a creator of its identity, if any.
  std::string type, version, ns;
  if (detail::in_process_entry_points().identity(plugin, &type, &version, &ns).ok()) {
    PluginRegistry& registry = PluginRegistry::instance();
    if (const PluginCreator* creator = registry.find(type, version, ns)) return registry.entry_points(*creator);
  }
  return detail::in_process_entry_points();
}

GuardedPlugin::GuardedPlugin(std::unique_ptr<Plugin> plugin, std::string label)
    : plugin_(std::move(plugin)), entry_(plugin_ ? &entry_points_of(*plugin_) : nullptr), label_(std::move(label)) {
  if (!plugin_) throw Error(label_ + ": no plugin object");
}

void GuardedPlugin::fail(const char* method, const PluginStatus& status) const {
  fail_call(std::string(method) + "()", status);
}

void GuardedPlugin::fail_call(const std::string& call, const PluginStatus& status) const {
  throw PluginCallError((label_.empty() ? std::string() : label_ + ": ") + call + " " + status.message(),
                        status.message());
}

GuardedPlugin::Identity GuardedPlugin::identity() const {
  Identity id;
  const PluginStatus s = entry_->identity(*plugin_, &id.type, &id.version, &id.plugin_namespace);
  if (!s.ok()) fail("type/version/plugin_namespace", s);
  return id;
}

int GuardedPlugin::num_outputs() const {
  int n = 0;
  const PluginStatus s = entry_->num_outputs(*plugin_, &n);
  if (!s.ok()) fail("num_outputs", s);
  return n;
}

std::vector<DataType> GuardedPlugin::output_types(const std::vector<DataType>& inputs) const {
  std::vector<DataType> out;
  const PluginStatus s = entry_->output_types(*plugin_, inputs, &out);
  if (!s.ok()) fail("output_types", s);
  return out;
}

DimsExprs GuardedPlugin::output_dims(int index, const std::vector<DimsExprs>& inputs, ExprBuilder& exprs) const {
  DimsExprs out;
  const PluginStatus s = entry_->output_dims(*plugin_, index, inputs, exprs, &out);
  if (!s.ok()) fail_call("output_dims(" + std::to_string(index) + ")", s);
  return out;
}

bool GuardedPlugin::supports_format_combination(int pos, const std::vector<PluginTensorDesc>& in_out, int num_inputs,
                                                int num_outputs) const {
  bool yes = false;
  const PluginStatus s = entry_->supports_format_combination(*plugin_, pos, in_out, num_inputs, num_outputs, &yes);
  if (!s.ok()) fail("supports_format_combination", s);
  return yes;
}

void GuardedPlugin::configure(const std::vector<DynamicPluginTensorDesc>& inputs,
                              const std::vector<DynamicPluginTensorDesc>& outputs) {
  const PluginStatus s = entry_->configure(*plugin_, inputs, outputs);
  if (!s.ok()) fail("configure", s);
}

size_t GuardedPlugin::workspace_size(const std::vector<PluginTensorDesc>& inputs,
                                     const std::vector<PluginTensorDesc>& outputs) const {
  size_t bytes = 0;
  const PluginStatus s = entry_->workspace_size(*plugin_, inputs, outputs, &bytes);
  if (!s.ok()) fail("workspace_size", s);
  return bytes;
}

PluginStatus GuardedPlugin::enqueue(const std::vector<PluginTensorDesc>& input_descs,
                                    const std::vector<PluginTensorDesc>& output_descs, const void* const* inputs,
                                    void* const* outputs, void* workspace, const PluginExecContext& exec) {
  return entry_->enqueue(*plugin_, input_descs, output_descs, inputs, outputs, workspace, exec);
}

std::vector<std::string> GuardedPlugin::tactics(const std::vector<PluginTensorDesc>& inputs,
                                                const std::vector<PluginTensorDesc>& outputs) const {
  std::vector<std::string> names;
  const PluginStatus s = entry_->tactics(*plugin_, inputs, outputs, &names);
  if (!s.ok()) fail("tactics", s);
  return names;
}

void GuardedPlugin::set_tactic(const std::string& name) {
  const PluginStatus s = entry_->set_tactic(*plugin_, name);
  if (!s.ok()) fail_call("set_tactic(" + quote(name) + ")", s);
}

int GuardedPlugin::aliased_input(int output_index) const {
  int i = -1;
  const PluginStatus s = entry_->aliased_input(*plugin_, output_index, &i);
  if (!s.ok()) fail_call("aliased_input(" + std::to_string(output_index) + ")", s);
  return i;
}

std::unique_ptr<GuardedPlugin> GuardedPlugin::clone() const {
  std::unique_ptr<Plugin> copy;
  const PluginStatus s = entry_->clone(*plugin_, &copy);
  if (!s.ok()) fail("clone", s);
  if (!copy) fail("clone", PluginStatus::failure("returned no plugin"));
  copy->set_target_device(plugin_->target_device());
  return std::make_unique<GuardedPlugin>(std::move(copy), label_);
}

void GuardedPlugin::initialize() {
  const PluginStatus s = entry_->initialize(*plugin_);
  if (!s.ok()) fail("initialize", s);
}

void GuardedPlugin::terminate() noexcept {
  const PluginStatus s = entry_->terminate(*plugin_);
  if (!s.ok()) {
    try {
      log(Severity::kError, (label_.empty() ? std::string() : label_ + ": ") + "terminate() " + s.message());
    } catch (...) {  // NOLINT(bugprone-empty-catch): nothing to report with
    }
  }
}

PluginFieldCollection GuardedPlugin::fields() const {
  PluginFieldCollection out;
  const PluginStatus s = entry_->fields(*plugin_, &out);
  if (!s.ok()) fail("fields", s);
  return out;
}

std::vector<uint8_t> GuardedPlugin::serialize() const {
  std::vector<uint8_t> out;
  const PluginStatus s = entry_->serialize(*plugin_, &out);
  if (!s.ok()) fail("serialize", s);
  return out;
}

// ---- creators -------------------------------------------------------------------------------

CreatorIdentity creator_identity(const PluginCreator& creator) {
  CreatorIdentity id;
  const PluginStatus s = PluginRegistry::instance().entry_points(creator).creator_identity(
      creator, &id.name, &id.version, &id.plugin_namespace);
  if (!s.ok())
    throw PluginCallError("a plugin creator's name()/version()/plugin_namespace() " + s.message(), s.message());
  return id;
}

namespace {
std::string creator_where(const PluginCreator& creator, const std::string& where) {
  return (where.empty() ? std::string() : where + ": ") + "plugin " + quote(creator_identity(creator).name) + " ";
}
}  // namespace

std::vector<PluginFieldSpec> creator_field_schema(const PluginCreator& creator, const std::string& where) {
  std::vector<PluginFieldSpec> schema;
  const PluginStatus s = PluginRegistry::instance().entry_points(creator).field_schema(creator, &schema);
  if (!s.ok()) throw PluginCallError(creator_where(creator, where) + "field_schema() " + s.message(), s.message());
  return schema;
}

PluginFieldCollection creator_example_fields(const PluginCreator& creator, const std::string& where) {
  PluginFieldCollection fields;
  const PluginStatus s = PluginRegistry::instance().entry_points(creator).example_fields(creator, &fields);
  if (!s.ok()) throw PluginCallError(creator_where(creator, where) + "example_fields() " + s.message(), s.message());
  return fields;
}

std::unique_ptr<GuardedPlugin> creator_create(const PluginCreator& creator, const std::string& layer_name,
                                              const PluginFieldCollection& fields, const std::string& where) {
  std::unique_ptr<Plugin> p;
  const PluginStatus s = PluginRegistry::instance().entry_points(creator).create(creator, layer_name, fields, &p);
  if (!s.ok()) throw PluginCallError(creator_where(creator, where) + "create() " + s.message(), s.message());
  if (!p) throw PluginCallError(creator_where(creator, where) + "create() returned no plugin", "returned no plugin");
  return std::make_unique<GuardedPlugin>(std::move(p), where);
}

std::unique_ptr<GuardedPlugin> creator_deserialize(const PluginCreator& creator, const std::string& layer_name,
                                                   const void* data, size_t size, const std::string& where) {
  std::unique_ptr<Plugin> p;
  const PluginStatus s =
      PluginRegistry::instance().entry_points(creator).deserialize(creator, layer_name, data, size, &p);
  if (!s.ok()) throw PluginCallError(creator_where(creator, where) + "deserialize() " + s.message(), s.message());
  if (!p)
    throw PluginCallError(creator_where(creator, where) + "deserialize() returned no plugin", "returned no plugin");
  return std::make_unique<GuardedPlugin>(std::move(p), where);
}

}  // namespace kiln
