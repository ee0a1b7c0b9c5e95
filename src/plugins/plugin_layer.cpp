// Plugin layers: storage of plugin identity and fields on layers, re-creation through creators,
// shape inference by the plugin's symbolic expressions (checked), the Plugin layer schema, the
// plugin kernel that runs any plugin on the CPU and on CUDA (configured once per optimization
// profile), and the plugin libraries an engine embeds (read at build time, loaded on opt-in).
#include "src/plugins/plugin_layer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

#include "kiln/error.h"
#include "kiln/logger.h"
#include "kiln/network.h"
#include "src/backends/kernel.h"
#include "src/ir/op_schema.h"
#include "src/ir/plugin_hooks.h"
#include "src/core/text.h"
#include "src/plugins/plugin_calls.h"

namespace kiln {

namespace {

constexpr const char* kFieldPrefix = "field.";

std::string plugin_label(const Layer& layer) {
  return "plugin layer " + quote(layer.name()) + " (" + layer.attrs().get_string("plugin_name") + ")";
}

void store_fields(Attributes& attrs, const PluginFieldCollection& fields) {
  for (const PluginField& f : fields.all()) attrs.set(kFieldPrefix + f.name, f.value());
}

Layer* add_layer_with(Network& network, const std::vector<Tensor*>& inputs, const std::string& name,
                      const std::string& version, const std::string& ns, int num_outputs, Attributes attrs,
                      const std::string& layer_name) {
  attrs.set("plugin_name", name);
  attrs.set("plugin_version", version);
  attrs.set("plugin_namespace", ns);
  return network.add_layer(kLayerPlugin, inputs, num_outputs, std::move(attrs), layer_name);
}

}  // namespace

uint64_t plugin_bytes_checksum(const void* data, size_t size) {
  uint64_t h = 14695981039346656037ull;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

// The plugin's in-place outputs (Plugin::aliased_input) as the layer attribute
// plugin_aliased_inputs (one input index or -1 per output), when it declares any.
void store_aliases(Attributes& attrs, const GuardedPlugin& plugin, int num_outputs, size_t num_inputs,
                   const std::string& where) {
  std::vector<int64_t> aliases;
  bool any = false;
  for (int o = 0; o < num_outputs; ++o) {
    const int i = plugin.aliased_input(o);
    if (i < -1 || i >= static_cast<int>(num_inputs)) {
      throw Error(where + ": plugin '" + plugin.identity().type + "' says output " + std::to_string(o) +
                  " reuses input " + std::to_string(i) + ", but the layer has " + std::to_string(num_inputs) +
                  " inputs");
    }
    if (i >= 0 && std::find(aliases.begin(), aliases.end(), i) != aliases.end()) {
      throw Error(where + ": plugin '" + plugin.identity().type + "' says two outputs reuse input " +
                  std::to_string(i));
    }
    any |= i >= 0;
    aliases.push_back(i);
  }
  if (any) attrs.set("plugin_aliased_inputs", aliases);
}

Layer* add_plugin(Network& network, const std::vector<Tensor*>& inputs, const Plugin& object, const std::string& name) {
  // kiln keeps its own copy, called through the entry points of the library that made it.
  const std::string where = "plugin layer " + quote(name);
  std::unique_ptr<Plugin> copy;
  const PluginStatus cloned = entry_points_of(object).clone(object, &copy);
  if (!cloned.ok()) throw Error(where + ": clone() " + cloned.message());
  if (!copy) throw Error(where + ": clone() returned no plugin");
  const GuardedPlugin plugin(std::move(copy), where);
  const GuardedPlugin::Identity id = plugin.identity();
  const int n = plugin.num_outputs();
  if (n < 1)
    throw Error("plugin " + quote(id.type) + " declares " + std::to_string(n) + " outputs; it needs at least one");
  Attributes attrs;
  const auto bytes = plugin.serialize();
  if (!bytes.empty()) {
    attrs.set("plugin_bytes", HostTensor::from_bytes(DataType::kUInt8, Dims{static_cast<int64_t>(bytes.size())},
                                                     bytes.data(), bytes.size()));
    attrs.set("plugin_bytes_size", static_cast<int64_t>(bytes.size()));
    attrs.set("plugin_bytes_checksum", static_cast<int64_t>(plugin_bytes_checksum(bytes.data(), bytes.size())));
  } else {
    store_fields(attrs, plugin.fields());
  }
  store_aliases(attrs, plugin, n, inputs.size(), where);
  return add_layer_with(network, inputs, id.type, id.version, id.plugin_namespace, n, std::move(attrs), name);
}

Layer* add_plugin_layer(Network& network, const std::vector<Tensor*>& inputs, const PluginCreator& creator,
                        const PluginFieldCollection& fields, const std::string& layer_name, const std::string& where) {
  const PluginFieldCollection resolved = PluginRegistry::instance().resolve_fields(creator, fields, where);
  const CreatorIdentity id = creator_identity(creator);
  const std::unique_ptr<GuardedPlugin> plugin = creator_create(creator, layer_name, resolved, where);
  const int n = plugin->num_outputs();
  if (n < 1) throw Error(where + ": plugin " + quote(id.name) + " declares " + std::to_string(n) + " outputs");
  Attributes attrs;
  store_fields(attrs, resolved);
  store_aliases(attrs, *plugin, n, inputs.size(), where);
  return add_layer_with(network, inputs, id.name, id.version, id.plugin_namespace, n, std::move(attrs), layer_name);
}

PluginFieldCollection plugin_fields_of(const Layer& layer, const PluginCreator& creator) {
  PluginFieldCollection given;
  for (const auto& spec : creator_field_schema(creator, plugin_label(layer))) {
    const std::string key = kFieldPrefix + spec.name;
    if (!layer.attrs().has(key)) continue;
    const AttrValue& stored = layer.attrs().get(key, attr_type_of(spec.type));
    PluginField f;
    try {
      f = PluginField::from_value(spec.name, spec.type, stored);
    } catch (const Error& e) {
      throw Error(plugin_label(layer) + ": " + e.what());
    }
    given.add(std::move(f));
  }
  for (const auto& [key, value] : layer.attrs().all()) {
    if (key.rfind(kFieldPrefix, 0) != 0) continue;
    const std::string fname = key.substr(std::strlen(kFieldPrefix));
    if (!given.find(fname)) {
      PluginField f;
      f.name = fname;  // unknown to the schema: resolve_fields reports it
      f.type = PluginFieldType::kString;
      given.add(f);
    }
  }
  return PluginRegistry::instance().resolve_fields(creator, given, plugin_label(layer));
}

std::unique_ptr<GuardedPlugin> plugin_from_layer(const Layer& layer, DeviceType device) {
  const std::string name = layer.attrs().get_string("plugin_name");
  const std::string version = layer.attrs().get_string("plugin_version", "1");
  const std::string ns = layer.attrs().get_string("plugin_namespace", "");
  const PluginCreator* creator = PluginRegistry::instance().find(name, version, ns);
  if (!creator) {
    const std::string lib = layer.attrs().get_string("plugin_library", "");
    throw Error(plugin_label(layer) + ": plugin " + quote(name) + " version " + quote(version) + " namespace '" + ns +
                "' is not registered" + (lib.empty() ? std::string() : " (it came from library " + quote(lib) + ")") +
                "; load its library first (kiln ... --plugins LIB.so, or kiln::load_plugin_library)");
  }
  std::unique_ptr<GuardedPlugin> plugin;
  if (layer.attrs().has("plugin_bytes")) {
    const HostTensor& bytes = layer.attrs().get_tensor("plugin_bytes");
    const auto size = static_cast<size_t>(layer.attrs().get_int("plugin_bytes_size", -1));
    const auto sum = static_cast<uint64_t>(layer.attrs().get_int("plugin_bytes_checksum", 0));
    if (size != bytes.nbytes() || sum != plugin_bytes_checksum(bytes.data(), bytes.nbytes())) {
      throw Error(plugin_label(layer) +
                  ": the plugin's serialized bytes do not match their recorded size/checksum "
                  "(recorded " +
                  std::to_string(size) + " bytes, found " + std::to_string(bytes.nbytes()) +
                  "); the engine is corrupt");
    }
    plugin = creator_deserialize(*creator, layer.name(), bytes.data(), bytes.nbytes(), plugin_label(layer));
  } else {
    const PluginFieldCollection fields = plugin_fields_of(layer, *creator);
    plugin = creator_create(*creator, layer.name(), fields, plugin_label(layer));
  }
  plugin->object().set_target_device(device);
  // The implementation the builder chose (Plugin::tactics), before anything that depends on it.
  if (layer.attrs().has("plugin_tactic")) plugin->set_tactic(layer.attrs().get_string("plugin_tactic"));
  const int n = plugin->num_outputs();
  if (n != layer.num_outputs()) {
    throw Error(plugin_label(layer) + ": the plugin declares " + std::to_string(n) + " outputs but the layer has " +
                std::to_string(layer.num_outputs()));
  }
  return plugin;
}

std::string library_file_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::vector<std::string> plugin_search_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("KILN_PLUGIN_PATH")) {
    std::string all = env;
    size_t start = 0;
    while (start <= all.size()) {
      const size_t end = all.find(':', start);
      const std::string dir = all.substr(start, end == std::string::npos ? std::string::npos : end - start);
      if (!dir.empty()) dirs.push_back(dir);
      if (end == std::string::npos) break;
      start = end + 1;
    }
  }
  return dirs;
}

