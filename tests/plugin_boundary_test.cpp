// The plugin library boundary (include/kiln/plugin.h, interface version 4): kiln calls plugins
// and creators only through the noexcept entry points of the library that registered them, which
// turn anything a method throws (a std::exception, a kiln::Error, an int) into a PluginStatus;
// kiln then reports the failure naming the layer, the method and the message, and keeps working.
// A library built here from source proves the entry points (and their catch clauses) are the
// library's own code; its extern "C" kiln_plugin_interface_version is checked when it is loaded.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <unistd.h>

#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "plugins/plugin_calls.h"
#include "plugins/plugin_layer.h"

namespace kiln {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Throws `kind` ("std", "kiln", "int") from every method.
class AlwaysThrows : public Plugin {
 public:
  explicit AlwaysThrows(std::string kind) : kind_(std::move(kind)) {}
  [[noreturn]] void raise(const char* method) const {
    if (kind_ == "kiln") throw Error(std::string("kiln error in ") + method);
    if (kind_ == "int") throw 42;
    throw std::runtime_error(std::string("boom in ") + method);
  }
  std::string type() const override { raise("type"); }
  int num_outputs() const override { raise("num_outputs"); }
  std::vector<DataType> output_types(const std::vector<DataType>&) const override { raise("output_types"); }
  DimsExprs output_dims(int, const std::vector<DimsExprs>&, ExprBuilder&) const override { raise("output_dims"); }
  bool supports_format_combination(int, const std::vector<PluginTensorDesc>&, int, int) const override {
    raise("supports_format_combination");
  }
  void configure(const std::vector<DynamicPluginTensorDesc>&, const std::vector<DynamicPluginTensorDesc>&) override {
    raise("configure");
  }
  size_t workspace_size(const std::vector<PluginTensorDesc>&, const std::vector<PluginTensorDesc>&) const override {
    raise("workspace_size");
  }
  int enqueue(const std::vector<PluginTensorDesc>&, const std::vector<PluginTensorDesc>&, const void* const*,
              void* const*, void*, const PluginExecContext&) override {
    raise("enqueue");
  }
  std::unique_ptr<Plugin> clone() const override { raise("clone"); }
  int initialize() override { raise("initialize"); }
  PluginFieldCollection fields() const override { raise("fields"); }

