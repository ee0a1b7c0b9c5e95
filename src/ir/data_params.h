// The parameters of the data-movement layers (ops_data.cpp): Shuffle, Concatenation, Split,
// Padding, Shape and Fill, decoded once from a layer's attributes (through the schema's
// with_params; enums by name into the public enums of kiln/network.h where one exists) and read
// by shape inference and every kernel (CPU reference and fast, CUDA). Constant's `value` is not
// decoded here: it is the layer's data (often large weights), not a parameter to validate.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "kiln/network.h"

namespace kiln {

enum class ReshapeMode : int32_t { kNone, kDims, kSqueeze, kUnsqueeze, kFlatten };

struct ShuffleParams {
  std::vector<int64_t> first_transpose;  // empty: none (checked against the rank at shape inference)
  ReshapeMode reshape_mode = ReshapeMode::kNone;
  std::vector<int64_t> reshape;           // kDims without a shape input
  bool zero_is_placeholder = true;        // kDims: 0 copies the input extent
  std::vector<int64_t> axes;              // kSqueeze / kUnsqueeze
  int64_t axis = 1;                       // kFlatten
  std::vector<int64_t> second_transpose;  // empty: none
  static ShuffleParams decode(const Layer& layer);
};

// Concatenation and Split: the axis as stored (may be negative; normalized against the rank at
// shape inference); Split's sizes when input 1 is absent (empty: equal parts).
struct ConcatenationParams {
  int64_t axis = 0;
  static ConcatenationParams decode(const Layer& layer);
};

struct SplitParams {
  int64_t axis = 0;
  std::vector<int64_t> split;
  static SplitParams decode(const Layer& layer);
};

struct PaddingParams {
  PaddingMode mode = PaddingMode::kConstant;
  static PaddingParams decode(const Layer& layer);
};

// Shape: the [start, end) slice of the input's dims, as stored (negative counts from the end).
struct ShapeParams {
  int64_t start = 0;
  int64_t end = std::numeric_limits<int64_t>::max();
  static ShapeParams decode(const Layer& layer);
};

struct FillParams {
  FillMode mode = FillMode::kConstant;
  // kConstant: one element giving the value and the output type (default float32 0).
  HostTensor value;
  static FillParams decode(const Layer& layer);
};

const char* to_string(ReshapeMode mode);
const char* to_string(PaddingMode mode);

}  // namespace kiln
