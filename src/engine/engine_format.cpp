// The engine file container (docs/engine-format.md): a 64-byte header (magic, format version,
// header size, kiln version, payload size and FNV-1a checksum, section count), then the payload:
// a section table followed by the META, GRAPH, PROFILES, PLUGINS and WEIGHTS sections and the
// optional LIBS (embedded plugin libraries), LAUNCH (tactics for plain launches) and KSTATE
// (prepared kernel states: compiled cuDNN plans) sections,
// each at a 64-byte boundary. The reader
// checks the header, the checksum and the table (bounds, overlaps, the one canonical layout)
// before any section is decoded; the sections themselves are decoded by network_codec.cpp,
// LIBS and KSTATE here.
#include "engine/engine_format.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "engine/network_codec.h"
#include "kiln/error.h"
#include "src/core/text.h"

namespace kiln {
namespace {

using engine_codec::ByteReader;
using engine_codec::ByteWriter;

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'E', 'N', 'G', '\0'};
constexpr uint32_t kFormatVersion = 1;
// Field offsets in the header. Bytes 52..63 are reserved (zero) so that the payload, and with
// it every section and weight blob, starts 64-byte aligned in the file.
constexpr size_t kOffMagic = 0, kOffFormatVersion = 8, kOffHeaderSize = 12, kOffKilnVersion = 16, kOffPayloadSize = 32,
                 kOffChecksum = 40, kOffSectionCount = 48, kOffReserved = 52;
constexpr size_t kKilnVersionBytes = 16;
constexpr uint32_t kHeaderSize = 64;
constexpr size_t kSectionIdBytes = 8;
constexpr size_t kSectionEntryBytes = kSectionIdBytes + 8 + 8;
constexpr size_t kSectionAlignment = 64;

// Every section a version-1 engine may have, in the order the writer lays them out. All but
// LIBS, LAUNCH and KSTATE are required; LIBS is written only when plugin libraries are embedded,
// LAUNCH only when some layer's tactic for plain launches differs, KSTATE only when some chosen
// kernel has a prepared state to carry.
enum SectionIndex { kMeta, kGraph, kProfiles, kPlugins, kWeights, kLibs, kLaunch, kKstate, kNumSections };
constexpr const char* kSectionIds[kNumSections] = {"META",    "GRAPH", "PROFILES", "PLUGINS",
                                                   "WEIGHTS", "LIBS",  "LAUNCH",   "KSTATE"};
bool optional_section(int index) { return index == kLibs || index == kLaunch || index == kKstate; }

// KSTATE: count, then per state in strictly increasing key order: str key, u64 FNV-1a 64
// checksum of the bytes, str bytes. What a state holds is its kernel's business (the key names
// the kernel family first); the format checks only the framing and the checksums.
void encode_states(const std::vector<PreparedState>& states, ByteWriter& w) {
  w.count(states.size(), "prepared kernel states");
  for (const PreparedState& s : states) {
    w.str(s.key);
    w.u64(engine_checksum(s.bytes->data(), s.bytes->size()));
    w.str(std::string(s.bytes->begin(), s.bytes->end()));
  }
}

std::vector<PreparedState> decode_states(ByteReader& r) {
  const uint32_t n = r.count(4 + 8 + 4, "prepared kernel state count");
  if (n == 0) r.fail("has no state (an engine without prepared kernel states has no KSTATE section)");
  std::vector<PreparedState> states;
  for (uint32_t i = 0; i < n; ++i) {
    PreparedState s;
    s.key = r.str("prepared kernel state key");
    const std::string where = "prepared kernel state " + std::to_string(i) + " (" + quote(s.key) + ")";
    if (s.key.empty()) r.fail("prepared kernel state " + std::to_string(i) + " has an empty key");
    if (!states.empty() && !(states.back().key < s.key)) {
      r.fail(where + " is out of order or repeated (keys must be strictly increasing)");
    }
    const uint64_t checksum = r.u64(where + " checksum");
    const std::string bytes = r.str(where + " bytes");
    auto v = std::make_shared<std::vector<uint8_t>>(bytes.begin(), bytes.end());
    if (engine_checksum(v->data(), v->size()) != checksum) {
      r.fail(where + ": checksum mismatch (" + std::to_string(v->size()) +
             " bytes); the state is corrupt (rebuild the engine, or build it with --no-compiled-plans)");
    }
    s.bytes = std::move(v);
    states.push_back(std::move(s));
  }
  r.expect_end();
  return states;
}

// LIBS: count, then per library in strictly increasing path order: str path, u64 FNV-1a 64
// checksum of the bytes, str bytes (u32 length, then the library file).
void encode_libraries(const std::vector<EngineData::PluginLibrary>& libraries, ByteWriter& w) {
  w.count(libraries.size(), "plugin libraries");
  for (const auto& lib : libraries) {
    w.str(lib.path);
    w.u64(engine_checksum(lib.bytes.data(), lib.bytes.size()));
    w.str(std::string(lib.bytes.begin(), lib.bytes.end()));
  }
}

std::vector<EngineData::PluginLibrary> decode_libraries(ByteReader& r,
                                                        const std::vector<EngineData::PluginRecord>& plugins) {
  const uint32_t n = r.count(4 + 8 + 4, "plugin library count");
  if (n == 0) r.fail("has no library (an engine without embedded libraries has no LIBS section)");
  std::vector<EngineData::PluginLibrary> libraries;
  for (uint32_t i = 0; i < n; ++i) {
    EngineData::PluginLibrary lib;
    lib.path = r.str("plugin library path");
    const std::string where = "embedded plugin library " + quote(lib.path);
    if (lib.path.empty()) r.fail("embedded plugin library " + std::to_string(i) + " has an empty path");
    if (!libraries.empty() && !(libraries.back().path < lib.path)) {
      r.fail(where + " is out of order or repeated (paths must be strictly increasing)");
    }
    const bool used = std::any_of(plugins.begin(), plugins.end(),
                                  [&](const EngineData::PluginRecord& p) { return p.library == lib.path; });
    if (!used) r.fail(where + " is not the library of any plugin in the PLUGINS section");
    const uint64_t checksum = r.u64(where + " checksum");
    const std::string bytes = r.str(where + " bytes");
    lib.bytes.assign(bytes.begin(), bytes.end());
    if (engine_checksum(lib.bytes.data(), lib.bytes.size()) != checksum) {
      r.fail(where + ": checksum mismatch (" + std::to_string(lib.bytes.size()) + " bytes); the library is corrupt");
    }
    libraries.push_back(std::move(lib));
  }
  r.expect_end();
  return libraries;
}

uint64_t align_up(uint64_t v) { return (v + kSectionAlignment - 1) / kSectionAlignment * kSectionAlignment; }

uint32_t load_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t load_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}
void store_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void store_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