 private:
  std::string kind_;
};

TEST(PluginBoundary, EntryPointsAreNoexceptAndTurnEveryExceptionIntoAStatus) {
  const detail::PluginEntryPoints& entry = detail::in_process_entry_points();
  AlwaysThrows* null_plugin = nullptr;
  static_assert(noexcept(entry.enqueue(*null_plugin, {}, {}, nullptr, nullptr, nullptr, PluginExecContext{})));
  static_assert(noexcept(entry.output_dims(*null_plugin, 0, {}, std::declval<ExprBuilder&>(), nullptr)));
  static_assert(std::is_same_v<decltype(entry.initialize(*null_plugin)), PluginStatus>);
  for (const std::string kind : {"std", "kiln", "int"}) {
    SCOPED_TRACE(kind);
    AlwaysThrows p(kind);
    const std::string expected = kind == "std"    ? "threw: boom in "
                                 : kind == "kiln" ? "threw: kiln error in "
                                                  : "threw an exception that is not a std::exception";
    const auto check = [&](const PluginStatus& s, const std::string& method) {
      EXPECT_FALSE(s.ok()) << method;
      EXPECT_TRUE(has(s.message(), expected)) << method << ": " << s.message();
      if (kind != "int") {
        EXPECT_TRUE(has(s.message(), method)) << s.message();
      }
    };
    int n = -5;
    check(entry.num_outputs(p, &n), "num_outputs");
    EXPECT_EQ(n, -5) << "out-parameters are not written on failure";
    std::string t, v, ns;
    check(entry.identity(p, &t, &v, &ns), "type");
    std::vector<DataType> types;
    check(entry.output_types(p, {DataType::kFloat32}, &types), "output_types");
    ExprBuilder exprs;
    DimsExprs dims;
    check(entry.output_dims(p, 0, {}, exprs, &dims), "output_dims");
    bool yes = true;
    check(entry.supports_format_combination(p, 0, {}, 1, 1, &yes), "supports_format_combination");
    check(entry.configure(p, {}, {}), "configure");
    size_t ws = 7;
    check(entry.workspace_size(p, {}, {}, &ws), "workspace_size");
    EXPECT_EQ(ws, 7u);
    check(entry.enqueue(p, {}, {}, nullptr, nullptr, nullptr, PluginExecContext{}), "enqueue");
    std::unique_ptr<Plugin> copy;
    check(entry.clone(p, &copy), "clone");
    EXPECT_EQ(copy, nullptr);
    check(entry.initialize(p), "initialize");
    PluginFieldCollection fields;
    check(entry.fields(p, &fields), "fields");
  }
}

TEST(PluginBoundary, NonZeroCodesBecomeFailuresWithTheMessage) {
  struct Codes : AlwaysThrows {
    Codes() : AlwaysThrows("std") {}
    int initialize() override { return 3; }
    int enqueue(const std::vector<PluginTensorDesc>&, const std::vector<PluginTensorDesc>&, const void* const*,
                void* const*, void*, const PluginExecContext& exec) override {
      return exec.fail("indices must be sorted", 9);
    }
  } p;
  const detail::PluginEntryPoints& entry = detail::in_process_entry_points();
  EXPECT_EQ(entry.initialize(p).message(), "returned 3");
  std::string message;
  PluginExecContext exec;
  exec.message = &message;
  EXPECT_EQ(entry.enqueue(p, {}, {}, nullptr, nullptr, nullptr, exec).message(),
            "returned code 9: indices must be sorted");
}

// ---- a library built from source ---------------------------------------------------------------

// One plugin, y = x (float32, CPU), whose method named by the string field "throw_in" throws
// (std::runtime_error, or an int when the field "kind" is "int").
constexpr const char* kThrowingLibrary = R"(
#include <cstring>
#include <stdexcept>
#include "kiln/plugin.h"
namespace {
struct Thrower : kiln::Plugin {
  std::string where, kind;
  Thrower(std::string w, std::string k) : where(std::move(w)), kind(std::move(k)) {}
  void maybe(const char* method) const {
    if (where != method) return;
    if (kind == "int") throw 7;
    throw std::runtime_error(std::string("boom from ") + method);
  }
  std::string type() const override { return "BoundaryThrower"; }
  int num_outputs() const override { maybe("num_outputs"); return 1; }
  std::vector<kiln::DataType> output_types(const std::vector<kiln::DataType>& in) const override {
    maybe("output_types");
    return {in.at(0)};
  }
  kiln::DimsExprs output_dims(int, const std::vector<kiln::DimsExprs>& in, kiln::ExprBuilder&) const override {
    maybe("output_dims");
    return in.at(0);
  }
  bool supports_format_combination(int pos, const std::vector<kiln::PluginTensorDesc>& io, int, int) const override {
    maybe("supports_format_combination");
    return io[pos].type == kiln::DataType::kFloat32 && io[pos].format == kiln::TensorFormat::kLinear;
  }
  void configure(const std::vector<kiln::DynamicPluginTensorDesc>&, const std::vector<kiln::DynamicPluginTensorDesc>&) override {
    maybe("configure");
  }
  size_t workspace_size(const std::vector<kiln::PluginTensorDesc>&, const std::vector<kiln::PluginTensorDesc>&) const override {
    maybe("workspace_size");
    return 0;
  }
  int enqueue(const std::vector<kiln::PluginTensorDesc>& in, const std::vector<kiln::PluginTensorDesc>&,
              const void* const* x, void* const* y, void*, const kiln::PluginExecContext&) override {
    maybe("enqueue");
    int64_t n = 1;
    for (int k = 0; k < in[0].dims.rank(); ++k) n *= in[0].dims[k];
    std::memcpy(y[0], x[0], static_cast<size_t>(n) * sizeof(float));
    return 0;
  }
  std::unique_ptr<kiln::Plugin> clone() const override {
    maybe("clone");
    return std::make_unique<Thrower>(where, kind);
  }
  int initialize() override { maybe("initialize"); return 0; }
  kiln::PluginFieldCollection fields() const override {
    maybe("fields");
    kiln::PluginFieldCollection f;
    f.add(kiln::PluginField::string("throw_in", where));
    f.add(kiln::PluginField::string("kind", kind));
    return f;
  }
};
struct BoundaryThrowerCreator : kiln::PluginCreator {
  std::string name() const override { return "BoundaryThrower"; }
  std::vector<kiln::PluginFieldSpec> field_schema() const override {
    kiln::PluginFieldSpec a{"throw_in", kiln::PluginFieldType::kString, 1, false, kiln::PluginField::string("", ""), ""};
    kiln::PluginFieldSpec b{"kind", kiln::PluginFieldType::kString, 1, false, kiln::PluginField::string("", "std"), ""};
    return {a, b};
  }
  std::unique_ptr<kiln::Plugin> create(const std::string&, const kiln::PluginFieldCollection& f) const override {
    auto p = std::make_unique<Thrower>(f.get_string("throw_in"), f.get_string("kind"));
    p->maybe("create");
    return p;
  }
};
}  // namespace
KILN_REGISTER_PLUGIN(BoundaryThrowerCreator);
)";

