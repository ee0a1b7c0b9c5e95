// Entry point of the `kiln` command: registers the subcommands from the table below, parses
// the command line with CLI11, runs the chosen subcommand and maps every failure to ONE line
// "kiln: error: ..." on stderr and a non-zero exit code (see common.h), never a crash trace.
#include <CLI/CLI.hpp>

#include <exception>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "common.h"
#include "kiln/error.h"
#include "kiln/types.h"

namespace kiln::cli {

void setup_conformance_command(CLI::App& parent, std::function<int()>& run);  // cmd_conformance.cpp

namespace {

void setup_version_command(CLI::App& parent, std::function<int()>& run);

// Every subcommand, in the order `kiln --help` lists them.
const Command kCommands[] = {
    {"build", setup_build_command},
    {"run", setup_run_command},
    {"bench", setup_bench_command},
    {"inspect", setup_inspect_command},
    {"plugin", setup_plugin_command},
    {"debug", setup_debug_command},
    {"conformance", setup_conformance_command},
    {"version", setup_version_command},
};

void setup_version_command(CLI::App& parent, std::function<int()>& run) {
  CLI::App* sub = parent.add_subcommand("version", "Print kiln's version and the backends built in.");
  sub->footer("Example:\n  kiln version");
  sub->callback([&run] {
    run = [] {
      std::cout << "kiln " << kiln::version() << "\n";
#ifdef KILN_HAVE_ONEDNN
      std::cout << "cpu backend: yes (oneDNN kernels: yes)\n";
#else
      std::cout << "cpu backend: yes (oneDNN kernels: no)\n";
#endif
#ifdef KILN_HAVE_CUDA
      std::cout << "cuda backend: built in\n";
#else
      std::cout << "cuda backend: not built in\n";
#endif
      return kExitOk;
    };
  });
}

// Lists each subcommand in `kiln --help` by the first sentence of its description; the whole
// paragraph shows in the subcommand's own --help.
class SummaryFormatter : public CLI::Formatter {
 public:
  std::string make_subcommand(const CLI::App* sub) const override {
    std::string text = sub->get_description();
    if (size_t end = text.find(". "); end != std::string::npos) text = text.substr(0, end + 1);
    std::stringstream out;
    CLI::detail::format_help(out, sub->get_display_name(true), text, column_width_);
    return out.str();
  }
};

// The subcommand the user was in when parsing failed, for the "see --help" hint.
std::string failing_command(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands({}))
    if (sub->parsed()) return "kiln " + sub->get_name();
  return "kiln";
}

int run_main(int argc, char** argv) {
  CLI::App app{
      "kiln builds optimized inference engines from ONNX models and runs them. `kiln build` turns a "
      "model into an engine file, `kiln run` executes an engine (or a model directly) on input files and "
      "reports latency and accuracy, `kiln inspect` shows what an engine or a model contains.",
      "kiln"};
  app.set_version_flag("--version", std::string("kiln ") + kiln::version(), "Print the version and exit");
  app.require_subcommand(1);
  auto formatter = std::make_shared<SummaryFormatter>();
  formatter->column_width(30);
  app.formatter(formatter);

  std::function<int()> action;
  for (const Command& command : kCommands) command.setup(app, action);
  // Set after the subcommands exist so that they do not inherit it.
  app.footer(
      "Examples:\n"
      "  kiln build --onnx model.onnx --save-engine model.kiln --shapes input:1x3x224x224\n"
      "  kiln run --engine model.kiln --inputs-dir test_data_set_0 --compare-dir test_data_set_0\n"
      "  kiln inspect --onnx model.onnx\n"
      "Run 'kiln <command> --help' for a command's flags.");

  // CLI11 reports an unknown command as "a subcommand is required"; say what is wrong instead.
  std::string known;
  bool is_command = false;
  for (const Command& command : kCommands) {
    known += (known.empty() ? "" : ", ") + std::string(command.name);
    is_command = is_command || (argc > 1 && command.name == std::string(argv[1]));
  }
  if (argc > 1 && argv[1][0] != '-' && !is_command) {
    std::cerr << "kiln: error: unknown command '" << argv[1] << "'; the commands are " << known
              << " (see 'kiln --help')\n";
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "kiln: error: " << e.what() << " (see '" << failing_command(app) << " --help')\n";
    return kExitUsage;
  }
  if (!action) {
    std::cerr << "kiln: error: no command given (see 'kiln --help')\n";
    return kExitUsage;
  }
  try {
    return action();
  } catch (const UsageError& e) {
    std::cout.flush();
    std::cerr << "kiln: error: " << e.what() << " (see '" << failing_command(app) << " --help')\n";
    return kExitUsage;
  }
}

}  // namespace
}  // namespace kiln::cli

int main(int argc, char** argv) {
  // Every error leaves through here as one line; kiln::Error messages already say what failed
  // and where, so nothing is added but the prefix.
  // What was printed before a failure comes first, also when stdout is a pipe.
  try {
    return kiln::cli::run_main(argc, argv);
  } catch (const std::bad_alloc&) {
    std::cout.flush();
    std::cerr << "kiln: error: out of memory\n";
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "kiln: error: " << e.what() << "\n";
  } catch (...) {
    std::cout.flush();
    std::cerr << "kiln: error: unexpected failure (unknown exception)\n";
  }
  return kiln::cli::kExitError;
}
