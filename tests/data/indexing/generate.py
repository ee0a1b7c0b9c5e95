#!/usr/bin/env python3
"""Generates the ONNX Runtime reference data of tests/ops_indexing_test.cpp.

One small ONNX model per case: ArgMax, ArgMin, Hardmax, TopK, CumSum, Trilu, OneHot,
ReverseSequence and MaxUnpool over their opsets, attributes, ties and types; see
tests/data/onnx_cases.py for the files. Rerun from the repository root:
    python3 tests/data/indexing/generate.py
"""
import os
import sys

import numpy as np
import onnxruntime as ort
from onnx import helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from onnx_cases import CaseWriter  # noqa: E402

w = CaseWriter(HERE, 20240702)
rand = w.rand
i64 = np.int64

# ---- ArgMax / ArgMin: axes, keepdims, ties with select_last_index, types --------------------------
ties = np.round(rand((3, 4, 5), -2, 2)).astype(np.float32)  # few distinct values: many ties
for op in ("ArgMax", "ArgMin"):
    for axis in (0, 1, -1):
        for last in (0, 1):
            w.node(f"{op.lower()}_axis{axis}_last{last}".replace("-", "m"), op, [ties],
                   attrs={"axis": axis, "keepdims": 1, "select_last_index": last}, opset=13)
    w.node(f"{op.lower()}_nokeep", op, [rand((4, 7))], attrs={"axis": 1, "keepdims": 0}, opset=13)
    w.node(f"{op.lower()}_opset11_default", op, [rand((5, 3))], opset=11)
    w.node(f"{op.lower()}_int32", op, [w.rng.integers(-9, 9, (3, 6)).astype(np.int32)], attrs={"axis": 1}, opset=13)
    w.node(f"{op.lower()}_f64", op, [rand((2, 3, 4), dtype=np.float64)], attrs={"axis": 2, "keepdims": 0}, opset=13)
w.node("argmax_int64_last", "ArgMax", [w.rng.integers(-3, 3, (4, 5)).astype(i64)], attrs={"axis": 0, "select_last_index": 1}, opset=13)

# ---- Hardmax -----------------------------------------------------------------------------------
w.node("hardmax13_axis1", "Hardmax", [ties], attrs={"axis": 1}, opset=13)
w.node("hardmax13_default", "Hardmax", [ties], opset=13)
w.node("hardmax11_coerce_axis1", "Hardmax", [rand((2, 3, 4))], attrs={"axis": 1}, opset=11)
w.node("hardmax11_coerce_dynamic", "Hardmax", [ties], attrs={"axis": 1}, opset=11, dynamic=True)
# ONNX Runtime has no float64 Hardmax.
w.node("hardmax13_f64", "Hardmax", [rand((3, 5), dtype=np.float64)], attrs={"axis": 0}, opset=13, runner="onnx")

# ---- TopK: largest/smallest, axes, ties keep the lower index, k from a constant ------------------
xt = rand((3, 6, 5))
for largest in (1, 0):
    w.node(f"topk_axis1_largest{largest}", "TopK", [xt], consts={1: np.array([4], i64)},
           attrs={"axis": 1, "largest": largest}, outputs=2, opset=11)
w.node("topk_last_axis_ties", "TopK", [ties], consts={1: np.array([3], i64)}, outputs=2, opset=11)
w.node("topk_smallest_ties", "TopK", [ties], consts={1: np.array([2], i64)}, attrs={"largest": 0, "axis": 0}, outputs=2,
       opset=11)
w.node("topk_k_equals_n", "TopK", [rand((2, 7))], consts={1: np.array([7], i64)}, outputs=2, opset=11)
w.node("topk_opset10", "TopK", [rand((4, 9))], consts={1: np.array([2], i64)}, outputs=2, opset=10)
w.node("topk_opset1_attr", "TopK", [rand((4, 9))], attrs={"k": 3, "axis": 0}, outputs=2, opset=9)
w.node("topk_int64", "TopK", [w.rng.integers(-50, 50, (3, 8)).astype(i64)], consts={1: np.array([3], i64)}, outputs=2,
       opset=11)
w.node("topk_f64_dynamic", "TopK", [rand((3, 8), dtype=np.float64)], consts={1: np.array([2], i64)}, outputs=2, opset=11,
       dynamic=True)

# ---- CumSum: axes, exclusive, reverse, types, the axis as a constant or a run-time input -----------
xc = rand((3, 4, 5))
for excl in (0, 1):
    for rev in (0, 1):
        w.node(f"cumsum_axis1_excl{excl}_rev{rev}", "CumSum", [xc], consts={1: np.array(1, np.int32)},
               attrs={"exclusive": excl, "reverse": rev}, opset=14)
