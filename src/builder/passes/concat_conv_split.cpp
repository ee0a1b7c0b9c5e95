// Concat + Convolution splitting (CPU builds). A convolution is linear in its input channels, so
// one over a channel concatenation of pieces A_0 .. A_{n-1} is the sum of convolutions of each
// piece with its slice of the weights:
//
//   conv(concat(A_0, .., A_{n-1}), W) + b = conv(A_0, W_0) + b + conv(A_1, W_1) + .. ,
//   W_j = W[:, C_0 + .. + C_{j-1} : C_0 + .. + C_j]
//
// The pass replaces such a pair by those convolutions chained through their residual inputs:
// each adds the previous one's output in its epilogue, the first takes the bias (and the
// original's residual, if it had one), the last applies the original's activation. The
// concatenated tensor is never written: the concatenation's copies (writing the whole tensor,
// its reader reading it) give way to the partial sums' (writing and reading the convolution's
// output once per extra piece). Where the output is much smaller than the input (SqueezeNet's
// squeeze layers: 128 channels in, 16 out) that moves a fraction of the bytes.
//
// First, a channel concatenation (one that copies) read only by a pooling layer moves below it
// (pooling works per channel: pool(concat(A_0, A_1)) = concat(pool(A_0), pool(A_1))): the copy
// then moves the pooled, smaller tensors, and where a convolution reads the pooled result
// (SqueezeNet's fire modules after a max pool) the split applies to it.
//
// It runs last, after the layout pass, because whether the concatenation costs anything depends
// on the memory format: a linear (NCHW) concatenation along the channels of one image is elided
// by the planner (its inputs are written in place, src/plan/execution_plan.h), a channels-last
// one or one of several images is a copy. Only those are split.
//
// Conditions: the convolution has one group and constant float32 weights (a constant bias or
// none); its input is a Concatenation along axis 1 of 2..8 tensors that are not constants, read
// by nothing else and not a network output; every tensor involved is float32 with static channel
// counts at every shape point; and at the first point the partial sums' traffic is at most
// kMaxSumTraffic of the concatenation's (see below). On CUDA the pass does nothing: it was
// measured on the CPU only.
#include <algorithm>
#include <string>
#include <vector>

#include "src/builder/passes/pass_utils.h"
#include "src/builder/passes/passes.h"
#include "src/core/text.h"
#include "src/ir/conv_params.h"
#include "src/ir/op_params.h"

