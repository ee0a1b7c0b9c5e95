// ONNX import: fills a kiln::Network from an ONNX model (protobuf), with initializers, external
// data files and the exporters' shape subgraphs. Unsupported nodes are all reported in one
// pass. A parser is used from one thread at a time.
#pragma once

#include <string>
#include <vector>

#include "kiln/network.h"

namespace kiln {

struct UnsupportedNode {
  std::string op_type;
  std::string domain;
  std::string node_name;
  int64_t opset = 0;
  std::string reason;
};

class OnnxParser {
 public:
  explicit OnnxParser(Network& network) : network_(network) {}

  // Parses a model file; external data is looked up relative to the file's folder.
  // Throws kiln::ParseError listing every unsupported node (and kiln::Error for unreadable
  // or malformed files).
  void parse_file(const std::string& path);
  // Parses serialized model bytes; external data is resolved relative to base_dir.
  void parse_bytes(const void* data, size_t size, const std::string& base_dir = ".",
                   const std::string& source = "<memory>");

  // Lists the nodes no importer handles, without throwing and without building the network.
  static std::vector<UnsupportedNode> check_file(const std::string& path);

  // Opset of the default domain of the last parsed model.
  int64_t opset() const { return opset_; }

 private:
  Network& network_;
  int64_t opset_ = 0;
};

}  // namespace kiln
