// `kiln plugin`: `kiln plugin list` shows the registered plugin creators (built in and from
// --plugins libraries) with their fields; `kiln plugin check` runs the conformance suite
// (src/plugins/plugin_check.h) on one plugin and prints its pass/fail table. The suite itself is
// library code; this file only parses flags and prints.
#include <CLI/CLI.hpp>

#include <iomanip>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "kiln/error.h"
#include "kiln/plugin.h"
#include "plugins/plugin_calls.h"
#include "plugins/plugin_check.h"

namespace kiln::cli {
namespace {

struct PluginListOptions {
  std::vector<std::string> plugins;
};

struct PluginCheckCliOptions {
  std::vector<std::string> plugins;
  std::string name;
  std::string version = "1";
  std::string plugin_namespace;
  std::string device = "cpu";
  std::vector<std::string> fields;
  int inputs = 0;
};

std::string default_text(const PluginFieldSpec& spec) {
  if (spec.required) return "required";
  PluginFieldCollection one;
  one.add(spec.default_value);
  const std::string s = plugin_fields_to_string(one);
  const size_t eq = s.find('=');
  return "default " + (eq == std::string::npos ? s : s.substr(eq + 1));
}

int run_list(const PluginListOptions& o) {
  load_plugins(o.plugins);
  const std::vector<PluginInfo> all = PluginRegistry::instance().list();
  if (all.empty()) {
    std::cout << "no plugins registered (load a library with --plugins LIB.so)\n";
    return kExitOk;
  }
  for (const PluginInfo& p : all) {
    std::cout << p.name << "  version '" << p.version << "'  namespace '" << p.plugin_namespace << "'  from "
              << (p.library.empty() ? "kiln (built in)" : p.library) << "\n";
    const PluginCreator* creator = PluginRegistry::instance().find(p.name, p.version, p.plugin_namespace);
    if (creator == nullptr) continue;
    for (const PluginFieldSpec& f : creator_field_schema(*creator, "kiln plugin list")) {
      std::cout << "    " << f.name << ": " << to_string(f.type)
                << (f.count == 1  ? ""
                    : f.count < 0 ? "[]"
                                  : "[" + std::to_string(f.count) + "]")
                << ", " << default_text(f) << (f.description.empty() ? "" : " -- " + f.description) << "\n";
    }
  }
  return kExitOk;
}

int run_check(const PluginCheckCliOptions& o) {
  load_plugins(o.plugins);
  PluginCheckOptions options;
  options.name = o.name;
  options.version = o.version;
  options.plugin_namespace = o.plugin_namespace;
  options.device = parse_device_type(o.device);
  options.num_inputs = o.inputs;
  if (!o.fields.empty()) {
    // An unknown plugin is reported by check_plugin below, with the registered alternatives.
    const PluginCreator* creator = PluginRegistry::instance().find(o.name, o.version, o.plugin_namespace);
    for (const std::string& text : o.fields) {
      if (creator == nullptr) break;
      PluginFieldCollection parsed;
      try {
        parsed = parse_plugin_fields(text, *creator);
      } catch (const Error& e) {
        throw UsageError(e.what());  // malformed or unknown fields: a usage error (exit 64)
      }
      for (const PluginField& f : parsed.all()) options.fields.add(f);
    }
  }
  const PluginCheckReport report = check_plugin(options);
  print_plugin_check_report(report, std::cout);
  return report.passed() ? kExitOk : kExitMismatch;
}

}  // namespace

void setup_plugin_command(CLI::App& parent, std::function<int()>& run) {
  CLI::App* sub = parent.add_subcommand(
      "plugin",
      "List the registered plugins, or check that a plugin answers the builder's questions consistently with "
      "what its kernel does (docs/writing-a-plugin.md).");
  sub->require_subcommand(1);

  auto list = std::make_shared<PluginListOptions>();
  CLI::App* list_cmd = sub->add_subcommand("list", "List the registered plugin creators and their fields.");
  list_cmd->add_option("--plugins", list->plugins, "Plugin library to load first (repeatable)")->type_name("LIB.so");
  list_cmd->footer("Example:\n  kiln plugin list --plugins build/libkiln_example_plugins.so");
  list_cmd->callback([&run, list] { run = [list] { return run_list(*list); }; });

  auto check = std::make_shared<PluginCheckCliOptions>();
  CLI::App* check_cmd = sub->add_subcommand(
      "check",
      "Run the plugin conformance suite: output dims against the elements the kernel writes (poisoned outputs "
      "inside guard bytes, shapes of rank 1-5 with batch 1 and > 1 and odd sizes), dynamic dims staying symbolic, "
      "every claimed type/format combination against the plugin's own float32 CPU result (max/mean relative "
      "error; tolerance 1e-4 float32, 1e-2 float16), the fields and bytes serialization round trips, clone(), "
      "scratch beyond workspace_size(), CUDA graph capture (default-stream launches, device syncs), NaN/Inf and "
      "run-to-run determinism. Prints one row per check; exits 3 when a check FAILs.");
  check_cmd->add_option("--plugins", check->plugins, "Plugin library to load first (repeatable)")->type_name("LIB.so");
  check_cmd->add_option("--name", check->name, "Plugin (creator) name")->required()->type_name("NAME");
  check_cmd->add_option("--version", check->version, "Plugin version")->capture_default_str();
  check_cmd->add_option("--namespace", check->plugin_namespace, "Plugin namespace (default: none)")->type_name("NS");
  check_cmd->add_option("--device", check->device, "Device whose kernels are checked: cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}, CLI::ignore_case))
      ->capture_default_str();
  check_cmd
      ->add_option("--fields", check->fields,
                   "Field values instead of the defaults: NAME=VALUE[,NAME=VALUE...]; a list as NAME=1,2,3")
      ->type_name("K=V,...");
  check_cmd
      ->add_option("--inputs", check->inputs,
                   "Number of plugin inputs (default: found by asking the plugin with 1, 2, ... inputs "
                   "of one type until it accepts a combination); give it for multi-input plugins whose "
                   "inputs must differ in type or rank")
      ->check(CLI::Range(1, 16));
  check_cmd->footer(
      "Examples:\n"
      "  kiln plugin check --name TemperatureSwish --fields temperature=2.5\n"
      "  kiln plugin check --plugins ./libkiln_example_plugins.so --name ScaledTanh --fields alpha=2,beta=0.5 "
      "--device cuda");
  check_cmd->callback([&run, check] { run = [check] { return run_check(*check); }; });
}

}  // namespace kiln::cli