class BoundaryLibrary : public ::testing::Test {
 protected:
  static std::string dir() { return ::testing::TempDir() + "/kiln_boundary_" + std::to_string(::getpid()); }
  // Compiles `sources` (file name -> text) into dir()/name; "" when there is no compiler.
  static std::string compile(const std::string& name, const std::vector<std::pair<std::string, std::string>>& sources) {
    const char* cxx_env = std::getenv("CXX");
    const std::string cxx = cxx_env && *cxx_env ? cxx_env : "c++";
    std::filesystem::create_directories(dir());
    std::string files;
    for (const auto& [file, text] : sources) {
      std::ofstream(dir() + "/" + file) << text;
      files += " " + dir() + "/" + file;
    }
    const std::string lib = dir() + "/" + name;
    const std::string cmd = cxx + " -std=c++20 -O1 -fPIC -shared -I" + std::string(KILN_SOURCE_DIR) + "/include" +
                            files + " -o " + lib + " > " + dir() + "/cc.log 2>&1";
    return std::system(cmd.c_str()) == 0 ? lib : "";
  }
};

// Runs a one-layer network through the plugin with the given fields: adds the layer, builds,
// creates a context and runs it; returns the first error ("" when everything worked).
std::string run_through(const std::string& throw_in, const std::string& kind) {
  const PluginCreator* creator = PluginRegistry::instance().find("BoundaryThrower");
  if (!creator) return "not registered";
  return error_of([&] {
    Network net;
    Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2, 3});
    PluginFieldCollection f;
    f.add(PluginField::string("throw_in", throw_in));
    f.add(PluginField::string("kind", kind));
    Layer* l = add_plugin_layer(net, {x}, *creator, f, "thrower_" + throw_in, "layer 'thrower_" + throw_in + "'");
    l->output(0)->set_name("y");
    net.mark_output(l->output(0));
    BuilderConfig config;
    const auto bytes = Builder().build_serialized(net, config);
    auto engine = Runtime().deserialize(bytes.data(), bytes.size(), "boundary test");
    auto ctx = engine->create_execution_context();
    std::vector<float> xv{1, 2, 3, 4, 5, 6}, y(6, 0.0f);
    ctx->set_tensor_address("x", xv.data());
    ctx->set_tensor_address("y", y.data());
    ctx->execute();
    if (y != xv) throw std::runtime_error("wrong result");
  });
}