namespace {

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The folder of an engine file, or "" for engines not read from a file.
std::string engine_folder(const std::string& source) {
  if (source.empty() || source[0] == '<') return "";
  const size_t slash = source.rfind('/');
  return slash == std::string::npos ? "." : source.substr(0, slash);
}

}  // namespace

void load_engine_plugins_from_search_path(const EngineData& data, const std::string& source) {
  const std::vector<std::string> dirs = plugin_search_dirs();
  if (dirs.empty()) return;
  for (const auto& p : data.plugins) {
    if (p.library.empty() || PluginRegistry::instance().find(p.name, p.version, p.plugin_namespace)) continue;
    const std::string name = library_file_name(p.library);
    for (const std::string& dir : dirs) {
      const std::string candidate = dir + "/" + name;
      if (!file_exists(candidate)) continue;
      load_plugin_library(candidate);
      log(Severity::kInfo,
          source + ": loaded plugin library " + quote(candidate) + " (KILN_PLUGIN_PATH) for plugin '" + p.name + "'");
      break;
    }
  }
}

void check_engine_plugins(const EngineData& data, const std::string& source) {
  std::string missing;
  std::vector<std::string> found;
  for (const auto& p : data.plugins) {
    if (PluginRegistry::instance().find(p.name, p.version, p.plugin_namespace)) continue;
    missing += "\n  - plugin " + quote(p.name) + " version " + quote(p.version) + " namespace " +
               quote(p.plugin_namespace) +
               (p.library.empty() ? std::string(" (built into the kiln that made the engine)")
                                  : " from library " + quote(p.library));
    if (p.library.empty()) continue;
    // Where the library may be: next to the engine, on KILN_PLUGIN_PATH.
    const std::string name = library_file_name(p.library);
    std::vector<std::string> candidates;
    const std::string folder = engine_folder(source);
    if (!folder.empty()) candidates.push_back(folder + "/" + name);
    for (const std::string& dir : plugin_search_dirs()) candidates.push_back(dir + "/" + name);
    if (p.library.find('/') != std::string::npos) candidates.push_back(p.library);  // older engines: the path as typed
    for (const std::string& c : candidates) {
      if (file_exists(c) && std::find(found.begin(), found.end(), c) == found.end()) found.push_back(c);
    }
  }
  if (missing.empty()) return;
  std::string hint =
      "\nload their libraries first: kiln run --plugins LIB.so (C++: kiln::load_plugin_library), or put "
      "the folder holding them on KILN_PLUGIN_PATH (searched, and loaded from, automatically)";
  if (!found.empty()) {
    hint += "; found here:";
    for (const std::string& f : found) hint += " --plugins " + f;
  } else {
    hint += "; no such file next to the engine or on KILN_PLUGIN_PATH";
  }
  throw Error(source + ": the engine uses plugins that are not registered in this process:" + missing + hint);
}

