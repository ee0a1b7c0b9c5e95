// The binary codec of the engine file's sections (docs/engine-format.md): little-endian
// primitives (u8, u32, u64, i64, f64 as its bit pattern, length-prefixed strings, dims) and the
// encoders/decoders of the META, GRAPH, PROFILES and PLUGINS sections. The container (header,
// section table, checksum) lives in engine_format.cpp. Every read is bounds-checked and every
// count is checked against the bytes left before anything is allocated; a violation throws
// kiln::EngineFormatError naming the source, the section and what is wrong.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/engine_format.h"
#include "kiln/error.h"
#include "kiln/types.h"
#include "src/core/text.h"

namespace kiln::engine_codec {

// Appends little-endian primitives to a byte vector.
class ByteWriter {
 public:
  void u8(uint8_t v) { bytes_.push_back(v); }
  void u32(uint32_t v);
  void u64(uint64_t v);
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void f64(double v);
  void boolean(bool v) { u8(v ? 1 : 0); }
  // u32 length + bytes; throws kiln::Error for strings of 4 GiB or more.
  void str(const std::string& s);
  void count(size_t n, const char* what);
  void dims(const Dims& d);
  void raw(const void* data, size_t n);
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

// Reads primitives from a bounded byte range. `context` ("kiln engine 'x': GRAPH section")
// prefixes every error.
class ByteReader {
 public:
  ByteReader(std::span<const uint8_t> data, std::string context) : data_(data), context_(std::move(context)) {}

  [[noreturn]] void fail(const std::string& what) const;
  size_t remaining() const { return data_.size() - pos_; }
  size_t position() const { return pos_; }

  uint8_t u8(const std::string& what);
  bool boolean(const std::string& what);
  uint32_t u32(const std::string& what);
  uint64_t u64(const std::string& what);
  int64_t i64(const std::string& what);
  double f64(const std::string& what);
  std::string str(const std::string& what);
  // An element count whose elements take at least min_item_bytes each: fails when the rest of
  // the data could not hold that many, so a corrupt count never drives an allocation.
  uint32_t count(size_t min_item_bytes, const std::string& what);
  // Rank <= kMaxDims, extents >= 0 or kDynamic (when allow_dynamic).
  Dims dims(const std::string& what, bool allow_dynamic);
  DataType data_type(const std::string& what);
  TensorFormat tensor_format(const std::string& what);
  // Fails unless every byte has been consumed.
  void expect_end();

 private:
  std::span<const uint8_t> take(size_t n, const std::string& what);
  std::span<const uint8_t> data_;
  size_t pos_ = 0;
  std::string context_;
};

// Strings from the file go into messages through printable() / quote() (src/core/text.h).

// ---- sections -----------------------------------------------------------------------------
// Weight blobs (64-byte aligned) collected while encoding the graph.
struct WeightsWriter {
  std::vector<uint8_t> bytes;
  // Appends the tensor's bytes at the next 64-byte boundary; returns its offset.
  uint64_t add(const HostTensor& tensor);
  // The same for a blob of n bytes (a string tensor's length-prefixed characters).
  uint64_t add(const void* data, size_t n);
};

void encode_meta(const EngineData& data, ByteWriter& w);
void decode_meta(ByteReader& r, EngineData& data);
// Throws kiln::Error when the network cannot be stored (dangling or duplicate tensor names,
// duplicate layer names, a cycle).
void encode_graph(const Network& network, ByteWriter& w, WeightsWriter& weights);
std::unique_ptr<Network> decode_graph(ByteReader& r, std::span<const uint8_t> weights);
void encode_profiles(const std::vector<OptimizationProfile>& profiles, ByteWriter& w);
// Checks every named input against `network`.
std::vector<OptimizationProfile> decode_profiles(ByteReader& r, const Network& network);
void encode_plugins(const std::vector<EngineData::PluginRecord>& plugins, ByteWriter& w);
// LAUNCH: the tactics for plain launches that differ (EngineData::launch_tactics). Every layer
// named must have a tactic in `tactics`, and a different one.
void encode_launch_tactics(const std::map<std::string, std::string>& launch, ByteWriter& w);
std::map<std::string, std::string> decode_launch_tactics(ByteReader& r,
                                                         const std::map<std::string, std::string>& tactics);
std::vector<EngineData::PluginRecord> decode_plugins(ByteReader& r);

}  // namespace kiln::engine_codec