TEST_F(BoundaryLibrary, ALibrarysExceptionsAreCaughtInTheLibraryAndNameTheLayerAndMethod) {
  const std::string lib = compile("libboundary_thrower.so", {{"thrower.cpp", kThrowingLibrary}});
  if (lib.empty()) GTEST_SKIP() << "no C++ compiler to build the test library";
  ASSERT_EQ(load_plugin_library(lib), std::vector<std::string>{"BoundaryThrower v1"});
  // The entry points, with their catch clauses, are code of the library itself (local symbols).
  const std::string nm_out = dir() + "/nm.txt";
  if (std::system(("nm -C " + lib + " > " + nm_out + " 2>/dev/null").c_str()) == 0) {
    std::ifstream in(nm_out);
    std::string line;
    int local_entry_points = 0;
    while (std::getline(in, line)) {
      if (has(line, "LibraryEntryPoints<") && has(line, "::enqueue(") && has(line, " t ")) ++local_entry_points;
    }
    EXPECT_GE(local_entry_points, 1) << "LibraryEntryPoints<...>::enqueue is not a local function of " << lib;
  }
  EXPECT_EQ(run_through("", "std"), "") << "the plugin works when nothing throws";
  for (const std::string method : {"create", "output_types", "output_dims", "supports_format_combination", "configure",
                                   "workspace_size", "initialize", "enqueue"}) {
    for (const std::string kind : {"std", "int"}) {
      SCOPED_TRACE(method + " " + kind);
      const std::string err = run_through(method, kind);
      EXPECT_TRUE(has(err, "thrower_" + method)) << err;
      EXPECT_TRUE(has(err, method + "(")) << err;
      EXPECT_TRUE(
          has(err, kind == "int" ? "threw an exception that is not a std::exception" : "threw: boom from " + method))
          << err;
    }
  }
  // The public add_plugin keeps a clone, made through the library too.
  const PluginCreator* creator = PluginRegistry::instance().find("BoundaryThrower");
  ASSERT_NE(creator, nullptr);
  PluginFieldCollection f;
  f.add(PluginField::string("throw_in", "clone"));
  f.add(PluginField::string("kind", "std"));
  std::unique_ptr<Plugin> object = creator->create("c", PluginRegistry::instance().resolve_fields(*creator, f, "test"));
  // The program called the creator itself, so the object does not know its library's entry
  // points; kiln finds them through the registry by the plugin's identity.
  EXPECT_EQ(object->entry_points(), nullptr);
  EXPECT_NE(&entry_points_of(*object), &detail::in_process_entry_points());
  Network net;
  Tensor* x = net.add_input("x", DataType::kFloat32, Dims{2, 3});
  const std::string err = error_of([&] { add_plugin(net, {x}, *object, "cloned_layer"); });
  EXPECT_TRUE(has(err, "cloned_layer") && has(err, "clone() threw: boom from clone")) << err;
}

TEST_F(BoundaryLibrary, ALibraryDeclaringAnotherInterfaceVersionIsRefused) {
  // A library whose registrars are current but whose kiln_plugin_interface_version says 99 (as a
  // library built against a future header would): refused, naming both versions and the file.
  const std::string registrar = std::string(kThrowingLibrary);
  std::string renamed = registrar;
  for (const std::string from : {"BoundaryThrowerCreator", "\"BoundaryThrower\""}) {
    const std::string to = from[0] == '"' ? "\"BoundaryVersioned\"" : "BoundaryVersionedCreator";
    for (size_t at = renamed.find(from); at != std::string::npos; at = renamed.find(from, at + to.size())) {
      renamed.replace(at, from.size(), to);
    }
  }
  const std::string lib = compile("libboundary_versioned.so", {{"versioned.cpp", renamed},
                                                               {"version.cpp",
                                                                "#include <cstdint>\nextern \"C\" const uint32_t "
                                                                "kiln_plugin_interface_version = 99;\n"}});
  if (lib.empty()) GTEST_SKIP() << "no C++ compiler to build the test library";
  const std::string err = error_of([&] { (void)load_plugin_library(lib); });
  EXPECT_TRUE(has(err, "libboundary_versioned.so")) << err;
  EXPECT_TRUE(has(err, "interface version 99")) << err;
  EXPECT_TRUE(has(err, "this kiln has version " + std::to_string(kPluginInterfaceVersion))) << err;
  EXPECT_EQ(PluginRegistry::instance().find("BoundaryVersioned"), nullptr) << "its creators are not left registered";
}

}  // namespace
}  // namespace kiln
