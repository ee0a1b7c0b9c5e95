// The parameters of the element-wise family: Activation, Unary, ElementWise, SoftMax, Scale, Cast
// and BitShift, decoded once from a layer's attributes (through the schema's with_params) into
// the public enums (ActivationType, UnaryOp, ElementWiseOp, ScaleMode, DataType,
// BitShiftDirection) and read by shape inference and every kernel (CPU reference, fast and
// oneDNN kernels, CUDA).
#pragma once

#include <cstdint>

#include "kiln/network.h"

namespace kiln {

struct ActivationParams {
  ActivationType kind = ActivationType::kRelu;
  double alpha = 0.0, beta = 0.0;  // the kind's parameters (docs/layers.md)
  static ActivationParams decode(const Layer& layer);
};

struct UnaryParams {
  UnaryOp op = UnaryOp::kAbs;
  static UnaryParams decode(const Layer& layer);
};

struct ElementWiseParams {
  ElementWiseOp op = ElementWiseOp::kSum;
  bool fmod = false;  // mod: the sign of the dividend (C fmod) rather than of the divisor
  static ElementWiseParams decode(const Layer& layer);
};

struct SoftMaxParams {
  int64_t axis = -1;  // not yet normalized (the input's rank is known at shape inference)
  bool log = false;   // log-softmax
  static SoftMaxParams decode(const Layer& layer);
};

struct ScaleParams {
  ScaleMode mode = ScaleMode::kUniform;
  int64_t channel_axis = 1;  // kChannel; not yet normalized (the input's rank is known at shape inference)
  static ScaleParams decode(const Layer& layer);
};

struct CastParams {
  DataType to = DataType::kFloat32;
  static CastParams decode(const Layer& layer);
};

struct BitShiftParams {
  BitShiftDirection direction = BitShiftDirection::kLeft;
  static BitShiftParams decode(const Layer& layer);
};

const char* to_string(ScaleMode mode);

}  // namespace kiln
