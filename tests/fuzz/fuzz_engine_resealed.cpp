// Fuzz target: the engine load + CPU inference of engine_load (engine_load_body.h), with a
// mutator that gets past the file's integrity check. An engine file is a 64-byte header (magic,
// versions, payload size at byte 32, FNV-1a checksum of the payload at byte 40, little endian;
// src/engine/engine_format.cpp) and the payload. Byte-level mutants of the payload almost always
// fail the checksum, so the section table and the section decoders are barely reached. Here
// LLVMFuzzerMutate changes the bytes, then (nine times in ten, when the magic is intact) the
// header is resealed: the payload size and the checksum are recomputed for the mutant. A
// hostile file can carry a correct checksum just as easily, so what lies behind it must be as
// robust as the header checks.
#include <cstring>

#include "engine_load_body.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return kiln_fuzz::load_and_run(data, size); }

namespace {

constexpr size_t kHeaderBytes = 64, kOffPayloadSize = 32, kOffChecksum = 40;

void store_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t fnv1a(const uint8_t* bytes, size_t size) {  // engine_checksum's algorithm
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i) {
    h ^= bytes[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  size = LLVMFuzzerMutate(data, size, max_size);
  if (size < kHeaderBytes || std::memcmp(data, "KILNENG", 8) != 0 || seed % 10 == 0) return size;
  store_u64(data + kOffPayloadSize, size - kHeaderBytes);
  store_u64(data + kOffChecksum, fnv1a(data + kHeaderBytes, size - kHeaderBytes));
  return size;
}