std::string hex_bytes(const uint8_t* p, size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ' ';
    out += kHex[p[i] >> 4];
    out += kHex[p[i] & 15];
  }
  return out;
}

// A fixed-width NUL-padded text field: printable ASCII, then only NULs. Returns false when the
// field is malformed (or empty when require_text).
bool parse_padded(const uint8_t* p, size_t n, std::string* out) {
  size_t len = 0;
  while (len < n && p[len] != 0) {
    if (p[len] < 0x20 || p[len] >= 0x7f) return false;
    ++len;
  }
  for (size_t i = len; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  out->assign(reinterpret_cast<const char*>(p), len);
  return len > 0;
}

class FormatChecker {
 public:
  explicit FormatChecker(const std::string& source) : prefix_("kiln engine " + quote(source) + ": ") {}
  [[noreturn]] void fail(const std::string& what) const { throw EngineFormatError(prefix_ + what); }
  const std::string& prefix() const { return prefix_; }

 private:
  std::string prefix_;
};

struct SectionEntry {
  int index;  // into kSectionIds
  uint64_t offset, size;
  bool present = true;
};

}  // namespace

uint64_t engine_checksum(const uint8_t* bytes, size_t size) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64 offset basis
  for (size_t i = 0; i < size; ++i) {
    h ^= bytes[i];
    h *= 0x100000001b3ull;  // FNV-1a 64 prime
  }
  return h;
}