// ---- embedded plugin libraries -------------------------------------------------------------

namespace {

std::string read_whole_file(const std::string& path, std::vector<uint8_t>& bytes) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::strerror(errno);
  bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return f.bad() ? "read error" : "";
}

// A private directory with one file, removed with everything in it when the guard goes.
struct TempLibrary {
  std::string dir, file;
  ~TempLibrary() {
    if (!file.empty()) ::unlink(file.c_str());
    if (!dir.empty()) ::rmdir(dir.c_str());
  }
};

void load_embedded_library(const EngineData::PluginLibrary& lib, const std::string& source) {
  const std::string where = source + ": embedded plugin library " + quote(lib.path);
  const char* env = std::getenv("TMPDIR");
  TempLibrary tmp;
  std::string dir = std::string(env && *env ? env : "/tmp") + "/kiln-plugins-XXXXXX";
  if (!::mkdtemp(dir.data())) {  // mode 0700
    throw Error(where + ": cannot create a private temporary directory in '" + dir.substr(0, dir.rfind('/')) + "' (" +
                std::strerror(errno) + "); set TMPDIR to a writable directory");
  }
  tmp.dir = dir;
  std::string file = dir + "/libXXXXXX";
  const int fd = ::mkstemp(file.data());  // mode 0600
  if (fd < 0)
    throw Error(where + ": cannot create a temporary file in " + quote(dir) + " (" + std::strerror(errno) + ")");
  tmp.file = file;
  size_t done = 0;
  while (done < lib.bytes.size()) {
    const ssize_t n = ::write(fd, lib.bytes.data() + done, lib.bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw Error(where + ": cannot write " + quote(file) + " (" + why + ")");
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) throw Error(where + ": cannot write " + quote(file) + " (" + std::strerror(errno) + ")");
  // What the loader will map is what the engine holds.
  std::vector<uint8_t> written;
  const std::string err = read_whole_file(file, written);
  const uint64_t want = engine_checksum(lib.bytes.data(), lib.bytes.size());
  if (!err.empty() || written.size() != lib.bytes.size() || engine_checksum(written.data(), written.size()) != want) {
    throw Error(where + ": the copy written to " + quote(file) + " does not match the engine's checksum" +
                (err.empty() ? std::string() : " (" + err + ")"));
  }
  try {
    const auto names = load_plugin_library(file);
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    log(Severity::kInfo, where + " loaded (" + std::to_string(lib.bytes.size()) + " bytes): " + list);
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
}

}  // namespace

void load_embedded_plugins(const EngineData& data, const std::string& source, bool allow) {
  std::vector<const EngineData::PluginLibrary*> needed;
  std::string missing;
  for (const auto& p : data.plugins) {
    if (PluginRegistry::instance().find(p.name, p.version, p.plugin_namespace)) continue;
    auto lib =
        std::find_if(data.plugin_libraries.begin(), data.plugin_libraries.end(),
                     [&](const EngineData::PluginLibrary& l) { return !p.library.empty() && l.path == p.library; });
    if (lib == data.plugin_libraries.end()) continue;  // check_engine_plugins names it
    missing += "\n  - plugin " + quote(p.name) + " version " + quote(p.version) + " namespace '" + p.plugin_namespace +
               "' from library " + quote(p.library) + " (embedded in the engine, " + std::to_string(lib->bytes.size()) +
               " bytes)";
    if (std::find(needed.begin(), needed.end(), &*lib) == needed.end()) needed.push_back(&*lib);
  }
  if (needed.empty()) return;
  if (!allow) {
    throw Error(source + ": the engine uses plugins that are not registered in this process:" + missing +
                "\nthe engine embeds their library; loading it runs code from the engine file, so it needs an explicit "
                "opt-in: kiln run --allow-embedded-plugins (C++: kiln::Runtime::set_allow_embedded_plugins(true)); "
                "or load the library yourself: kiln run --plugins LIB.so (C++: kiln::load_plugin_library)");
  }
  for (const EngineData::PluginLibrary* lib : needed) load_embedded_library(*lib, source);
}

std::vector<EngineData::PluginLibrary> read_plugin_libraries(const std::vector<EngineData::PluginRecord>& plugins) {
  std::vector<EngineData::PluginLibrary> libraries;
  for (const auto& p : plugins) {
    if (p.library.empty()) continue;
    const bool seen = std::any_of(libraries.begin(), libraries.end(),
                                  [&](const EngineData::PluginLibrary& l) { return l.path == p.library; });
    if (seen) continue;
    EngineData::PluginLibrary lib;
    lib.path = p.library;  // the file name, as the record has it
    // The file itself, where this process loaded it from.
    std::string file = PluginRegistry::instance().library_of(p.name, p.version, p.plugin_namespace);
    if (file.empty()) file = p.library;
    const std::string err = read_whole_file(file, lib.bytes);
    if (!err.empty() || lib.bytes.empty()) {
      throw Error("cannot embed plugin library " + quote(file) + " (of plugin " + quote(p.name) +
                  "): " + (err.empty() ? std::string("the file is empty") : err));
    }
    libraries.push_back(std::move(lib));
  }
  return libraries;
}

// ---- shape inference ----------------------------------------------------------------------

void plugin_infer_shapes(ShapeContext& ctx) {
  std::unique_ptr<GuardedPlugin> plugin;
  try {
    plugin = plugin_from_layer(ctx.layer(), DeviceType::kCPU);
  } catch (const Error& e) {
    ctx.fail(e.what());
  }
  std::vector<DataType> in_types;
  std::vector<Dims> in_dims;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) ctx.fail("plugin inputs cannot be omitted (input " + std::to_string(i) + ")");
    in_types.push_back(ctx.input_type(i));
    in_dims.push_back(ctx.input_dims(i));
  }
  std::vector<DataType> out_types;
  try {
    out_types = plugin->output_types(in_types);
  } catch (const Error& e) {
    ctx.fail(e.what());
  }
  if (static_cast<int>(out_types.size()) != ctx.num_outputs()) {
    ctx.fail("output_types() returned " + std::to_string(out_types.size()) + " types for " +
             std::to_string(ctx.num_outputs()) + " outputs");
  }
  ExprBuilder exprs;
  std::vector<DimsExprs> in_exprs;
  for (size_t i = 0; i < in_dims.size(); ++i) {
    // An extent the network fixes (not dynamic in the input tensor's declared dims) is a
    // constant for the plugin, so that output_dims can tell it from a dynamic one.
    const Tensor* t = ctx.layer().input(static_cast<int>(i));
    const Dims declared = t ? t->dims() : Dims{};
    DimsExprs e;
    for (int k = 0; k < in_dims[i].rank(); ++k) {
      const bool fixed =
          declared.rank() == in_dims[i].rank() && declared[k] != kDynamic && declared[k] == in_dims[i][k];
      e.d.push_back(fixed ? exprs.constant(in_dims[i][k]) : exprs.input_dim(static_cast<int>(i), k));
    }
    in_exprs.push_back(e);
  }
  std::vector<DimsExprs> out_exprs;
  for (int o = 0; o < ctx.num_outputs(); ++o) {
    try {
      out_exprs.push_back(plugin->output_dims(o, in_exprs, exprs));
    } catch (const Error& e) {
      ctx.fail(e.what());
    }
  }
  // Host values of shape inputs (ExprBuilder::input_value), where known.
  std::vector<const HostTensor*> values;
  for (int i = 0; i < ctx.num_inputs(); ++i) values.push_back(ctx.input_value(i));
  // The extents the plugin declared equal (require_equal) or broadcastable (broadcast).
  for (const ExprBuilder::Check& c : exprs.checks()) {
    int64_t a = 0, b = 0;
    try {
      a = c.a->evaluate(in_dims, {}, values);
      b = c.b->evaluate(in_dims, {}, values);
    } catch (const std::exception& e) {
      ctx.fail(e.what());
    }
    if (a == b || (c.broadcast && (a == 1 || b == 1))) continue;
    std::string dims_text;
    for (size_t i = 0; i < in_dims.size(); ++i) dims_text += (i ? ", " : "") + in_dims[i].to_string();
    ctx.fail(std::string(c.broadcast ? "inputs that must broadcast do not: " : "extents declared equal differ: ") +
             c.a->to_string() + " = " + std::to_string(a) + (c.broadcast ? " and " : " but ") + c.b->to_string() +
             " = " + std::to_string(b) + " (input dims " + dims_text + ")");
  }
  // Data-dependent extents: the declared size outputs' values once the runtime read them, else
  // their upper bounds.
  std::vector<int64_t> sizes(static_cast<size_t>(ctx.num_outputs()), 0);
  for (const auto& [index, bound] : exprs.size_tensors()) {
    if (index < 0 || index >= ctx.num_outputs()) {
      ctx.fail("size_tensor(" + std::to_string(index) + ", ...) names no output of the plugin (it has " +
               std::to_string(ctx.num_outputs()) + "); the index is that of the plugin's own int64 scalar size output");
    }
    sizes[static_cast<size_t>(index)] = ctx.data_dependent_extent(index, bound);
  }
  for (int o = 0; o < ctx.num_outputs(); ++o) {
    const DimsExprs& out = out_exprs[static_cast<size_t>(o)];
    if (out.rank() > kMaxDims)
      ctx.fail("output_dims(" + std::to_string(o) + ") has rank " + std::to_string(out.rank()));
    Dims dims;
    for (int k = 0; k < out.rank(); ++k) {
      if (!out.d[static_cast<size_t>(k)])
        ctx.fail("output_dims(" + std::to_string(o) + ") has a null expression at axis " + std::to_string(k));
      int64_t v = 0;
      try {
        v = out.d[static_cast<size_t>(k)]->evaluate(in_dims, sizes, values);
      } catch (const std::exception& e) {
        ctx.fail("output_dims(" + std::to_string(o) + ") axis " + std::to_string(k) + ": " + e.what());
      }
      if (v < 0) {
        ctx.fail("output_dims(" + std::to_string(o) + ") axis " + std::to_string(k) + " = " +
                 out.d[static_cast<size_t>(k)]->to_string() + " evaluates to " + std::to_string(v));
      }
      dims.push_back(v);
    }
    ctx.set_output(o, out_types[static_cast<size_t>(o)], dims);
  }
}

