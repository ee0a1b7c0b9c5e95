// The program of a FusedElementWise layer (made by src/builder/passes/elementwise_fusion.cpp):
// its text form, the parser shared by the schema (ops_fused.cpp), the kernels and the tests, and
// the writers the fusion pass uses.
//
// A program is a list of strings, one instruction each, in register form (SSA): registers
// r0..r{n-1} hold the layer's n inputs at the current element, and instruction k defines
// register r{n+k}. The layer's output is the register of the last instruction. Instructions:
//
//   const <v>                         the number v
//   act <kind> r<x> <alpha> <beta>    Activation of kind <kind> (docs/layers.md) on r<x>
//   unary <op> r<x>                   Unary op (float-valued ops only: not/isnan/isinf are excluded)
//   binary <op> r<a> r<b>             ElementWise op a <op> b, op in sum sub prod div pow max min
//   scale r<x> <scale> <shift> <power>  (x*scale + shift)^power (Scale layer, uniform mode)
//
// Numbers are written in the shortest decimal form that reads back to the same double. Operand
// registers must be defined before use. Every input is either shaped like the output or holds a
// single element (broadcast). Everything is computed in float32.
//
// Example, GELU (erf) of input r0, 0.5 * x * (1 + erf(x / sqrt 2)):
//   ["const 1.4142135623730951", "binary div r0 r1", "unary erf r2", "const 1", "binary sum r3 r4",
//    "binary prod r0 r5", "const 0.5", "binary prod r6 r7"]
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/network.h"

namespace kiln {

enum class FusedOpCode : int32_t { kConst, kActivation, kUnary, kBinary, kScale };

struct FusedInstr {
  FusedOpCode code = FusedOpCode::kConst;
  int32_t op = 0;  // ActivationType, UnaryOp or ElementWiseOp value, by code
  int32_t a = -1;  // operand registers
  int32_t b = -1;
  double p0 = 0.0, p1 = 0.0, p2 = 0.0;  // const: value; act: alpha, beta; scale: scale, shift, power
};

struct FusedProgram {
  int num_inputs = 0;
  std::vector<FusedInstr> instrs;
  int num_registers() const { return num_inputs + static_cast<int>(instrs.size()); }
  // The typed params of a FusedElementWise layer (src/ir/op_params.h): its attribute `program`
  // parsed once for the layer's inputs, read by shape inference and the kernels through
  // params_of<FusedProgram>.
  static FusedProgram decode(const Layer& layer);
};

// Parses and checks a program for a layer with num_inputs inputs. Throws kiln::Error starting with
// `where` (e.g. "layer 'x' (FusedElementWise)") that quotes the bad instruction.
FusedProgram parse_fused_program(const std::vector<std::string>& text, int num_inputs, const std::string& where);

// Whether an op can appear in a program (float in, float out).
bool fused_unary_supported(UnaryOp op);
bool fused_binary_supported(ElementWiseOp op);

// Instruction writers (the inverse of the parser).
std::string fused_number(double value);
std::string fused_const(double value);
std::string fused_activation(ActivationType kind, int x, double alpha, double beta);
std::string fused_unary(UnaryOp op, int x);
std::string fused_binary(ElementWiseOp op, int a, int b);
std::string fused_scale(int x, double scale, double shift, double power);

}  // namespace kiln
