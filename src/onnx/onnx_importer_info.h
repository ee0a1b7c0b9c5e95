// What each ONNX importer supports (opset range, element types, limits), as data: importers
// attach an OnnxImporterInfo to their KILN_REGISTER_ONNX_IMPORTER line (onnx_import_context.h),
// and `kiln conformance --list-ops` / docs/onnx-support.md list it. This header needs neither
// protobuf nor the importer internals, so tools can include it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

// Optional: a registration without it lists as "every opset" with no notes. Plain literals so
// that op files can keep constexpr tables of them.
struct OnnxImporterInfo {
  int64_t min_opset = 1;   // first opset version of the op whose spelling the importer handles
  int64_t max_opset = 0;   // last one it handles; 0: every version up to the newest kiln knows
  const char* types = "";  // element types it imports and the CPU backend runs, e.g. "float32, float16"
  const char* notes = "";  // attributes or variants it rejects, other limits
};

struct OnnxImporterListing {
  std::string domain;  // "" for the default ONNX domain
  std::string op_type;
  OnnxImporterInfo info;
};

// Every registered importer with its info, sorted by domain then op type. Call after static
// initialization (from main or later); not thread-safe against registrations.
std::vector<OnnxImporterListing> list_onnx_importers();
// True when an importer handles (domain, op_type); "" and "ai.onnx" are the same domain.
bool has_onnx_importer(const std::string& domain, const std::string& op_type);

}  // namespace kiln
