#pragma once
// Whole-engine timing during a build (builder optimization level 5): the kernels chosen layer by
// layer, each timed alone with its data in cache, are not always the fastest set once the layers
// run one after another (weights read from memory instead of cache, neighbours' launches); level
// 5 builds the engine with its own choices and with level 3's, times both whole, and keeps the
// faster.

#include <cstdint>
#include <vector>

#include "kiln/types.h"

namespace kiln {

struct EngineComparison {
  double a_ms = 0.0;  // median latency per inference of engine a (ms)
  double b_ms = 0.0;  // ... of engine b
  int rounds = 0;     // alternating rounds measured (each: `runs` inferences of a, then of b, or b then a)
  int runs = 0;       // inferences per engine per round
};

// Times two serialized engines built for `device` from the same network (same inputs, outputs
// and profiles): one execution context each (graph capture as the context's default), profile
// 0's opt shapes, the same input values (floating-point inputs a fixed pattern in [-1, 1], other
// types zero), a few warm-up inferences, then `rounds` alternating rounds of about `round_ms` of
// work each. Returns the medians over the rounds. Throws kiln::Error where an engine cannot run
// (the caller keeps its first choice then).
EngineComparison time_engines_alternating(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                                          DeviceType device, double round_ms = 20.0, int rounds = 7);

}  // namespace kiln