std::vector<uint8_t> engine_serialize(const EngineData& data) {
  if (!data.network) throw Error("engine_serialize: EngineData has no network");
  std::vector<uint8_t> sections[kNumSections];
  {
    ByteWriter w;
    engine_codec::encode_meta(data, w);
    sections[kMeta] = std::move(w.bytes());
  }
  {
    ByteWriter w;
    engine_codec::WeightsWriter weights;
    engine_codec::encode_graph(*data.network, w, weights);
    sections[kGraph] = std::move(w.bytes());
    sections[kWeights] = std::move(weights.bytes);
  }
  {
    ByteWriter w;
    engine_codec::encode_profiles(data.profiles, w);
    sections[kProfiles] = std::move(w.bytes());
  }
  {
    ByteWriter w;
    engine_codec::encode_plugins(data.plugins, w);
    sections[kPlugins] = std::move(w.bytes());
  }
  // Optional sections are left out when empty (such a file is what kiln wrote before them).
  if (!data.plugin_libraries.empty()) {
    std::vector<EngineData::PluginLibrary> sorted = data.plugin_libraries;
    std::sort(sorted.begin(), sorted.end(),
              [](const EngineData::PluginLibrary& a, const EngineData::PluginLibrary& b) { return a.path < b.path; });
    ByteWriter w;
    encode_libraries(sorted, w);
    sections[kLibs] = std::move(w.bytes());
  }
  if (!data.launch_tactics.empty()) {
    ByteWriter w;
    engine_codec::encode_launch_tactics(data.launch_tactics, w);
    sections[kLaunch] = std::move(w.bytes());
  }
  if (!data.prepared_states.empty()) {
    std::vector<PreparedState> sorted;
    for (const PreparedState& st : data.prepared_states) {
      if (st.bytes) sorted.push_back(st);
    }
    std::sort(sorted.begin(), sorted.end(),
              [](const PreparedState& a, const PreparedState& b) { return a.key < b.key; });
    sorted.erase(std::unique(sorted.begin(), sorted.end(),
                             [](const PreparedState& a, const PreparedState& b) { return a.key == b.key; }),
                 sorted.end());
    if (!sorted.empty()) {
      ByteWriter w;
      encode_states(sorted, w);
      sections[kKstate] = std::move(w.bytes());
    }
  }
  std::vector<int> present;
  for (int i = 0; i < kNumSections; ++i) {
    if (!optional_section(i) || !sections[i].empty()) present.push_back(i);
  }
  const size_t num_sections = present.size();

  // Payload: section table, then each section at the next 64-byte boundary; no trailing pad.
  const uint64_t table_bytes = static_cast<uint64_t>(num_sections) * kSectionEntryBytes;
  uint64_t offsets[kNumSections];
  uint64_t cursor = table_bytes;
  for (int i : present) {
    offsets[i] = align_up(cursor);
    cursor = offsets[i] + sections[i].size();
  }
  const uint64_t payload_size = cursor;
  std::vector<uint8_t> out(kHeaderSize + payload_size, 0);
  uint8_t* payload = out.data() + kHeaderSize;
  for (size_t k = 0; k < num_sections; ++k) {
    const int i = present[k];
    uint8_t* entry = payload + k * kSectionEntryBytes;
    std::memcpy(entry, kSectionIds[i], std::strlen(kSectionIds[i]));
    store_u64(entry + kSectionIdBytes, offsets[i]);
    store_u64(entry + kSectionIdBytes + 8, sections[i].size());
    if (!sections[i].empty()) std::memcpy(payload + offsets[i], sections[i].data(), sections[i].size());
  }

  uint8_t* header = out.data();
  std::memcpy(header + kOffMagic, kMagic, sizeof kMagic);
  store_u32(header + kOffFormatVersion, kFormatVersion);
  store_u32(header + kOffHeaderSize, kHeaderSize);
  const char* kiln_version = version();
  std::memcpy(header + kOffKilnVersion, kiln_version, std::min(std::strlen(kiln_version), kKilnVersionBytes));
  store_u64(header + kOffPayloadSize, payload_size);
  store_u64(header + kOffChecksum, engine_checksum(payload, payload_size));
  store_u32(header + kOffSectionCount, static_cast<uint32_t>(num_sections));
  return out;
}

