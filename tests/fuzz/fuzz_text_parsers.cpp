// Fuzz target: kiln's small parsers of untrusted text and files. The first byte picks one:
//   0: kiln::parse_dims                      ("1x3x224x224", the CLI's --shapes values)
//   1: kiln::parse_plugin_fields             ("k=v,k2=1,2,3", kiln plugin-check --fields), with a
//      built-in plugin creator picked by the second byte
//   2: kiln::load_npy                        (.npy inputs and references of kiln run)
//   3: kiln::load_tensor_pb                  (ONNX TensorProto .pb files, kiln run / conformance)
// the rest of the input is the text or the file. Every kiln::Error is an accepted answer.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor_io.h"
#include "fuzz_common.h"
#include "kiln/error.h"
#include "kiln/plugin.h"
#include "kiln/types.h"
#include "plugins/plugin_check.h"

namespace {

// The readers take a path: the bytes go to a per-process temporary file.
std::string write_temp(const uint8_t* data, size_t size, const char* extension) {
  const std::string path = "/tmp/kiln_fuzz_" + std::to_string(::getpid()) + extension;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return {};
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln_fuzz::quiet_logger();
  if (size < 1) return 0;
  const uint8_t which = data[0] % 4;
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
    }
  } catch (const kiln::Error&) {
  }
  return 0;
}