namespace {

OpSchema plugin_schema() {
  OpSchema s;
  s.type = kLayerPlugin;
  s.min_inputs = 0;
  s.max_inputs = -1;
  s.num_outputs = -1;
  s.attrs = {
      {"plugin_name", AttrType::kString, std::string(), true, "creator name"},
      {"plugin_version", AttrType::kString, std::string("1"), false, "creator version"},
      {"plugin_namespace", AttrType::kString, std::string(), false, "creator namespace"},
      {"plugin_library", AttrType::kString, std::string(), false, "library the creator came from"},
      {"plugin_tactic", AttrType::kString, std::string(), false, "the plugin's implementation the builder chose"},
      {"plugin_aliased_inputs", AttrType::kInts, std::vector<int64_t>{}, false,
       "per output, the input whose memory it may reuse (Plugin::aliased_input), or -1"},
  };
  s.doc = "A custom layer run by a registered plugin (docs/writing-a-plugin.md).";
  return s;
}
KILN_REGISTER_OP(plugin_schema());

// ---- the kernel that runs plugins -----------------------------------------------------------

std::vector<PluginTensorDesc> plugin_descs(const std::vector<TensorDesc>& descs) {
  std::vector<PluginTensorDesc> r;
  for (const auto& d : descs) r.push_back(PluginTensorDesc{d.type, d.format, d.dims});
  return r;
}

std::vector<DynamicPluginTensorDesc> dynamic_descs(const std::vector<TensorRange>& ranges) {
  std::vector<DynamicPluginTensorDesc> r;
  for (const auto& t : ranges) {
    DynamicPluginTensorDesc d{PluginTensorDesc{t.type, t.format, t.opt}, t.min, t.opt, t.max};
    for (int k = 0; k < d.desc.dims.rank(); ++k) {
      if (t.min[k] != t.max[k]) d.desc.dims[k] = kDynamic;
    }
    r.push_back(std::move(d));
  }
  return r;
}

// The plugin object of one execution context's Plugin layer: cloned and initialize()d once,
// configured once per profile, shared by the kernels the context prepares for each input shape
// (used by one thread at a time, as the context), terminate()d when the last goes.
struct PluginInstance {
  std::unique_ptr<GuardedPlugin> plugin;
  bool initialized = false;
  bool configured = false;  // configure_profile ran: prepare() leaves configure alone
  ~PluginInstance() {
    if (initialized) plugin->terminate();
  }
};

class PluginKernel : public Kernel {
 public:
  PluginKernel(const Layer& layer, DeviceType device) : layer_(layer), device_(device) {
    shared_ = std::make_shared<PluginInstance>();
    shared_->plugin = plugin_from_layer(layer, device);
    shared_->plugin->initialize();
    shared_->initialized = true;
  }
  PluginKernel(const PluginKernel& other) : layer_(other.layer_), device_(other.device_), shared_(other.shared_) {}
  std::unique_ptr<Kernel> another_instance() const override { return std::make_unique<PluginKernel>(*this); }
  // Plugin::configure once per profile, with kDynamic where the profile lets an extent vary.
  void configure_profile(const Layer&, const std::vector<TensorRange>& inputs,
                         const std::vector<TensorRange>& outputs) override {
    shared_->plugin->configure(dynamic_descs(inputs), dynamic_descs(outputs));
    shared_->configured = true;
  }
  void prepare(const Layer&, const std::vector<TensorDesc>& inputs, const std::vector<TensorDesc>& outputs,
               int num_threads) override {
    in_ = plugin_descs(inputs);
    out_ = plugin_descs(outputs);
    if (!shared_->configured) {
      // Run without a profile (host evaluation during shape inference, tools driving a kernel
      // directly): configure for exactly these shapes, min = opt = max.
      std::vector<DynamicPluginTensorDesc> din, dout;
      for (const auto& d : in_) din.push_back(DynamicPluginTensorDesc{d, d.dims, d.dims, d.dims});
      for (const auto& d : out_) dout.push_back(DynamicPluginTensorDesc{d, d.dims, d.dims, d.dims});
      shared_->plugin->configure(din, dout);
    }
    workspace_ = shared_->plugin->workspace_size(in_, out_);
    num_threads_ = num_threads;
    ins_.assign(in_.size(), nullptr);
    outs_.assign(out_.size(), nullptr);
  }
  size_t workspace_size() const override { return workspace_; }
  void execute(const KernelContext& ctx) override {
    ins_.resize(ctx.inputs.size());
    outs_.resize(ctx.outputs.size());
    for (size_t i = 0; i < ctx.inputs.size(); ++i) ins_[i] = ctx.inputs[i].data;
    for (size_t i = 0; i < ctx.outputs.size(); ++i) outs_[i] = ctx.outputs[i].data;
    std::string message;
    PluginExecContext exec{device_, ctx.stream, ctx.num_threads ? ctx.num_threads : num_threads_, &message};
    const PluginStatus status = shared_->plugin->enqueue(in_, out_, ins_.data(), outs_.data(), ctx.workspace, exec);
    if (!status.ok()) {
      throw Error(plugin_label(layer_) + ": enqueue() on " + to_string(device_) + " failed: it " + status.message());
    }
  }