namespace {

// Checks the header and the section table; returns the sections in kSectionIds order (an absent
// optional section has offset and size 0 and present = false).
std::vector<SectionEntry> check_container(const uint8_t* bytes, size_t size, const FormatChecker& c) {
  if (size < sizeof kMagic) {
    c.fail("the file is " + std::to_string(size) + " bytes, too small to be a kiln engine (the header alone is " +
           std::to_string(kHeaderSize) + " bytes)");
  }
  if (std::memcmp(bytes + kOffMagic, kMagic, sizeof kMagic) != 0) {
    c.fail("not a kiln engine file (magic is [" + hex_bytes(bytes, sizeof kMagic) + "], expected \"KILNENG\\0\")");
  }
  if (size < kHeaderSize) {
    c.fail("truncated engine file: " + std::to_string(size) + " bytes, smaller than the " +
           std::to_string(kHeaderSize) + "-byte header");
  }
  const uint32_t format_version = load_u32(bytes + kOffFormatVersion);
  if (format_version != kFormatVersion) {
    c.fail("engine format version " + std::to_string(format_version) + " is not supported; this kiln (" + version() +
           ") reads format version " + std::to_string(kFormatVersion) +
           " only; rebuild the engine with this kiln (kiln build)");
  }
  const uint32_t header_size = load_u32(bytes + kOffHeaderSize);
  if (header_size != kHeaderSize) {
    c.fail("corrupted header: header size is " + std::to_string(header_size) + ", format version 1 has " +
           std::to_string(kHeaderSize));
  }
  std::string writer_version;
  if (!parse_padded(bytes + kOffKilnVersion, kKilnVersionBytes, &writer_version)) {
    c.fail("corrupted header: the kiln version field is not NUL-padded text [" +
           hex_bytes(bytes + kOffKilnVersion, kKilnVersionBytes) + "]");
  }
  for (size_t i = kOffReserved; i < kHeaderSize; ++i) {
    if (bytes[i] != 0) c.fail("corrupted header: reserved byte " + std::to_string(i) + " is not zero");
  }
  const uint64_t payload_size = load_u64(bytes + kOffPayloadSize);
  const uint64_t actual = size - kHeaderSize;
  if (payload_size > actual) {
    c.fail("truncated engine file: the header announces a payload of " + std::to_string(payload_size) +
           " bytes but only " + std::to_string(actual) + " follow the header (file size " + std::to_string(size) +
           ", expected " + std::to_string(kHeaderSize + payload_size) + ")");
  }
  if (payload_size < actual) {
    c.fail("the header announces a payload of " + std::to_string(payload_size) + " bytes but " +
           std::to_string(actual) + " follow the header (trailing data or a corrupted header)");
  }
  const uint8_t* payload = bytes + kHeaderSize;
  const uint64_t stored_checksum = load_u64(bytes + kOffChecksum);
  const uint64_t checksum = engine_checksum(payload, payload_size);
  if (checksum != stored_checksum) {
    c.fail("corrupted engine file: payload checksum mismatch (computed " + std::to_string(checksum) + ", header says " +
           std::to_string(stored_checksum) + "); the file was damaged after it was written (written by kiln " +
           writer_version + ")");
  }

  const uint32_t count = load_u32(bytes + kOffSectionCount);
  if (count == 0 || count > payload_size / kSectionEntryBytes) {
    c.fail("corrupted header: section count " + std::to_string(count) + " does not fit a payload of " +
           std::to_string(payload_size) + " bytes (" + std::to_string(kSectionEntryBytes) + " bytes per table entry)");
  }
  const uint64_t table_end = uint64_t{count} * kSectionEntryBytes;
  std::vector<SectionEntry> entries;
  entries.reserve(count);
  bool seen[kNumSections] = {};
  for (uint32_t i = 0; i < count; ++i) {
    const uint8_t* e = payload + static_cast<size_t>(i) * kSectionEntryBytes;
    std::string id;
    if (!parse_padded(e, kSectionIdBytes, &id)) {
      c.fail("section table entry " + std::to_string(i) + " has a malformed id [" + hex_bytes(e, kSectionIdBytes) +
             "]");
    }
    int index = -1;
    for (int s = 0; s < kNumSections; ++s) {
      if (id == kSectionIds[s]) index = s;
    }
    if (index < 0) {
      c.fail("unknown section " + quote(id) +
             " (format version 1 has META, GRAPH, PROFILES, PLUGINS, WEIGHTS and "
             "the optional LIBS, LAUNCH and KSTATE)");
    }
    if (seen[index]) c.fail("section " + id + " appears twice in the section table");
    seen[index] = true;
    const uint64_t offset = load_u64(e + kSectionIdBytes), sz = load_u64(e + kSectionIdBytes + 8);
    if (offset > payload_size || sz > payload_size - offset) {
      c.fail("section " + id + " [offset " + std::to_string(offset) + ", size " + std::to_string(sz) +
             "] lies outside the " + std::to_string(payload_size) + "-byte payload");
    }
    if (offset < table_end) {
      c.fail("section " + id + " at offset " + std::to_string(offset) + " overlaps the section table (" +
             std::to_string(table_end) + " bytes)");
    }
    entries.push_back({index, offset, sz, true});
  }
  for (int s = 0; s < kNumSections; ++s) {
    if (!seen[s] && !optional_section(s)) c.fail("required section " + std::string(kSectionIds[s]) + " is missing");
  }

  // One canonical layout: sections in offset order, each at the first 64-byte boundary after
  // the previous one, zero padding between them, the last ending at the payload's end.
  std::vector<SectionEntry> by_offset = entries;
  std::sort(by_offset.begin(), by_offset.end(),
            [](const SectionEntry& a, const SectionEntry& b) { return a.offset < b.offset; });
  uint64_t cursor = table_end;
  for (const SectionEntry& e : by_offset) {
    const std::string id = kSectionIds[e.index];
    if (e.offset < cursor)
      c.fail("section " + id + " at offset " + std::to_string(e.offset) + " overlaps the previous section");
    if (e.offset != align_up(cursor)) {
      c.fail("section " + id + " starts at offset " + std::to_string(e.offset) + ", expected " +
             std::to_string(align_up(cursor)) + " (sections are packed at 64-byte boundaries)");
    }
    for (uint64_t i = cursor; i < e.offset; ++i) {
      if (payload[i] != 0) c.fail("non-zero padding byte at payload offset " + std::to_string(i));
    }
    cursor = e.offset + e.size;
  }
  if (cursor != payload_size) {
    c.fail(std::to_string(payload_size - cursor) + " bytes after the last section are not part of any section");
  }
  for (int s = 0; s < kNumSections; ++s) {
    if (!seen[s]) entries.push_back({s, 0, 0, false});
  }
  std::sort(entries.begin(), entries.end(),
            [](const SectionEntry& a, const SectionEntry& b) { return a.index < b.index; });
  return entries;
}

}  // namespace

