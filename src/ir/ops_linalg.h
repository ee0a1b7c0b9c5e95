// Layer types of linear algebra on the last two axes of a tensor (Det), for the ONNX importer
// and the kernels. Semantics: docs/layers.md.
#pragma once

namespace kiln {

// Det: x [*, M, M] (floating point) -> y [*], the determinant of each square matrix.
inline constexpr const char* kLayerDet = "Det";

}  // namespace kiln
