// Names of the layer-kind enums declared in include/kiln/network.h (activation kinds,
// element-wise, unary and reduce ops). These names are what networks, engine files and the
// docs use (docs/layers.md), so each enum value maps to exactly one name through a table;
// parsing an unknown name throws a kiln::Error that lists every valid name.
#include <string>
#include <string_view>
#include <utility>

#include "kiln/error.h"
#include "kiln/network.h"
#include "src/core/text.h"

namespace kiln {
namespace {

template <typename Enum>
using NameTable = std::initializer_list<std::pair<Enum, const char*>>;

constexpr NameTable<ActivationType> kActivationNames = {
    {ActivationType::kRelu, "relu"},
    {ActivationType::kSigmoid, "sigmoid"},
    {ActivationType::kTanh, "tanh"},
    {ActivationType::kLeakyRelu, "leaky_relu"},
    {ActivationType::kElu, "elu"},
    {ActivationType::kSelu, "selu"},
    {ActivationType::kSoftplus, "softplus"},
    {ActivationType::kClip, "clip"},
    {ActivationType::kHardSigmoid, "hard_sigmoid"},
    {ActivationType::kHardSwish, "hard_swish"},
    {ActivationType::kSilu, "silu"},
    {ActivationType::kGeluErf, "gelu_erf"},
    {ActivationType::kGeluTanh, "gelu_tanh"},
    {ActivationType::kMish, "mish"},
    {ActivationType::kSoftsign, "softsign"},
    {ActivationType::kCelu, "celu"},
    {ActivationType::kThresholdedRelu, "thresholded_relu"},
    {ActivationType::kSwish, "swish"},
};

constexpr NameTable<ElementWiseOp> kElementWiseNames = {
    {ElementWiseOp::kSum, "sum"},
    {ElementWiseOp::kSub, "sub"},
    {ElementWiseOp::kProd, "prod"},
    {ElementWiseOp::kDiv, "div"},
    {ElementWiseOp::kPow, "pow"},
    {ElementWiseOp::kMax, "max"},
    {ElementWiseOp::kMin, "min"},
    {ElementWiseOp::kMod, "mod"},
    {ElementWiseOp::kFloorDiv, "floor_div"},
    {ElementWiseOp::kEqual, "equal"},
    {ElementWiseOp::kLess, "less"},
    {ElementWiseOp::kGreater, "greater"},
    {ElementWiseOp::kLessOrEqual, "less_or_equal"},
    {ElementWiseOp::kGreaterOrEqual, "greater_or_equal"},
    {ElementWiseOp::kAnd, "and"},
    {ElementWiseOp::kOr, "or"},
    {ElementWiseOp::kXor, "xor"},
};

constexpr NameTable<UnaryOp> kUnaryNames = {
    {UnaryOp::kExp, "exp"},     {UnaryOp::kLog, "log"},     {UnaryOp::kSqrt, "sqrt"},   {UnaryOp::kRecip, "recip"},
    {UnaryOp::kAbs, "abs"},     {UnaryOp::kNeg, "neg"},     {UnaryOp::kFloor, "floor"}, {UnaryOp::kCeil, "ceil"},
    {UnaryOp::kRound, "round"}, {UnaryOp::kSin, "sin"},     {UnaryOp::kCos, "cos"},     {UnaryOp::kTan, "tan"},
    {UnaryOp::kAsin, "asin"},   {UnaryOp::kAcos, "acos"},   {UnaryOp::kAtan, "atan"},   {UnaryOp::kSinh, "sinh"},
    {UnaryOp::kCosh, "cosh"},   {UnaryOp::kTanh, "tanh"},   {UnaryOp::kAsinh, "asinh"}, {UnaryOp::kAcosh, "acosh"},
    {UnaryOp::kAtanh, "atanh"}, {UnaryOp::kErf, "erf"},     {UnaryOp::kNot, "not"},     {UnaryOp::kSign, "sign"},
    {UnaryOp::kIsNaN, "isnan"}, {UnaryOp::kIsInf, "isinf"},
};

constexpr NameTable<ReduceOp> kReduceNames = {
    {ReduceOp::kSum, "sum"},        {ReduceOp::kMean, "mean"},
    {ReduceOp::kMax, "max"},        {ReduceOp::kMin, "min"},
    {ReduceOp::kProd, "prod"},      {ReduceOp::kL1, "l1"},
    {ReduceOp::kL2, "l2"},          {ReduceOp::kSumSquare, "sum_square"},
    {ReduceOp::kLogSum, "log_sum"}, {ReduceOp::kLogSumExp, "log_sum_exp"},
};

template <typename Enum>
const char* name_of(NameTable<Enum> table, Enum value) {
  for (const auto& [v, name] : table) {
    if (v == value) return name;
  }
  // Only reachable for a value cast from an out-of-range integer.
  return "unknown";
}

template <typename Enum>
Enum parse_name(NameTable<Enum> table, std::string_view name, const char* what) {
  for (const auto& [v, n] : table) {
    if (name == n) return v;
  }
  std::string valid;
  for (const auto& entry : table) {
    if (!valid.empty()) valid += ", ";
    valid += entry.second;
  }
  throw Error("unknown " + std::string(what) + " " + quote(std::string(name)) + "; valid names: " + valid);
}

}  // namespace

const char* to_string(ActivationType type) { return name_of(kActivationNames, type); }
ActivationType parse_activation_type(std::string_view name) {
  return parse_name(kActivationNames, name, "activation kind");
}

const char* to_string(ElementWiseOp op) { return name_of(kElementWiseNames, op); }
ElementWiseOp parse_elementwise_op(std::string_view name) {
  return parse_name(kElementWiseNames, name, "element-wise op");
}

const char* to_string(UnaryOp op) { return name_of(kUnaryNames, op); }
UnaryOp parse_unary_op(std::string_view name) { return parse_name(kUnaryNames, name, "unary op"); }

const char* to_string(ReduceOp op) { return name_of(kReduceNames, op); }
ReduceOp parse_reduce_op(std::string_view name) { return parse_name(kReduceNames, name, "reduce op"); }

}  // namespace kiln
