// Conv+BatchNorm folding. A per-output-channel affine map y = conv(x)*s + t that follows a
// Convolution is folded into it: W'[m] = W[m]*s[m], b'[m] = b[m]*s[m] + t[m]. The affine map is
//  - a Scale layer in "channel" mode on axis 1 (the importer's BatchNormalization) with
//    constant scale/shift and power absent or all 1, or
//  - an ElementWise prod/sum/sub/div of the conv output and a constant holding one value per
//    channel ([M,1,1], [1,M,1,1], a scalar, ...), which exporters emit for folded norms.
// Conditions: constant float32 weights (and bias), no fused activation or residual yet (both act
// after the bias), and the conv output read only by the affine layer. Folds repeat on the same
// convolution, so BN followed by a per-channel mul both fold. New weight constants are created
// (the old ones may be shared) and orphaned constants removed.
#include <cmath>

#include "src/builder/passes/pass_utils.h"
#include "src/builder/passes/passes.h"
#include "src/ir/op_schema.h"
#include "src/core/text.h"

namespace kiln {
namespace {

// A per-channel affine map y = x*scale + shift found after a convolution.
struct Affine {
  std::vector<float> scale;  // one per output channel
  std::vector<float> shift;
  std::vector<Tensor*> constants;  // constant inputs of the folded layer (to drop when unused)
};

// Expands a constant of count 1 or `channels` to `channels` values; empty when neither.
std::vector<float> per_channel(const std::vector<float>& values, int64_t channels) {
  if (values.size() == 1) return std::vector<float>(static_cast<size_t>(channels), values[0]);
  if (static_cast<int64_t>(values.size()) == channels) return values;
  return {};
}

// True when `dims` broadcast against an output of rank `rank` varies at most along axis 1.
bool is_channel_broadcast(const Dims& dims, int rank, int64_t channels) {
  if (dims.rank() > rank) return false;
  for (int j = 0; j < dims.rank(); ++j) {
    const int axis = j + rank - dims.rank();
    if (dims[j] != 1 && !(axis == 1 && dims[j] == channels)) return false;
  }
  return true;
}

bool match_scale(const Layer& layer, int rank, int64_t channels, Affine& out) {
  if (attr_string(layer, "mode") != "channel") return false;
  int64_t axis = attr_int(layer, "channel_axis");
  if (axis < 0) axis += rank;
  if (axis != 1) return false;
  std::vector<float> scale(static_cast<size_t>(channels), 1.0f), shift(static_cast<size_t>(channels), 0.0f);
  for (int i = 1; i < layer.num_inputs(); ++i) {
    Tensor* t = layer.input(i);
    if (!t) continue;
    const std::vector<float> values = per_channel(passes::constant_floats(t), channels);
    if (values.empty()) return false;
    if (i == 1) scale = values;
    if (i == 2) shift = values;
    if (i == 3) {
      for (float p : values) {
        if (p != 1.0f) return false;
      }
    }
    if (i > 3) return false;
    out.constants.push_back(t);
  }
  out.scale = scale;
  out.shift = shift;
  return true;
}

bool match_elementwise(const Layer& layer, const Tensor* conv_out, int rank, int64_t channels, Affine& out) {
  if (layer.num_inputs() != 2 || !layer.input(0) || !layer.input(1)) return false;
  const bool conv_first = layer.input(0) == conv_out;
  Tensor* other = conv_first ? layer.input(1) : layer.input(0);
  if (other == conv_out) return false;
  const HostTensor* value = passes::constant_value(other);
  if (!value || value->type() != DataType::kFloat32 || !is_channel_broadcast(value->dims(), rank, channels)) {
    return false;
  }
  const std::vector<float> c = per_channel(passes::constant_floats(other), channels);
  if (c.empty()) return false;
  const size_t m = static_cast<size_t>(channels);
  std::vector<float> scale(m, 1.0f), shift(m, 0.0f);
  const std::string op = layer.attrs().get_string("op");
  if (op == "prod") {
    scale = c;
  } else if (op == "sum") {
    shift = c;
  } else if (op == "sub") {
    for (size_t i = 0; i < m; ++i) {
      if (conv_first)
        shift[i] = -c[i];  // conv - c
      else {
        scale[i] = -1.0f;
        shift[i] = c[i];
      }  // c - conv
    }
  } else if (op == "div" && conv_first) {
    for (size_t i = 0; i < m; ++i) {
      if (c[i] == 0.0f) return false;
      scale[i] = 1.0f / c[i];
    }
  } else {
    return false;
  }
  out.scale = std::move(scale);
  out.shift = std::move(shift);
  out.constants.push_back(other);
  return true;
}

// Tries to fold the layer after `conv`; true when it did.
bool fold_once(passes::GraphEditor& editor, Layer* conv, PassContext& ctx) {
  if (!conv->attrs().get_string("activation", "").empty()) return false;
  if (conv->num_inputs() > 3 && conv->input(3)) return false;  // residual already fused
  const HostTensor* weights = passes::constant_value(conv->input(1));
  if (!weights || weights->type() != DataType::kFloat32 || weights->dims().rank() < 3) return false;
  Tensor* bias_tensor = conv->num_inputs() > 2 ? conv->input(2) : nullptr;
  const HostTensor* bias = passes::constant_value(bias_tensor);
  if (bias_tensor && (!bias || bias->type() != DataType::kFloat32)) return false;
  const int64_t channels = weights->dims()[0];
  if (bias && bias->count() != channels) return false;
  const int rank = weights->dims().rank();  // the conv output has the weights' rank

  Tensor* conv_out = conv->output(0);
  Layer* next = passes::sole_consumer(conv_out);
  if (!next || next->num_outputs() != 1) return false;
  Affine affine;
  if (next->type() == kLayerScale) {
    if (next->input(0) != conv_out || !match_scale(*next, rank, channels, affine)) return false;
  } else if (next->type() == kLayerElementWise) {
    if (!match_elementwise(*next, conv_out, rank, channels, affine)) return false;
  } else {
    return false;
  }

  HostTensor new_w = weights->clone();
  const int64_t per_channel_count = weights->count() / channels;
  float* w = new_w.as<float>();
  for (int64_t m = 0; m < channels; ++m) {
    const float s = affine.scale[static_cast<size_t>(m)];
    for (int64_t k = 0; k < per_channel_count; ++k) w[m * per_channel_count + k] *= s;
  }
  HostTensor new_b(DataType::kFloat32, Dims{channels});
  float* b = new_b.as<float>();
  const float* old_b = bias ? bias->as<float>() : nullptr;
  for (int64_t m = 0; m < channels; ++m) {
    const size_t i = static_cast<size_t>(m);
    b[m] = (old_b ? old_b[m] : 0.0f) * affine.scale[i] + affine.shift[i];
  }

  Tensor* old_w_tensor = conv->input(1);
  conv->set_input(1, editor.add_constant(new_w, conv->name() + "_weights"));
  conv->set_input(2, editor.add_constant(new_b, conv->name() + "_bias"));
  const std::string next_name = next->name();
  editor.take_over(next->output(0), conv_out);
  editor.remove_layer(next);
  affine.constants.push_back(old_w_tensor);
  affine.constants.push_back(bias_tensor);
  editor.drop_unused_constants(affine.constants);
  passes::log_change(ctx, "conv_bn_folding: folded " + quote(next_name) + " into " + quote(conv->name()));
  return true;
}

}  // namespace

int pass_conv_bn_folding(Network& network, PassContext& ctx) {
  passes::GraphEditor editor(network);
  int changes = 0;
  for (Layer* layer : editor.snapshot()) {
    if (editor.removed(layer) || layer->type() != kLayerConvolution || layer->num_inputs() < 2) continue;
    while (fold_once(editor, layer, ctx)) ++changes;
  }
  if (changes > 0) network.sort_topologically();
  return changes;
}

}  // namespace kiln
