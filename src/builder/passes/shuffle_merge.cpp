// Shuffle merging: a Shuffle A whose output only a second Shuffle B reads becomes one Shuffle
// when B only transposes (no reshape, no shape input) and A has no second transpose: A's second
// transpose becomes B's permutation. Exporters write YOLO heads and attention's head split as
// Reshape then Transpose; as one layer the CPU's "fast" Shuffle moves the data once
// (compose_shuffle in data_cpu.cpp), and with the layout pass it also reads a channels-last
// convolution output without a Reformat first.
//
// Tried and not kept: moving an Activation that follows such a Shuffle ahead of it onto the
// convolution (YOLO's Sigmoid): oneDNN 2.6's logistic post-op cost what the separate layer did.
//
// CPU builds only for now: the CUDA Shuffle kernels take reshape plus second transpose, but this
// merge has not been run on a GPU yet.
#include <string>
#include <vector>

#include "src/builder/passes/pass_utils.h"
#include "src/builder/passes/passes.h"
#include "src/core/text.h"
#include "src/ir/data_params.h"
#include "src/ir/op_params.h"

namespace kiln {
namespace {

bool is_identity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// B's permutation as one transpose: y[j] = a[first[second[j]]] (an empty list is the identity).
std::vector<int64_t> composed(const std::vector<int64_t>& first, const std::vector<int64_t>& second) {
  if (second.empty()) return first;
  if (first.empty()) return second;
  std::vector<int64_t> c;
  for (int64_t j : second) c.push_back(first[static_cast<size_t>(j)]);
  return c;
}

}  // namespace

int pass_shuffle_merge(Network& network, PassContext& ctx) {
  if (ctx.config.device != DeviceType::kCPU) return 0;
  passes::GraphEditor editor(network);
  int changes = 0;
  for (Layer* b : editor.snapshot()) {
    if (editor.removed(b) || b->type() != kLayerShuffle || b->num_inputs() != 1 || b->num_outputs() != 1) continue;
    Tensor* a_out = b->input(0);
    Layer* a = a_out ? a_out->producer() : nullptr;
    if (!a || a->type() != kLayerShuffle || a->num_outputs() != 1 || passes::sole_consumer(a_out) != b) continue;
    const ShuffleParams pb = params_of<ShuffleParams>(*b);
    const ShuffleParams pa = params_of<ShuffleParams>(*a);
    if (pb.reshape_mode != ReshapeMode::kNone || !is_identity(pa.second_transpose)) continue;
    std::vector<int64_t> perm = composed(pb.first_transpose, pb.second_transpose);
    if (is_identity(perm)) perm.clear();
    a->attrs().set("second_transpose", perm);
    passes::log_change(ctx, "shuffle_merge: " + quote(b->name()) + " merged into " + quote(a->name()) +
                                " (one Shuffle: " + (pa.reshape_mode == ReshapeMode::kNone ? "transpose" : "reshape") +
                                " then transpose)");
    editor.take_over(b->output(0), a_out);
    editor.remove_layer(b);
    ++changes;
  }
  return changes;
}

}  // namespace kiln
