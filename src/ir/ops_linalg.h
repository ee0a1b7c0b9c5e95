// Layer types of linear algebra on the last two axes of a tensor (Det), for the ONNX importer
// and the kernels. Semantics: docs/layers.md.
#pragma once

// Det: x [*, M, M] (floating point) -> y [*], the determinant of each square matrix. Its name,
// kLayerDet, is public (kiln/network.h).
#include "kiln/network.h"
