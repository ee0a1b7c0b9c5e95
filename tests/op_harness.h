// The shared op test harness (CONVENTIONS.md section 3): each case builds a one-layer network,
// runs the CPU reference kernel (the oracle) and every other kernel registered for the layer
// type on the requested device, and compares them element-wise with per-type tolerances,
// NaN/Inf checks and guard bytes around every output and the workspace. A kernel whose
// supports() rejects the case is reported as unsupported, never as passed.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kiln/network.h"
#include "kiln/types.h"

namespace kiln::test {

struct InputSpec {
  DataType type = DataType::kFloat32;
  Dims dims;
  bool constant = false;          // feed as a Constant layer (weights, shape tensors)
  HostTensor value;               // fixed value (else random, deterministic per case)
  double low = -2.0, high = 2.0;  // range of random values
  bool omitted = false;           // an omitted optional input
};

struct OpCase {
  std::string name;
  std::string layer_type;
  std::vector<InputSpec> inputs;
  Attributes attrs;
  int num_outputs = 1;
  double rtol = 1e-4;
  double atol = 1e-5;
};

enum class Outcome { kPassed, kFailed, kUnsupported };

struct ErrorStats {
  double max_abs = 0, max_rel = 0, mean_rel = 0, share_above_1e5 = 0;
  int64_t count = 0;
};

struct KernelResult {
  std::string tactic;
  Outcome outcome = Outcome::kUnsupported;
  std::string message;
  ErrorStats stats;
};

// Random tensor with values in [low, high) (integers rounded; bool 0/1), deterministic in seed.
HostTensor random_tensor(DataType type, const Dims& dims, uint64_t seed, double low = -2.0, double high = 2.0);

// Element-wise comparison: |a-b| <= atol + rtol*|b|, relative error |a-b|/max(|b|, 1e-3).
// NaN in a where b is finite (or the reverse) is a failure.
bool compare_tensors(const HostTensor& actual, const HostTensor& expected, double rtol, double atol, ErrorStats* stats,
                     std::string* message);

// Which of the registered kernels to run (by tactic name); empty: all of them.
using TacticFilter = std::function<bool(const std::string& tactic)>;

// Runs one case on `device` for every registered kernel of the layer type that `only` accepts
// (the reference included when accepted: it is checked for guard bytes, NaN/Inf and run-to-run
// determinism; it always runs once as the oracle).
std::vector<KernelResult> run_op_case(const OpCase& c, DeviceType device = DeviceType::kCPU,
                                      const TacticFilter& only = {});

// The case in fp16 on `device`: float32 data inputs (not shape inputs) are rounded to fp16 and
// given as fp16; the CPU reference runs in fp32 on the same rounded values. Outputs compare
// with |a-b| <= atol*max(1, max|ref|) + rtol*|ref|. Empty when the case has no float data.
std::vector<KernelResult> run_op_case_fp16(const OpCase& c, DeviceType device, double rtol = 1e-2, double atol = 1e-2,
                                           const TacticFilter& only = {});

// t [N, C, spatial...] (any element width) converted between linear (NCHW...) and channels-last
// (N, spatial..., C) memory: to channels-last when `to_channels_last`, else back.
HostTensor convert_format(const HostTensor& t, bool to_channels_last);

// Reference outputs of a case (for tests that check the oracle against independent math).
std::vector<HostTensor> reference_outputs(const OpCase& c);

}  // namespace kiln::test
