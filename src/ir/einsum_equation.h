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

struct EinsumPlan {
  // Every label: the letters in order of first appearance, then one label per "..." axis.
  std::vector<int64_t> label_sizes;
  // Per operand, per axis: its label.
  std::vector<std::vector<int>> operand_labels;
  // Per output axis: its label.
  std::vector<int> output_labels;
  Dims output_dims;
};

// Throws kiln::Error saying what is wrong with the equation (the caller adds the layer's name).
EinsumPlan plan_einsum(const std::string& equation, const std::vector<Dims>& operand_dims);

}  // namespace kiln
