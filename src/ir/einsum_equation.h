// The einsum equation of an Einsum layer ("bij,bjk->bik", "...ii->...i", "i,i"), parsed against
// the operands' dims into labelled axes. Shared by the layer's shape inference
// (src/ir/ops_einsum.cpp) and its kernels, so that both read an equation the same way.
//
// Rules (numpy's, as ONNX specifies): letters a-z and A-Z label axes; "..." stands for the
// leading axes an operand has beyond its letters (right-aligned and broadcast across operands);
// a letter repeated within one operand takes its diagonal; letters absent from the output are
// summed over. Without "->" the output is the broadcast "..." axes followed by the letters that
// occur exactly once, in ASCII order. Extents of one label must agree, except that 1 broadcasts.
#pragma once

#include <string>
#include <vector>

#include "kiln/types.h"

namespace kiln {

// One term of an equation: its letters and where "..." stood (-1: absent).
struct EinsumTerm {
  std::string letters;
  int ellipsis_at = -1;  // number of letters before the "..."
};

// An equation parsed and checked on its own (characters, "..." at most once per term, output
// labels that occur in some operand, once): what does not depend on the operands' dims.
struct EinsumEquation {
  std::string text;                  // as written (for messages)
  std::vector<EinsumTerm> operands;  // one term per operand
  bool explicit_output = false;      // "->" given
  EinsumTerm output;                 // when explicit_output
};

// Throws kiln::Error saying what is wrong with the equation (the caller adds the layer's name).
EinsumEquation parse_einsum_equation(const std::string& equation);

struct EinsumPlan {
  // Every label: the letters in order of first appearance, then one label per "..." axis.
  std::vector<int64_t> label_sizes;
  // Per operand, per axis: its label.
  std::vector<std::vector<int>> operand_labels;
  // Per output axis: its label.
  std::vector<int> output_labels;
  Dims output_dims;
};

// The equation applied to operands of these dims. Throws kiln::Error saying what does not fit
// (the caller adds the layer's name).
EinsumPlan plan_einsum(const EinsumEquation& equation, const std::vector<Dims>& operand_dims);
// parse_einsum_equation, then plan_einsum.
EinsumPlan plan_einsum(const std::string& equation, const std::vector<Dims>& operand_dims);

}  // namespace kiln
