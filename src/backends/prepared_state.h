// Prepared kernel states: what a kernel builds in prepare() that a process on the same kind of
// device can load instead of building it again. The one user today is the cuDNN graph-API
// convolution: its execution plan with the kernels cuDNN compiled for it at run time (NVRTC),
// which otherwise costs 0.1-0.3 s per distinct convolution on every host whose driver JIT cache
// has not seen it, every time an engine is loaded there.
//
// The builder asks the chosen kernels for their states at the profiles' points
// (Kernel::prepared_states) and stores them in the engine file (optional section KSTATE,
// BuilderConfig::embed_compiled_plans). Loading an engine registers its states here for as long
// as the engine lives (hold_prepared_states); a kernel's prepare() looks its own key up
// (find_prepared_state) and, where the state loads, skips the build. Keys are the kernel's own
// and name everything the state depends on (the device, the library versions, the shapes), so
// that a state from another GPU or library version is simply not found; a state that is found
// but does not load is ignored (the kernel builds as before and says so in the verbose log).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

struct PreparedState {
  std::string key;
  std::shared_ptr<const std::vector<uint8_t>> bytes;
};

// Makes `states` findable while the returned holder lives (an engine keeps it). States under a
// key already held by another engine share that engine's bytes. Thread-safe.
std::shared_ptr<const void> hold_prepared_states(const std::vector<PreparedState>& states);

// The bytes held under `key`, or null. Null for every key while KILN_COMPILED_PLANS=0 (loading
// ignores what engines carry: a diagnostic, and the baseline of bench/engine_startup.py).
// Thread-safe.
std::shared_ptr<const std::vector<uint8_t>> find_prepared_state(const std::string& key);

// How many keys are held now (tests).
size_t prepared_state_count();

}  // namespace kiln
