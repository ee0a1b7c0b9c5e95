#!/usr/bin/env python3
"""Generates the ONNX Runtime reference data of tests/ops_composite_test.cpp.

The ops kiln imports as compositions of other layers: DepthToSpace, SpaceToDepth, Size, EyeLike,
Compress, Shrink and LpPool, with static and symbolic (dynamic) input dims; see
tests/data/onnx_cases.py for the files. Rerun from the repository root:
    python3 tests/data/composite/generate.py
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from onnx_cases import CaseWriter  # noqa: E402

w = CaseWriter(HERE, 20240703)
rand = w.rand
i64 = np.int64

# ---- DepthToSpace / SpaceToDepth ----------------------------------------------------------------
x = rand((2, 12, 3, 5))
for mode in ("DCR", "CRD"):
    for dynamic in (False, True):
        w.node(f"depthtospace_{mode.lower()}{'_dynamic' if dynamic else ''}", "DepthToSpace", [x],
               attrs={"blocksize": 2, "mode": mode}, opset=13, dynamic=dynamic)
# ONNX Runtime has DepthToSpace for floats only; the onnx reference evaluator gives int64.
w.node("depthtospace_b3_int64", "DepthToSpace", [w.rng.integers(0, 99, (1, 18, 2, 2)).astype(i64)],
       attrs={"blocksize": 3}, opset=13, runner="onnx")
w.node("depthtospace_opset11_default_mode", "DepthToSpace", [rand((1, 8, 2, 3))], attrs={"blocksize": 2}, opset=11)
for dynamic in (False, True):
    w.node(f"spacetodepth{'_dynamic' if dynamic else ''}", "SpaceToDepth", [rand((2, 3, 4, 6))], attrs={"blocksize": 2},
           opset=13, dynamic=dynamic)
w.node("spacetodepth_b3_f16", "SpaceToDepth", [rand((1, 2, 6, 3)).astype(np.float16)], attrs={"blocksize": 3}, opset=13)

# ---- Size ------------------------------------------------------------------------------------
w.node("size_static", "Size", [rand((3, 4, 5))], opset=13)
w.node("size_dynamic", "Size", [rand((2, 7))], opset=13, dynamic=True)
w.node("size_scalar", "Size", [np.array(3.5, np.float32)], opset=13)

# ---- EyeLike: dtype, k, x of a known and of an unknown (intermediate) type -----------------------
w.node("eyelike_k0", "EyeLike", [rand((4, 5))], opset=9)
w.node("eyelike_k2_dtype_int64", "EyeLike", [rand((3, 6))], attrs={"k": 2, "dtype": TensorProto.INT64}, opset=9)
w.node("eyelike_kneg1_int32", "EyeLike", [w.rng.integers(0, 5, (5, 3)).astype(np.int32)], attrs={"k": -1}, opset=9)
w.graph("eyelike_of_intermediate",
        [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("EyeLike", ["a"], ["y"], k=1)],
        {"x": rand((4, 4), dtype=np.float64)}, opset=13)

# ---- Compress (constant condition) -------------------------------------------------------------
xc = rand((3, 4))
w.node("compress_axis0", "Compress", [xc], consts={1: np.array([True, False, True])}, attrs={"axis": 0}, opset=11)
w.node("compress_axis_neg1_short", "Compress", [xc], consts={1: np.array([False, True, True])}, attrs={"axis": -1}, opset=11)
w.node("compress_flat", "Compress", [xc], consts={1: np.array([1, 0, 0, 1, 1, 0, 1], np.bool_)}, opset=11)
w.node("compress_int64_dynamic", "Compress", [w.rng.integers(0, 9, (2, 5)).astype(i64)],
       consts={1: np.array([0, 1, 0, 1, 1], np.bool_)}, attrs={"axis": 1}, opset=11, dynamic=True)

# ---- Shrink -------------------------------------------------------------------------------------
xs = rand((3, 17), -3.0, 3.0)
xs[0, :6] = [0.5, -0.5, 1.5, -1.5, 0.0, 1e-7]  # the thresholds themselves
w.node("shrink_default", "Shrink", [xs], opset=9, rtol=0, atol=0)
w.node("shrink_soft", "Shrink", [xs], attrs={"lambd": 1.5, "bias": 1.5}, opset=9, rtol=0, atol=0)
w.node("shrink_bias_only", "Shrink", [xs], attrs={"lambd": 0.0, "bias": 0.25}, opset=9, rtol=0, atol=0)

# ---- LpPool ---------------------------------------------------------------------------------------
xp = rand((2, 3, 7, 6))
w.node("lppool_p2_3x3", "LpPool", [xp], attrs={"kernel_shape": [3, 3]}, opset=18, rtol=1e-5, atol=1e-5)
w.node("lppool_p1_strides_pads", "LpPool", [xp], attrs={"kernel_shape": [2, 3], "strides": [2, 1], "pads": [1, 0, 1, 2], "p": 1},
       opset=18, rtol=1e-5, atol=1e-5)
w.node("lppool_p3_dilations", "LpPool", [xp], attrs={"kernel_shape": [2, 2], "dilations": [2, 1], "p": 3}, opset=18,
       rtol=1e-4, atol=1e-5)
w.node("lppool_same_upper", "LpPool", [xp], attrs={"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
       opset=18, rtol=1e-5, atol=1e-5)
w.node("lppool_ceil_mode", "LpPool", [xp], attrs={"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, opset=18,
       rtol=1e-5, atol=1e-5)
w.node("lppool_1d_dynamic", "LpPool", [rand((2, 4, 9))], attrs={"kernel_shape": [4], "strides": [3]}, opset=18,
       dynamic=True, rtol=1e-5, atol=1e-5)
w.node("lppool_opset11", "LpPool", [xp], attrs={"kernel_shape": [2, 2], "strides": [2, 2]}, opset=11, rtol=1e-5, atol=1e-5)
# ceil_mode=1 on symbolic spatial dims: the extra end padding comes from Shape(x) at run time.
# Extents chosen so that ceil adds a window (10 with k3 s2; W 10 with dilated k2 s3), or the rule
# "the last window starts inside the input or the left padding" removes one (8 with pads 1,1 k2
# s3; 4 with end pad 1 k2 s2; H 10 with pads 1,1 k2 s3).
ceil_cases = [("1d_p1", (2, 3, 10), {"kernel_shape": [3], "strides": [2], "p": 1}),
              ("1d_p2_pads", (2, 2, 10), {"kernel_shape": [3], "strides": [2], "pads": [1, 1], "p": 2}),
              ("1d_p3_pads_rule", (1, 2, 8), {"kernel_shape": [2], "strides": [3], "pads": [1, 1], "p": 3}),
              ("1d_p2_end_pad_rule", (1, 2, 4), {"kernel_shape": [2], "strides": [2], "pads": [0, 1], "p": 2}),
              ("2d_p2", (2, 3, 8, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "p": 2}),
              ("2d_p1_dilations", (1, 3, 9, 10), {"kernel_shape": [2, 2], "dilations": [2, 1], "strides": [2, 3], "p": 1}),
              ("2d_p3_pads", (1, 2, 10, 9), {"kernel_shape": [2, 3], "strides": [3, 2], "pads": [1, 0, 1, 1], "p": 3})]
for name, shape, attrs in ceil_cases:
    w.node(f"lppool_ceil_{name}_dynamic", "LpPool", [rand(shape)], attrs=dict(attrs, ceil_mode=1), opset=18, dynamic=True,
           rtol=1e-4 if attrs["p"] == 3 else 1e-5, atol=1e-5)
# One model, three input shapes: tests/ops_composite_test.cpp also runs them through one engine.
for i, shape in enumerate([(1, 2, 7, 6), (2, 1, 8, 9), (1, 3, 5, 4)]):
    w.node(f"lppool_ceil_shapes{i}_dynamic", "LpPool", [rand(shape)],
           attrs={"kernel_shape": [3, 2], "strides": [2, 2], "pads": [0, 1, 1, 0], "ceil_mode": 1}, opset=18, dynamic=True,
           rtol=1e-5, atol=1e-5)

# ---- models kiln must reject, naming the node (not run, not in cases.json) ------------------------
w.model_only("reject_compress_runtime_condition", [helper.make_node("Compress", ["x", "c"], ["y"], axis=0, name="cmp")],
             {"x": (np.float32, (3, 2)), "c": (np.bool_, (3,))}, opset=11)
w.model_only("reject_depthtospace_bad_mode", [helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode="XYZ", name="d2s")],
             {"x": (np.float32, (1, 4, 2, 2))}, opset=13)

w.write()
