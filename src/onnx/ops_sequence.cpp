// ONNX sequence importers: SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceErase,
// SequenceAt, SequenceLength, SplitToSequence and ConcatFromSequence. kiln's IR has no sequence
// type, so every sequence is resolved while importing into an ordered list of kiln tensors
// (OnnxImportState::sequences). Hence positions (and SplitToSequence's element count) must be
// known then, the way TensorRT treats shape tensors: a non-constant position is an error with
// the message `kiln conformance` recognises to feed that graph input as a constant. Sequences
// cannot be graph inputs or outputs (onnx_importer.cpp reports those). The tensors themselves
// stay in layers: SplitToSequence becomes a Split (plus Squeezes for keepdims=0),
// ConcatFromSequence a Concatenation (plus Unsqueezes for new_axis=1), SequenceAt an Identity.
#include <limits>
#include <map>
#include <optional>

#include "src/ir/shape_inference.h"
#include "src/onnx/onnx_import_context.h"
#include "src/core/text.h"

namespace kiln {
namespace {

using SequenceElement = OnnxImportState::SequenceElement;
using Elements = std::vector<SequenceElement>;

constexpr const char* kAllTypes = "every kiln type (float32/16/64, int8, uint8, int32, int64, bool)";
constexpr const char* kPositionNote =
    "sequences are resolved while importing: 'position' must be a constant, and a sequence cannot be a graph "
    "input or output";

std::string str(int64_t v) { return std::to_string(v); }

// The elements of sequence input i; fails naming the input when it is not a sequence.
const Elements& input_sequence(NodeContext& ctx, int i) {
  if (!ctx.has_input(i)) ctx.fail("required input " + str(i) + " (input_sequence) is missing");
  const std::string name = ctx.input_name(i);
  const OnnxImportState& state = ctx.state();
  auto it = state.sequences.find(name);
  if (it != state.sequences.end()) return it->second.elements;
  if (state.tensors.count(name) || state.constants.count(name)) {
    ctx.fail("input " + quote(name) + " is a tensor, but this op reads a sequence");
  }
  ctx.fail("input " + quote(name) + " is not produced by any earlier node (is the graph topologically sorted?)");
}

void set_output_sequence(NodeContext& ctx, Elements elements) {
  if (!ctx.has_output(0)) return;
  const std::string& name = ctx.output_name(0);
  OnnxImportState& state = ctx.state();
  if (state.tensors.count(name) || state.constants.count(name) || state.sequences.count(name)) {
    ctx.fail("output " + quote(name) + " is already defined by an earlier node, initializer or graph input");
  }
  state.sequences[name] = {std::move(elements), ctx.name(), ctx.op_type()};
}

// Input i as a sequence element: a constant stays a constant (by its ONNX name).
SequenceElement element_of_input(NodeContext& ctx, int i, const std::string& what) {
  if (ctx.constant(i)) return {nullptr, ctx.input_name(i)};
  return {ctx.required_input(i, what), ""};
}

// The element as a kiln tensor (a constant becomes a Constant layer on first use).
Tensor* element_tensor(NodeContext& ctx, const SequenceElement& e) {
  return e.tensor ? e.tensor : ctx.state().tensor(e.constant);
}

// Input i as a position into a sequence of n elements: a constant int32/int64 scalar (or one
// element), negative counting from the back; valid in [-n, n - 1], or [-n, n] when inserting
// (n appends). Returns it in [0, n) (or [0, n]).
int64_t position_input(NodeContext& ctx, int i, int64_t n, bool inserting) {
  const HostTensor& value = ctx.constant_input(i, "position");
  if (value.count() != 1 || (value.type() != DataType::kInt32 && value.type() != DataType::kInt64)) {
    ctx.fail("input " + quote(ctx.input_name(i)) + " (position) must be one int32 or int64 value, got " +
             to_string(value.type()) + " " + value.dims().to_string());
  }
  const int64_t p = value.to_int64()[0];
  const int64_t last = inserting ? n : n - 1;
  if (n == 0 && !inserting) ctx.fail("position " + str(p) + " of an empty sequence");
  if (p < -n || p > last) {
    ctx.fail("position " + str(p) + " is out of range [" + str(-n) + ", " + str(last) + "] for a sequence of " +
             str(n) + " tensors");
  }
  return p < 0 ? p + n : p;
}

void import_sequence_empty(NodeContext& ctx) { set_output_sequence(ctx, {}); }

void import_sequence_construct(NodeContext& ctx) {
  Elements elements;
  for (int i = 0; i < ctx.num_inputs(); ++i) elements.push_back(element_of_input(ctx, i, "inputs"));
  if (elements.empty()) ctx.fail("needs at least one input");
  set_output_sequence(ctx, std::move(elements));
}

void import_sequence_insert(NodeContext& ctx) {
  Elements elements = input_sequence(ctx, 0);
  const auto n = static_cast<int64_t>(elements.size());
  const SequenceElement element = element_of_input(ctx, 1, "tensor");
  const int64_t p = ctx.has_input(2) ? position_input(ctx, 2, n, true) : n;
  elements.insert(elements.begin() + p, element);
  set_output_sequence(ctx, std::move(elements));
}

void import_sequence_erase(NodeContext& ctx) {
  Elements elements = input_sequence(ctx, 0);
  const auto n = static_cast<int64_t>(elements.size());
  if (n == 0) ctx.fail("cannot erase from an empty sequence");
  const int64_t p = ctx.has_input(1) ? position_input(ctx, 1, n, false) : n - 1;
  elements.erase(elements.begin() + p);
  set_output_sequence(ctx, std::move(elements));
}

void import_sequence_at(NodeContext& ctx) {
  const Elements& elements = input_sequence(ctx, 0);
  const SequenceElement e =
      elements[static_cast<size_t>(position_input(ctx, 1, static_cast<int64_t>(elements.size()), false))];
  if (!e.tensor) {
    ctx.set_output_constant(0, ctx.state().constants.at(e.constant).value);
    return;
  }
  // A copy: the element keeps its own name (it may be a graph input or read again).
  ctx.set_output(0, ctx.add_layer(kLayerIdentity, {e.tensor}, 1)->output(0));
}

void import_sequence_length(NodeContext& ctx) {
  const auto n = static_cast<int64_t>(input_sequence(ctx, 0).size());
  ctx.set_output_constant(0, HostTensor::from_vector(DataType::kInt64, Dims{}, std::vector<int64_t>{n}));
}

// ---- SplitToSequence ----------------------------------------------------------------------------

// The extent of input 0 along `axis` when known now: recorded in the model (graph input,
// value_info, constant), or inferred from the network built so far when every network input has
// static dims.
std::optional<int64_t> static_extent(NodeContext& ctx, int64_t axis) {
  auto extent_in = [&](const Dims& d) -> std::optional<int64_t> {
    if (axis < -d.rank() || axis >= d.rank()) {
      ctx.fail("axis " + str(axis) + " is out of range for input " + quote(ctx.input_name(0)) + " of dims " +
               d.to_string());
    }
    const int64_t e = d[static_cast<int>(axis < 0 ? axis + d.rank() : axis)];
    return e == kDynamic ? std::nullopt : std::optional<int64_t>(e);
  };
  if (const auto d = ctx.input_dims(0)) {
    if (auto e = extent_in(*d)) return e;
  }
  const Network& network = ctx.network();
  std::map<std::string, Dims> input_dims;
  for (int i = 0; i < network.num_inputs(); ++i) {
    if (network.input(i)->dims().is_dynamic()) return std::nullopt;
    input_dims[network.input(i)->name()] = network.input(i)->dims();
  }
  try {
    const TensorStates states = infer_shapes(network, input_dims);
    auto it = states.find(ctx.input(0));
    if (it != states.end()) return extent_in(it->second.dims);
  } catch (const Error&) {
    // Not inferable now (e.g. a layer needs a value only known at run time): the caller says so.
  }
  return std::nullopt;
}

int64_t required_extent(NodeContext& ctx, int64_t axis, const std::string& why) {
  const auto extent = static_extent(ctx, axis);
  if (!extent) {
    ctx.fail(why + ", so kiln needs the extent of axis " + str(axis) + " of input '" + ctx.input_name(0) +
             "' when importing, and it is not static or not recorded in the model; run "
             "onnx.shape_inference.infer_shapes on the model, fix the input's dims, or give 'split' as a constant 1-D "
             "tensor");
  }
  return *extent;
}

// The most tensors one SplitToSequence makes (each is an output of one Split layer): a hostile
// or broken model's axis of 2^30 would otherwise make the importer allocate gigabytes.
constexpr int64_t kMaxSequenceSplit = int64_t{1} << 16;

void check_split_count(NodeContext& ctx, int64_t count, const std::string& what) {
  if (count > kMaxSequenceSplit) {
    ctx.fail(what + " would make " + str(count) + " tensors, more than kiln's limit of " + str(kMaxSequenceSplit) +
             " for one SplitToSequence; split into fewer, larger pieces");
  }
}

void import_split_to_sequence(NodeContext& ctx) {
  Tensor* x = ctx.required_input(0, "input");
  const int64_t axis = ctx.attr_int("axis", 0);
  std::vector<int64_t> sizes;     // the split, when known now
  Tensor* split_input = nullptr;  // else a 1-D split of known length, read when shapes are inferred
  int64_t count = 0;
  bool squeeze = false;
  if (!ctx.has_input(1)) {
    // One tensor per index of the axis; keepdims=0 drops the axis (it is ignored when 'split' is given).
    const int64_t extent = required_extent(ctx, axis, "without 'split' there is one tensor per index");
    check_split_count(ctx, extent, "one tensor per index of axis " + str(axis) + " (extent " + str(extent) + ")");
    sizes.assign(static_cast<size_t>(extent), 1);
    squeeze = ctx.attr_int("keepdims", 1) == 0;
  } else if (const HostTensor* split = ctx.constant(1)) {
    if (split->type() != DataType::kInt32 && split->type() != DataType::kInt64) {
      ctx.fail("input " + quote(ctx.input_name(1)) + " (split) must be int32 or int64, got " +
               to_string(split->type()));
    }
    const std::vector<int64_t> values = split->to_int64();
    if (split->dims().rank() == 0) {
      // Chunks of that length, the last one smaller when the extent is not a multiple.
      const int64_t chunk = values[0];
      if (chunk <= 0) ctx.fail("a scalar 'split' must be > 0, got " + str(chunk));
      const int64_t extent = required_extent(ctx, axis, "a scalar 'split' gives ceil(extent / split) tensors");
      check_split_count(ctx, extent / chunk + (extent % chunk ? 1 : 0),
                        "a scalar 'split' of " + str(chunk) + " over extent " + str(extent));
      sizes.assign(static_cast<size_t>(extent / chunk), chunk);
      if (extent % chunk) sizes.push_back(extent % chunk);
    } else if (split->dims().rank() == 1) {
      sizes = values;
      int64_t sum = 0;
      check_split_count(ctx, static_cast<int64_t>(sizes.size()), "'split' of " + str(sizes.size()) + " values");
      for (int64_t s : sizes) {
        if (s < 0) ctx.fail("'split' values must be >= 0, got " + split->dims().to_string() + " values with " + str(s));
        if (s > std::numeric_limits<int64_t>::max() - sum) ctx.fail("'split' values overflow 64-bit sizes");
        sum += s;
      }
      if (const auto extent = static_extent(ctx, axis); extent && *extent != sum) {
        ctx.fail("'split' sums to " + str(sum) + " but axis " + str(axis) + " of input '" + ctx.input_name(0) +
                 "' has extent " + str(*extent));
      }
    } else {
      ctx.fail("input " + quote(ctx.input_name(1)) + " (split) must be a scalar or 1-D, got dims " +
               split->dims().to_string());
    }
  } else {
    // The element count must be known now; a 1-D split of recorded length keeps its values dynamic.
    const auto d = ctx.input_dims(1);
    if (!d || d->rank() != 1 || (*d)[0] == kDynamic) ctx.constant_input(1, "split");  // throws
    split_input = ctx.input(1);
    count = (*d)[0];
    check_split_count(ctx, count, "a 'split' input of " + str(count) + " values");
  }
  if (!split_input) count = static_cast<int64_t>(sizes.size());

  Elements elements;
  if (count > 0) {
    Attributes a;
    a.set("axis", axis);
    if (!split_input) a.set("split", sizes);
    std::vector<Tensor*> inputs{x};
    if (split_input) inputs.push_back(split_input);
    Layer* split = ctx.add_layer(kLayerSplit, inputs, static_cast<int>(count), std::move(a));
    for (int k = 0; k < count; ++k) {
      Tensor* t = split->output(k);
      if (squeeze) {
        Attributes s;
        s.set("reshape_mode", std::string("squeeze"));
        s.set("axes", std::vector<int64_t>{axis});
        t = ctx.add_layer(kLayerShuffle, {t}, 1, std::move(s), "squeeze_" + str(k))->output(0);
      }
      elements.push_back({t, ""});
    }
  }
  set_output_sequence(ctx, std::move(elements));
}

// ---- ConcatFromSequence --------------------------------------------------------------------------

void import_concat_from_sequence(NodeContext& ctx) {
  const Elements& elements = input_sequence(ctx, 0);
  if (!ctx.has_attr("axis")) ctx.fail("attribute 'axis' is required");
  const int64_t axis = ctx.attr_int("axis", 0);
  const int64_t new_axis = ctx.attr_int("new_axis", 0);
  if (new_axis != 0 && new_axis != 1) ctx.fail("attribute 'new_axis' must be 0 or 1, got " + str(new_axis));
  if (elements.empty())
    ctx.fail("the sequence " + quote(ctx.input_name(0)) + " is empty; there is nothing to concatenate");
  std::vector<Tensor*> inputs;
  for (size_t k = 0; k < elements.size(); ++k) {
    Tensor* t = element_tensor(ctx, elements[k]);
    if (new_axis) {
      // Unsqueeze and Concatenation both count a negative axis from the end of the output's
      // rank (r + 1), as ConcatFromSequence does with new_axis=1.
      Attributes u;
      u.set("reshape_mode", std::string("unsqueeze"));
      u.set("axes", std::vector<int64_t>{axis});
      t = ctx.add_layer(kLayerShuffle, {t}, 1, std::move(u), "unsqueeze_" + std::to_string(k))->output(0);
    }
    inputs.push_back(t);
  }
  Attributes a;
  a.set("axis", axis);
  ctx.set_output(0, ctx.add_layer(kLayerConcatenation, inputs, 1, std::move(a))->output(0));
}

}  // namespace

KILN_REGISTER_ONNX_IMPORTER("SequenceEmpty", import_sequence_empty,
                            {.min_opset = 11, .types = kAllTypes, .notes = "a sequence cannot be a graph output"});
KILN_REGISTER_ONNX_IMPORTER("SequenceConstruct", import_sequence_construct,
                            {.min_opset = 11, .types = kAllTypes, .notes = "a sequence cannot be a graph output"});
KILN_REGISTER_ONNX_IMPORTER("SequenceInsert", import_sequence_insert,
                            {.min_opset = 11, .types = kAllTypes, .notes = kPositionNote});
KILN_REGISTER_ONNX_IMPORTER("SequenceErase", import_sequence_erase,
                            {.min_opset = 11, .types = kAllTypes, .notes = kPositionNote});
KILN_REGISTER_ONNX_IMPORTER("SequenceAt", import_sequence_at,
                            {.min_opset = 11, .types = kAllTypes, .notes = kPositionNote});
KILN_REGISTER_ONNX_IMPORTER("SequenceLength", import_sequence_length,
                            {.min_opset = 11, .types = kAllTypes, .notes = "a sequence cannot be a graph input"});
KILN_REGISTER_ONNX_IMPORTER("SplitToSequence", import_split_to_sequence,
                            {.min_opset = 11,
                             .types = kAllTypes,
                             .notes = "without 'split' or with a scalar 'split' the axis extent must be static; a "
                                      "non-constant 'split' must be 1-D of recorded length"});
KILN_REGISTER_ONNX_IMPORTER("ConcatFromSequence", import_concat_from_sequence,
                            {.min_opset = 11, .types = kAllTypes, .notes = "a sequence cannot be a graph input"});

}  // namespace kiln
