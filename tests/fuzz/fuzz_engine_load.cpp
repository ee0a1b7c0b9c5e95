// Fuzz target: engine file bytes -> Runtime::deserialize -> one CPU inference
// (engine_load_body.h). libFuzzer mutates the bytes, so almost every mutant of the payload fails
// the header's checksum; fuzz_engine_resealed.cpp reseals its mutants to get past it.
#include "engine_load_body.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return kiln_fuzz::load_and_run(data, size); }