namespace kiln {
namespace {

constexpr int kMaxPieces = 8;
// The partial sums' bytes (2 (n - 1) |y|: each extra piece writes and reads the output) over the
// concatenation's (2 |x|: it writes the tensor, its reader reads it) at which the split is still
// made. SqueezeNet's squeeze layers (128 -> 16, 256 -> 32, 384 -> 48: 1/8; 384 -> 64: 1/6) gain;
// its classifier (512 -> 1000 at the same size: 2x) would not.
constexpr double kMaxSumTraffic = 0.25;

struct Split {
  Layer* concat = nullptr;
  std::vector<int64_t> channels;  // per piece
};

bool float32_everywhere(const passes::ShapeTable& table, const Tensor* t) {
  return table.has_type(t, DataType::kFloat32);
}

// The static extent of axis 1 of t at every shape point; -1 when it varies or is unknown.
int64_t static_channels(const passes::ShapeTable& table, const Tensor* t) {
  int64_t c = -1;
  for (int p = 0; p < table.num_points(); ++p) {
    const TensorState* s = table.state(p, t);
    if (!s || s->dims.rank() != 4 || s->dims[1] < 1 || (c >= 0 && s->dims[1] != c)) return -1;
    c = s->dims[1];
  }
  return c;
}

// The element count of t at a shape point, in double (hostile dims must not overflow); -1 when
// unknown.
double volume_at(const passes::ShapeTable& table, int point, const Tensor* t) {
  const TensorState* s = table.state(point, t);
  if (!s || s->dims.rank() != 4) return -1;
  double v = 1;
  for (int k = 0; k < 4; ++k) {
    if (s->dims[k] < 0) return -1;
    v *= static_cast<double>(s->dims[k]);
  }
  return v;
}

// Whether the channel concatenation producing x copies at some shape point: the planner elides a
// linear one where the channels are the outermost axis with extent > 1 (one image).
bool copied(const passes::ShapeTable& table, const Tensor* x) {
  if (x->format() != TensorFormat::kLinear) return true;
  for (int p = 0; p < table.num_points(); ++p) {
    const TensorState* st = table.state(p, x);
    if (st && st->dims.rank() == 4 && st->dims[0] != 1) return true;
  }
  return false;
}

// The concatenation producing `reader`'s input 0 and its pieces' channel counts, when it is a
// channel concatenation (axis 1) of 2..kMaxPieces tensors that are neither constants nor known on
// the host, with static channel counts, read only by `reader` (so not a network output), and a
// copy rather than elided; null otherwise.
Layer* copying_channel_concat(const passes::ShapeTable& table, const Layer* reader, std::vector<int64_t>* channels) {
  Tensor* x = reader->input(0);
  Layer* concat = x ? x->producer() : nullptr;
  if (!concat || concat->type() != kLayerConcatenation || passes::sole_consumer(x) != reader) return nullptr;
  int64_t axis = concat->attrs().get_int("axis", 1);
  if (axis < 0) axis += 4;
  const int n = concat->num_inputs();
  if (axis != 1 || n < 2 || n > kMaxPieces || !copied(table, x)) return nullptr;
  channels->clear();
  for (int i = 0; i < n; ++i) {
    const Tensor* a = concat->input(i);
    if (!a || passes::is_constant(a)) return nullptr;
    const TensorState* s = table.state(0, a);
    if (!s || s->value) return nullptr;  // host-known: left to constant folding's world
    const int64_t c = static_channels(table, a);
    if (c < 0) return nullptr;
    channels->push_back(c);
  }
  return concat;
}

bool match(const passes::ShapeTable& table, Layer* conv, Split* split) {
  if (conv->type() != kLayerConvolution || conv->num_inputs() < 2 || conv->num_outputs() != 1) return false;
  const ConvParams& params = params_of<ConvParams>(*conv);
  if (params.deconv || params.group != 1) return false;
  const HostTensor* w = passes::constant_value(conv->input(1));
  if (!w || w->type() != DataType::kFloat32 || w->dims().rank() != 4) return false;
  Tensor* bias = conv->num_inputs() > 2 ? conv->input(2) : nullptr;
  if (bias && !passes::constant_value(bias)) return false;
  std::vector<int64_t> channels;
  Layer* concat = copying_channel_concat(table, conv, &channels);
  if (!concat) return false;
  Tensor* x = conv->input(0);
  for (int i = 1; i < conv->num_inputs(); ++i) {
    if (conv->input(i) == x) return false;  // read once, not also as its residual
  }
  const int n = concat->num_inputs();
  if (!float32_everywhere(table, x) || !float32_everywhere(table, conv->output(0))) return false;
  int64_t sum = 0;
  for (int i = 0; i < n; ++i) {
    const int64_t c = channels[static_cast<size_t>(i)];
    if (!float32_everywhere(table, concat->input(i))) return false;
    if (c > w->dims()[1] - sum) return false;  // the pieces add up to the weights' C, no more
    sum += c;
  }
  if (sum != w->dims()[1]) return false;
  const double x_volume = volume_at(table, 0, x), y_volume = volume_at(table, 0, conv->output(0));
  if (x_volume <= 0 || y_volume < 0) return false;
  if (2.0 * (n - 1) * y_volume > kMaxSumTraffic * 2.0 * x_volume) return false;
  split->concat = concat;
  split->channels = std::move(channels);
  return true;
}

// W[:, begin : begin + count] of OIHW weights.
HostTensor weight_slice(const HostTensor& w, int64_t begin, int64_t count) {
  const Dims& d = w.dims();
  const int64_t outputs = d[0], inputs = d[1], window = d[2] * d[3];
  HostTensor r(DataType::kFloat32, Dims{outputs, count, d[2], d[3]});
  const float* src = w.as<float>();
  float* dst = r.as<float>();
  for (int64_t o = 0; o < outputs; ++o) {
    std::copy_n(src + (o * inputs + begin) * window, count * window, dst + o * count * window);
  }
  return r;
}

// `name` itself where no layer has it yet, else a numbered variant.
std::string fresh_name(Network& network, const std::string& name) {
  return network.find_layer(name) ? network.unique_name(name) : name;
}

// The copying channel concatenation read only by `pool`, a one-input pooling layer whose output
// is at most its input's size at the first point; null otherwise.
Layer* concat_below_pooling(const passes::ShapeTable& table, Layer* pool) {
  if (pool->type() != kLayerPooling || pool->num_inputs() != 1 || pool->num_outputs() != 1) return nullptr;
  std::vector<int64_t> channels;
  Layer* concat = copying_channel_concat(table, pool, &channels);
  if (!concat) return nullptr;
  const double in = volume_at(table, 0, pool->input(0)), out = volume_at(table, 0, pool->output(0));
  if (in <= 0 || out < 0 || out > in) return nullptr;
  return concat;
}

// Moves each such concatenation below its pooling layer; returns how many.
int sink_below_pooling(Network& network, PassContext& ctx) {
  const passes::ShapeTable table(network, ctx);
  if (table.num_points() == 0) return 0;
  passes::GraphEditor editor(network);
  int changes = 0;
  for (Layer* pool : editor.snapshot()) {
    if (editor.removed(pool)) continue;
    Layer* concat = concat_below_pooling(table, pool);
    if (!concat) continue;
    const TensorFormat format = pool->output(0)->format();
    std::vector<Tensor*> pooled;
    for (int i = 0; i < concat->num_inputs(); ++i) {
      Layer* piece = network.add_layer(kLayerPooling, {concat->input(i)}, 1, pool->attrs(),
                                       fresh_name(network, pool->name() + ".part" + std::to_string(i)));
      if (pool->has_precision()) piece->set_precision(pool->precision());
      piece->output(0)->set_format(format);
      pooled.push_back(piece->output(0));
    }
    Layer* joined = network.add_layer(kLayerConcatenation, pooled, 1, concat->attrs(),
                                      fresh_name(network, concat->name() + ".pooled"));
    joined->output(0)->set_format(format);
    const std::string pool_name = pool->name(), concat_name = concat->name();
    editor.take_over(pool->output(0), joined->output(0));
    editor.remove_layer(pool);
    editor.remove_layer(concat);
    passes::log_change(ctx, "concat_conv_split: " + quote(pool_name) + " pools the " + std::to_string(pooled.size()) +
                                " inputs of " + quote(concat_name) + " and the concatenation follows it");
    ++changes;
  }
  if (changes > 0) network.sort_topologically();
  return changes;
}

}  // namespace

int pass_concat_conv_split(Network& network, PassContext& ctx) {
  if (ctx.config.device != DeviceType::kCPU) return 0;
  int changes = sink_below_pooling(network, ctx);
  const passes::ShapeTable table(network, ctx);
  if (table.num_points() == 0) return changes;
  passes::GraphEditor editor(network);
  for (Layer* conv : editor.snapshot()) {
    if (editor.removed(conv)) continue;
    Split split;
    if (!match(table, conv, &split)) continue;
    const HostTensor& w = *passes::constant_value(conv->input(1));
    Tensor* bias = conv->num_inputs() > 2 ? conv->input(2) : nullptr;
    const std::string name = conv->name();
    Tensor* sum = nullptr;
    int64_t begin = 0;
    Tensor* residual = conv->num_inputs() > kConvResidualInput ? conv->input(kConvResidualInput) : nullptr;
    const TensorFormat format = conv->output(0)->format();
    const size_t n = split.channels.size();
    for (size_t j = 0; j < n; ++j) {
      const std::string part = name + ".part" + std::to_string(j);
      Tensor* wj = editor.add_constant(weight_slice(w, begin, split.channels[j]), part + "_weights");
      begin += split.channels[j];
      Attributes attrs = conv->attrs();
      if (j + 1 < n) {
        for (const char* a : {"activation", "activation_alpha", "activation_beta"}) attrs.erase(a);
      }
      std::vector<Tensor*> inputs{split.concat->input(static_cast<int>(j)), wj, j == 0 ? bias : nullptr,
                                  j == 0 ? residual : sum};
      while (!inputs.back()) inputs.pop_back();
      Layer* piece = network.add_layer(kLayerConvolution, inputs, 1, std::move(attrs), fresh_name(network, part));
      if (conv->has_precision()) piece->set_precision(conv->precision());
      piece->output(0)->set_format(format);
      sum = piece->output(0);
    }
    const std::string concat_name = split.concat->name();
    Tensor* old_w = conv->input(1);
    editor.take_over(conv->output(0), sum);
    editor.remove_layer(conv);
    editor.remove_layer(split.concat);
    editor.drop_unused_constants({old_w, bias});
    passes::log_change(ctx, "concat_conv_split: " + quote(name) + " reads the " +
                                std::to_string(split.channels.size()) + " inputs of " + quote(concat_name) +
                                " directly (" + std::to_string(split.channels.size()) +
                                " convolutions, each adding the previous one's output; no concatenation)");
    ++changes;
  }
  if (changes > 0) network.sort_topologically();
  return changes;
}

}  // namespace kiln
