// Fuzz target: kiln's small parsers of untrusted text and files. The first byte picks one:
//   0: kiln::parse_dims                      ("1x3x224x224", the CLI's --shapes values)
//   1: kiln::parse_plugin_fields             ("k=v,k2=1,2,3", kiln plugin-check --fields), with a
//      built-in plugin creator picked by the second byte
//   2: kiln::load_npy                        (.npy inputs and references of kiln run)
//   3: kiln::load_tensor_pb                  (ONNX TensorProto .pb files, kiln run / conformance)
//   4: the CLI's shape flags (tools/common.cpp): the text's lines go in turn to --shapes,
//      --min-shapes, --opt-shapes and --max-shapes (parse_shape_list, parse_shape_dims,
//      check_shape_flags), then make_profile checks them against a small network with dynamic,
//      static and "input:0"-style inputs
//   5: the CLI's --layer-precisions (apply_layer_precisions, glob_match) on a small network of
//      named layers: the text split at NUL bytes gives the flag's values; a value starting with
//      '@' names a file, whose contents are the rest of that value
//   6: the CLI's byte sizes (parse_byte_size: --memory-limit, --workspace-limit) and, split at the
//      first NUL, glob_match(pattern, name)
// the rest of the input is the text or the file. Every kiln::Error is an accepted answer.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "common.h"

#include "core/tensor_io.h"
#include "fuzz_common.h"
#include "kiln/error.h"
#include "kiln/network.h"
#include "kiln/plugin.h"
#include "kiln/types.h"
#include "plugins/plugin_check.h"

namespace {

// The readers take a path: the bytes go to a per-process temporary file.
std::string write_temp(const uint8_t* data, size_t size, const std::string& extension) {
  const std::string path = "/tmp/kiln_fuzz_" + std::to_string(::getpid()) + extension;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return {};
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  return path;
}

std::vector<std::string> split_at(std::string_view text, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t pos = text.find(sep, start);
    parts.emplace_back(text.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
    if (pos == std::string_view::npos) return parts;
    start = pos + 1;
  }
}

// The inputs the shape flags name: dynamic, static, and a name with ':' in it.
std::unique_ptr<kiln::Network> shapes_network() {
  auto network = std::make_unique<kiln::Network>();
  kiln::Tensor* images = network->add_input("images", kiln::DataType::kFloat32,
                                            kiln::Dims{kiln::kDynamic, 3, kiln::kDynamic, kiln::kDynamic});
  kiln::Tensor* ids = network->add_input("input:0", kiln::DataType::kInt64, kiln::Dims{kiln::kDynamic});
  kiln::Tensor* mask = network->add_input("mask", kiln::DataType::kFloat32, kiln::Dims{1, 4});
  for (kiln::Tensor* t : {images, ids, mask}) network->mark_output(t);
  return network;
}

// Layers named the way ONNX exports name them, and a few odd names.
std::unique_ptr<kiln::Network> precisions_network() {
  auto network = std::make_unique<kiln::Network>();
  kiln::Tensor* x = network->add_input("x", kiln::DataType::kFloat32, kiln::Dims{1, 4});
  static const char* const kNames[] = {"/encoder/conv1/Conv", "/encoder/Relu", "/decoder/Add_1", "head:0", "x*y", "a"};
  for (const char* name : kNames) {
    kiln::Layer* layer = network->add_activation(x, kiln::ActivationType::kRelu);
    layer->set_name(name);
    x = layer->output(0);
  }
  network->mark_output(x);
  return network;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln_fuzz::quiet_logger();
  if (size < 1) return 0;
  const uint8_t which = data[0] % 7;
  ++data;
  --size;
  try {
    switch (which) {
      case 0: {
        (void)kiln::parse_dims(std::string_view(reinterpret_cast<const char*>(data), size));
        break;
      }
      case 1: {
        if (size < 1) return 0;
        std::vector<kiln::PluginInfo> builtins;
        for (const kiln::PluginInfo& p : kiln::PluginRegistry::instance().list())
          if (p.library.empty()) builtins.push_back(p);
        if (builtins.empty()) return 0;
        const kiln::PluginInfo& info = builtins[data[0] % builtins.size()];
        const kiln::PluginCreator* creator =
            kiln::PluginRegistry::instance().find(info.name, info.version, info.plugin_namespace);
        if (!creator) return 0;
        (void)kiln::parse_plugin_fields(std::string(reinterpret_cast<const char*>(data) + 1, size - 1), *creator);
        break;
      }
      case 2: {
        const std::string path = write_temp(data, size, ".npy");
        if (!path.empty()) (void)kiln::load_npy(path);
        break;
      }
      case 3: {
        const std::string path = write_temp(data, size, ".pb");
        if (!path.empty()) (void)kiln::load_tensor_pb(path);
        break;
      }
      case 4: {
        kiln::cli::ShapeFlags flags;
        std::vector<std::string>* lists[] = {&flags.shapes, &flags.min_shapes, &flags.opt_shapes, &flags.max_shapes};
        size_t line = 0;
        for (std::string& value : split_at(std::string_view(reinterpret_cast<const char*>(data), size), '\n'))
          lists[line++ % 4]->push_back(std::move(value));
        kiln::cli::check_shape_flags(flags);
        static const std::unique_ptr<kiln::Network> network = shapes_network();
        std::ostringstream notices;
        (void)kiln::cli::make_profile(*network, flags, notices);
        break;
      }
      case 5: {
        std::vector<std::string> specs = split_at(std::string_view(reinterpret_cast<const char*>(data), size), '\0');
        int files = 0;
        for (std::string& spec : specs)
          if (!spec.empty() && spec[0] == '@') {
            if (files == 4) return 0;  // a few files at most
            const std::string path = write_temp(reinterpret_cast<const uint8_t*>(spec.data()) + 1, spec.size() - 1,
                                                "_" + std::to_string(files++) + ".txt");
            if (path.empty()) return 0;
            spec = "@" + path;
          }
        const std::unique_ptr<kiln::Network> network = precisions_network();
        (void)kiln::cli::apply_layer_precisions(*network, specs);
        break;
      }
      case 6: {
        const std::string_view text(reinterpret_cast<const char*>(data), size);
        (void)kiln::cli::parse_byte_size(text, "--memory-limit");
        break;
      }
    }
  } catch (const kiln::Error&) {}
  if (which == 6) {  // glob_match never throws
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const size_t nul = text.find('\0');
    if (nul != std::string_view::npos) (void)kiln::cli::glob_match(text.substr(0, nul), text.substr(nul + 1));
  }
  return 0;
}