w.node("cumsum_negative_axis", "CumSum", [xc], consts={1: np.array(-1, i64)}, opset=14)
w.node("cumsum_axis_input", "CumSum", [xc, np.array(0, np.int32)], opset=14)
w.node("cumsum_int64", "CumSum", [w.rng.integers(-9, 9, (4, 6)).astype(i64)], consts={1: np.array(1, i64)},
       attrs={"reverse": 1}, opset=14)
w.node("cumsum_int32", "CumSum", [w.rng.integers(-9, 9, (7,)).astype(np.int32)], consts={1: np.array(0, i64)},
       attrs={"exclusive": 1}, opset=11)
w.node("cumsum_f64", "CumSum", [rand((2, 9), dtype=np.float64)], consts={1: np.array(1, i64)}, opset=14, rtol=1e-12,
       atol=1e-12)

# ---- Trilu: upper/lower, k in and out of range, batches, k as an input or omitted -----------------
xi = w.rng.integers(1, 9, (2, 4, 5)).astype(i64)
for upper in (1, 0):
    for k in (0, 2, -1, 7, -6):
        w.node(f"trilu_upper{upper}_k{k}".replace("-", "m"), "Trilu", [xi], consts={1: np.array(k, i64)},
               attrs={"upper": upper}, opset=14)
    w.node(f"trilu_upper{upper}_no_k", "Trilu", [rand((5, 3))], attrs={"upper": upper}, opset=14)
w.node("trilu_k_input", "Trilu", [rand((3, 3, 4)), np.array(1, i64)], attrs={"upper": 0}, opset=14)

# ---- OneHot: axes, negative indices, index and value types ---------------------------------------
idx = np.array([[0, 3, -1], [-4, 2, 5]], i64)  # 5 is out of range for depth 4: all off
for axis in (-1, 0, 1):
    w.node(f"onehot_axis{axis}".replace("-", "m"), "OneHot", [idx], consts={1: np.array(4, i64), 2: np.array([0.5, 2.0], np.float32)},
           attrs={"axis": axis}, opset=11)
w.node("onehot_float_indices", "OneHot", [np.array([1.0, 2.7, -1.0], np.float32)],
       consts={1: np.array([3.0], np.float32), 2: np.array([-1.0, 7.0], np.float32)}, opset=11)
w.node("onehot_int32_indices_values_input", "OneHot", [np.array([2, 0], np.int32), np.array([3, 9], np.float32)],
       consts={1: np.array(5, np.int32)}, opset=11)
# ONNX Runtime lacks this type combination; the onnx reference evaluator gives it.
w.node("onehot_int_values", "OneHot", [np.array([[1, -2], [0, 3]], i64)],
       consts={1: np.array(4, i64), 2: np.array([-1, 7], np.int32)}, attrs={"axis": 1}, opset=11, runner="onnx")

# ---- ReverseSequence ------------------------------------------------------------------------------
xs = rand((4, 3, 2))
w.node("reversesequence_time0", "ReverseSequence", [xs, np.array([4, 1, 3], i64)], attrs={"batch_axis": 1, "time_axis": 0},
       opset=10)
w.node("reversesequence_batch0", "ReverseSequence", [np.transpose(xs, (1, 0, 2)).copy(), np.array([2, 4, 0], i64)],
       attrs={"batch_axis": 0, "time_axis": 1}, opset=10)

# ---- MaxUnpool: indices from ONNX Runtime's MaxPool ------------------------------------------------
def max_pool_indices(x, kernel, strides, pads=None):
    attrs = {"kernel_shape": kernel, "strides": strides}
    if pads:
        attrs["pads"] = pads
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], **attrs)
    g = helper.make_graph([node], "mp", [helper.make_tensor_value_info("x", 1, list(x.shape))],
                          [helper.make_empty_tensor_value_info("y"), helper.make_empty_tensor_value_info("i")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)])
    m.ir_version = 8
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})


y, i = max_pool_indices(rand((2, 3, 4, 6)), [2, 2], [2, 2])
w.node("maxunpool_2x2", "MaxUnpool", [y, i], attrs={"kernel_shape": [2, 2], "strides": [2, 2]}, opset=11)
# A larger output_shape pads the unpooled tensor at the end of each axis, the indices staying flat
# over the unpooled shape: the ONNX reference (and conformance test); ONNX Runtime reads them in the
# output_shape layout instead, so the onnx reference evaluator gives this case.
w.node("maxunpool_output_shape", "MaxUnpool", [y, i], consts={2: np.array([2, 3, 5, 7], i64)},
       attrs={"kernel_shape": [2, 2], "strides": [2, 2]}, opset=11, runner="onnx")
y, i = max_pool_indices(rand((2, 3, 5, 5)), [3, 3], [2, 2], [1, 1, 1, 1])
w.node("maxunpool_pads", "MaxUnpool", [y, i], attrs={"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
       opset=11)

w.write()
