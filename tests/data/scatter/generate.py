#!/usr/bin/env python3
"""Generates the reference data of tests/ops_scatter_test.cpp: ScatterElements, Scatter (opset 10)
and ScatterND models, with every reduction, run by ONNX Runtime. Cases without a reduction use
distinct indices (which update wins for duplicates is unspecified). Run from anywhere:
    python3 tests/data/scatter/generate.py
"""
import os
import sys

import numpy as np
from onnx import helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from ort_cases import CaseWriter  # noqa: E402

rng = np.random.default_rng(20260516)
w = CaseWriter(HERE)


def distinct_along(shape, axis, extent, dtype=np.int64, negative=False):
    """Indices of `shape` whose entries are distinct along `axis` (values in [0, extent))."""
    idx = np.empty(shape, dtype=np.int64)
    moved = np.moveaxis(idx, axis, -1)
    for pos in np.ndindex(moved.shape[:-1]):
        moved[pos] = rng.permutation(extent)[: shape[axis]]
    if negative:
        idx = np.where(rng.random(shape) < 0.5, idx - extent, idx)
    return idx.astype(dtype)


def elements(name, data, indices, updates, axis, reduction=None, opset=18, op="ScatterElements", **tol):
    attrs = {"axis": axis}
    if reduction:
        attrs["reduction"] = reduction
    node = helper.make_node(op, ["i0", "i1", "i2"], ["o0"], **attrs)
    w.add(name, [node], [data, indices, updates], opset=opset, **tol)


def nd(name, data, indices, updates, reduction=None, opset=18):
    attrs = {"reduction": reduction} if reduction else {}
    node = helper.make_node("ScatterND", ["i0", "i1", "i2"], ["o0"], **attrs)
    w.add(name, [node], [data, indices, updates], opset=opset)


f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731

# ScatterElements: no reduction, distinct indices.
elements("elements_axis0", f32(5, 4), distinct_along((3, 4), 0, 5), f32(3, 4), 0)
elements("elements_axis1_negative_int32", f32(3, 6), distinct_along((3, 4), 1, 6, np.int32, negative=True),
         f32(3, 4), -1)
elements("elements_3d_int64_data", rng.integers(-100, 100, (2, 5, 3)).astype(np.int64),
         distinct_along((2, 4, 3), 1, 5), rng.integers(-100, 100, (2, 4, 3)).astype(np.int64), 1)
elements("elements_uint8", rng.integers(0, 255, (4, 4)).astype(np.uint8), distinct_along((4, 2), 1, 4),
         rng.integers(0, 255, (4, 2)).astype(np.uint8), 1, opset=13)
elements("elements_float16", rng.standard_normal((3, 5)).astype(np.float16), distinct_along((2, 5), 0, 3),
         rng.standard_normal((2, 5)).astype(np.float16), 0, rtol=1e-3, atol=1e-3)
# Reductions with duplicate indices.
for red in ["add", "mul", "max", "min"]:
    elements(f"elements_{red}_duplicates", f32(3, 7, 2), rng.integers(-7, 7, (3, 9, 2)).astype(np.int64),
             f32(3, 9, 2), 1, red)
elements("elements_add_int32", rng.integers(-50, 50, (4, 3)).astype(np.int32),
         rng.integers(0, 4, (6, 3)).astype(np.int64), rng.integers(-50, 50, (6, 3)).astype(np.int32), 0, "add")
elements("elements_max_float64", rng.standard_normal((4, 3)), rng.integers(0, 3, (4, 5)).astype(np.int64),
         rng.standard_normal((4, 5)), 1, "max")
# The opset 9-10 name.
elements("scatter_opset10", f32(4, 5), distinct_along((4, 3), 1, 5), f32(4, 3), 1, op="Scatter", opset=10)

# ScatterND.
nd("nd_slices", f32(4, 4, 4), np.array([[0], [2]], dtype=np.int64), f32(2, 4, 4))
nd("nd_elements_negative", f32(4, 5, 6), np.array([[0, 1, 2], [-1, -2, -3], [2, 0, 5]], dtype=np.int64), f32(3))
nd("nd_rows_int32_data", rng.integers(-9, 9, (3, 4, 2)).astype(np.int32),
   np.array([[[0, 1], [2, 3]], [[1, 0], [0, 0]]], dtype=np.int64), rng.integers(-9, 9, (2, 2, 2)).astype(np.int32))
for red in ["add", "mul", "max", "min"]:
    nd(f"nd_{red}_duplicates", f32(5, 3), np.array([[1], [3], [1], [4], [1]], dtype=np.int64), f32(5, 3), red)
nd("nd_add_opset16", f32(4, 4), np.array([[1, 1], [1, 1], [0, 3]], dtype=np.int64), f32(3), "add", opset=16)

w.write()
