// The body of the ONNX fuzz targets (onnx_import: byte-level mutation; onnx_structured: the
// structure-aware mutator of fuzz_onnx_structured.cpp): model bytes -> OnnxParser::parse_bytes ->
// (when it parses) a CPU build with a small activation-memory limit. Every kiln::Error is an
// accepted answer; crashes, hangs, sanitizer reports and other exceptions (std::bad_alloc,
// std::out_of_range, ...) are findings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "kiln/builder.h"
#include "kiln/error.h"
#include "kiln/network.h"
#include "kiln/onnx_parser.h"

namespace kiln_fuzz {

inline int import_and_build(const uint8_t* data, size_t size) {
  kiln_fuzz::quiet_logger();
  kiln::Network network;
  try {
    kiln::OnnxParser parser(network);
    // External data resolves against a folder that does not exist, so a model cannot make the
    // fuzzer read files of this machine.
    parser.parse_bytes(data, size, "/nonexistent-kiln-fuzz", "<fuzz>");
  } catch (const kiln::Error&) {
    return 0;
  }
  try {
    kiln::BuilderConfig config;
    config.device = kiln::DeviceType::kCPU;
    config.memory_limit = 64ull << 20;  // 64 MiB of activations
    config.num_threads = 1;
    config.time_tactics = false;
    // Dynamic inputs: one profile with every dynamic extent at 1..4 (opt 2).
    kiln::OptimizationProfile profile;
    bool dynamic = false;
    for (int i = 0; i < network.num_inputs(); ++i) {
      const kiln::Tensor* in = network.input(i);
      if (!in->dims().is_dynamic()) continue;
      dynamic = true;
      kiln::Dims lo = in->dims(), opt = in->dims(), hi = in->dims();
      for (int d = 0; d < lo.rank(); ++d) {
        if (lo[d] != kiln::kDynamic) continue;
        lo[d] = 1;
        opt[d] = 2;
        hi[d] = 4;
      }
      profile.set_dimensions(in->name(), lo, opt, hi);
    }
    if (dynamic) config.profiles.push_back(profile);
    kiln::Builder builder;
    const std::vector<uint8_t> engine = builder.build_serialized(network, config);
    // Seeding the engine_load corpus: with KILN_FUZZ_SAVE_ENGINES=DIR (replay runs only), each
    // engine built is written to DIR/engine_<n>.
    if (const char* dir = std::getenv("KILN_FUZZ_SAVE_ENGINES")) {
      static int n = 0;
      std::ofstream(std::string(dir) + "/engine_" + std::to_string(n++), std::ios::binary)
          .write(reinterpret_cast<const char*>(engine.data()), static_cast<std::streamsize>(engine.size()));
    }
  } catch (const kiln::Error&) {}
  return 0;
}

}  // namespace kiln_fuzz