 private:
  const Layer& layer_;
  DeviceType device_;
  std::shared_ptr<PluginInstance> shared_;
  std::vector<PluginTensorDesc> in_, out_;
  std::vector<const void*> ins_;  // reused by execute (no allocation per inference)
  std::vector<void*> outs_;
  size_t workspace_ = 0;
  int num_threads_ = 1;
};

// A plugin is usable on a device when it accepts the layer's input types and formats with its
// declared output types in the formats of the layer's outputs (as the layout pass asks).
bool plugin_supports(const Layer& layer, const std::vector<TensorDesc>& inputs, DeviceType device) {
  const std::unique_ptr<GuardedPlugin> plugin = plugin_from_layer(layer, device);
  std::vector<PluginTensorDesc> io;
  std::vector<DataType> types;
  for (const auto& d : inputs) {
    io.push_back(PluginTensorDesc{d.type, d.format, d.dims});
    types.push_back(d.type);
  }
  const auto out_types = plugin->output_types(types);
  for (size_t i = 0; i < out_types.size(); ++i) {
    const int o = static_cast<int>(i);
    io.push_back(PluginTensorDesc{out_types[i],
                                  o < layer.num_outputs() ? layer.output(o)->format() : TensorFormat::kLinear, Dims{}});
  }
  const int num_outputs = plugin->num_outputs();
  for (int pos = 0; pos < static_cast<int>(io.size()); ++pos) {
    if (!plugin->supports_format_combination(pos, io, static_cast<int>(inputs.size()), num_outputs)) return false;
  }
  return true;
}

KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCPU, kLayerPlugin, "plugin", 0,
    [](const Layer& l, const std::vector<TensorDesc>& in) { return plugin_supports(l, in, DeviceType::kCPU); },
    [](const Layer& l) { return std::make_unique<PluginKernel>(l, DeviceType::kCPU); }});
