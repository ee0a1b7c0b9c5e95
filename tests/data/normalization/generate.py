#!/usr/bin/env python3
"""Generates the ONNX Runtime reference data of tests/ops_normalization_test.cpp.

One small ONNX model per case (LayerNormalization, InstanceNormalization, GroupNormalization,
MeanVarianceNormalization, LpNormalization, LRN, over their opsets, attributes and types), run by
ONNX Runtime's CPU provider; see tests/data/onnx_cases.py for the files. Rerun from the repository
root:
    python3 tests/data/normalization/generate.py
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from onnx_cases import CaseWriter  # noqa: E402

w = CaseWriter(HERE, 20240701)
rand = w.rand

# ---- LayerNormalization: every axis of a 4-D input, odd sizes, all three outputs ---------------
x = rand((2, 3, 5, 7), -3.0, 3.0) + 1.5  # a non-zero mean
for axis in (-1, -2, 1, 0):
    norm_shape = x.shape[axis:]
    w.node(f"layernorm_axis{axis}".replace("-", "m"), "LayerNormalization",
           [x, rand(norm_shape, 0.5, 1.5), rand(norm_shape)], attrs={"axis": axis}, outputs=3, opset=17,
           rtol=1e-4, atol=1e-5)
w.node("layernorm_no_bias_eps", "LayerNormalization", [rand((3, 13)), rand((13,), 0.5, 1.5)],
       attrs={"epsilon": 0.1}, outputs=1, opset=17, rtol=1e-4, atol=1e-5)
w.node("layernorm_broadcast_scale_dynamic", "LayerNormalization", [rand((2, 4, 6)), rand((1, 6), 0.5, 1.5), rand((6,))],
       attrs={"axis": -2}, outputs=1, opset=17, dynamic=True, rtol=1e-4, atol=1e-5)
xd = rand((2, 3, 11)).astype(np.float64)
w.node("layernorm_f64", "LayerNormalization", [xd, rand((11,), 0.5, 1.5, np.float64), rand((11,), dtype=np.float64)],
       outputs=1, opset=17, rtol=1e-9, atol=1e-10)
xh = rand((2, 3, 16)).astype(np.float16)
w.node("layernorm_f16", "LayerNormalization", [xh, rand((16,), 0.5, 1.5, np.float16), rand((16,), dtype=np.float16)],
       outputs=1, opset=17, rtol=2e-3, atol=2e-3)

# ---- InstanceNormalization ---------------------------------------------------------------------
for shape in ((2, 3, 5, 4), (1, 4, 7), (2, 2, 3, 2, 2)):
    c = shape[1]
    w.node(f"instancenorm_{len(shape)}d", "InstanceNormalization", [rand(shape, -2, 4)],
           consts={1: rand((c,), 0.5, 1.5), 2: rand((c,))}, attrs={"epsilon": 1e-3}, opset=6, rtol=1e-4, atol=1e-5)
w.node("instancenorm_runtime_affine", "InstanceNormalization", [rand((2, 3, 6)), rand((3,), 0.5, 1.5), rand((3,))],
       opset=6, rtol=1e-4, atol=1e-5)

# ---- GroupNormalization: opset 18 (scale per group) and 21 (per channel) -------------------------
xg = rand((2, 6, 5, 3), -1.0, 3.0)
w.node("groupnorm18_per_group", "GroupNormalization", [xg], consts={1: rand((3,), 0.5, 1.5), 2: rand((3,))},
       attrs={"num_groups": 3, "epsilon": 1e-4}, opset=18, rtol=1e-4, atol=1e-5)
w.node("groupnorm21_per_channel", "GroupNormalization", [xg, rand((6,), 0.5, 1.5), rand((6,))],
       attrs={"num_groups": 2}, opset=21, rtol=1e-4, atol=1e-5)
w.node("groupnorm21_one_group", "GroupNormalization", [rand((1, 4, 9)), rand((4,), 0.5, 1.5), rand((4,))],
       attrs={"num_groups": 1}, opset=21, rtol=1e-4, atol=1e-5)

# ---- MeanVarianceNormalization --------------------------------------------------------------
xm = rand((2, 3, 4, 5), 0.0, 4.0)
w.node("mvn_default_axes", "MeanVarianceNormalization", [xm], opset=13, rtol=1e-4, atol=1e-5)
w.node("mvn_axes_1_3", "MeanVarianceNormalization", [xm], attrs={"axes": [1, 3]}, opset=13, rtol=1e-4, atol=1e-5)
w.node("mvn_last_axis_dynamic", "MeanVarianceNormalization", [rand((3, 7))], attrs={"axes": [-1]}, opset=13,
       dynamic=True, rtol=1e-4, atol=1e-5)

# ---- LpNormalization (opset 1): p 1 and 2, a zero row ------------------------------------------
xl = rand((3, 4, 5))
xl[1, 2, :] = 0.0
w.node("lpnorm_p2_last", "LpNormalization", [xl], opset=13, rtol=1e-5, atol=1e-6)
w.node("lpnorm_p1_axis1", "LpNormalization", [xl], attrs={"axis": 1, "p": 1}, opset=13, rtol=1e-5, atol=1e-6)

# ---- LRN --------------------------------------------------------------------------------------
xr = rand((2, 7, 4, 3), -3.0, 3.0)
w.node("lrn_size3", "LRN", [xr], attrs={"size": 3, "alpha": 0.02, "beta": 0.6, "bias": 1.5}, opset=13, rtol=1e-5, atol=1e-6)


def lrn_numpy(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    """The ONNX spec's window: channels [c - floor((size-1)/2), c + ceil((size-1)/2)]."""
    x64 = x.astype(np.float64)
    sq = np.zeros_like(x64)
    lo, hi = (size - 1) // 2, (size - 1) - (size - 1) // 2
    for c in range(x.shape[1]):
        sq[:, c] = np.sum(x64[:, max(0, c - lo):min(x.shape[1], c + hi + 1)] ** 2, axis=1)
    return [(x64 / (bias + alpha / size * sq) ** beta).astype(x.dtype)]


# ONNX Runtime only takes odd sizes (and the onnx reference evaluator's LRN loops over the batch
# instead of the channels), so numpy gives the even case.
w.node("lrn_size4_even", "LRN", [xr], attrs={"size": 4}, opset=13, rtol=1e-5, atol=1e-6,
       runner=lambda x: lrn_numpy(x, 4))
w.node("lrn_size9_wide", "LRN", [rand((1, 5, 6, 1))], attrs={"size": 9, "alpha": 0.5}, opset=13, rtol=1e-5, atol=1e-6)

w.write()