EngineData engine_deserialize(const uint8_t* bytes, size_t size, const std::string& source) {
  const FormatChecker c(source);
  if (!bytes && size > 0) c.fail("no data");
  const std::vector<SectionEntry> entries = check_container(bytes, size, c);
  const uint8_t* payload = bytes + kHeaderSize;
  auto section = [&](int index) {
    const SectionEntry& e = entries[static_cast<size_t>(index)];
    return std::span<const uint8_t>(payload + e.offset, static_cast<size_t>(e.size));
  };
  auto reader = [&](int index) { return ByteReader(section(index), c.prefix() + kSectionIds[index] + " section"); };

  EngineData data;
  try {
    ByteReader meta = reader(kMeta);
    engine_codec::decode_meta(meta, data);
    ByteReader graph = reader(kGraph);
    data.network = engine_codec::decode_graph(graph, section(kWeights));
    ByteReader profiles = reader(kProfiles);
    data.profiles = engine_codec::decode_profiles(profiles, *data.network);
    ByteReader plugins = reader(kPlugins);
    data.plugins = engine_codec::decode_plugins(plugins);
    if (entries[kLibs].present) {
      ByteReader libs = reader(kLibs);
      data.plugin_libraries = decode_libraries(libs, data.plugins);
    }
    if (entries[kLaunch].present) {
      ByteReader launch = reader(kLaunch);
      data.launch_tactics = engine_codec::decode_launch_tactics(launch, data.tactics);
    }
    if (entries[kKstate].present) {
      ByteReader kstate = reader(kKstate);
      data.prepared_states = decode_states(kstate);
    }
  } catch (const EngineFormatError&) {
    throw;
  } catch (const Error& e) {
    c.fail(e.what());
  } catch (const std::bad_alloc&) {
    c.fail("out of memory while decoding (the file is corrupt or too large for this machine)");
  } catch (const std::exception& e) {
    // A container or library exception escaping the codec is still a bad file, not a crash.
    c.fail(std::string("malformed content: ") + e.what());
  }
  return data;
}

}  // namespace kiln