#ifdef KILN_HAVE_CUDA
KILN_REGISTER_KERNEL(KernelEntry{
    DeviceType::kCUDA, kLayerPlugin, "plugin", 0,
    [](const Layer& l, const std::vector<TensorDesc>& in) { return plugin_supports(l, in, DeviceType::kCUDA); },
    [](const Layer& l) { return std::make_unique<PluginKernel>(l, DeviceType::kCUDA); }});
#endif

}  // namespace

std::vector<EngineData::PluginRecord> collect_plugin_records(const Network& network) {
  std::vector<EngineData::PluginRecord> records;
  for (int i = 0; i < network.num_layers(); ++i) {
    const Layer* l = network.layer(i);
    if (l->type() != kLayerPlugin) continue;
    EngineData::PluginRecord r;
    r.name = l->attrs().get_string("plugin_name");
    r.version = l->attrs().get_string("plugin_version", "1");
    r.plugin_namespace = l->attrs().get_string("plugin_namespace", "");
    // The file name only: where the library lives differs between machines and folders; the
    // runtime finds it by a documented search (engine_plugin_search_text).
    r.library = library_file_name(PluginRegistry::instance().library_of(r.name, r.version, r.plugin_namespace));
    const bool seen = std::any_of(records.begin(), records.end(), [&](const EngineData::PluginRecord& x) {
      return x.name == r.name && x.version == r.version && x.plugin_namespace == r.plugin_namespace;
    });
    if (!seen) records.push_back(r);
  }
  return records;
}

}  // namespace kiln
