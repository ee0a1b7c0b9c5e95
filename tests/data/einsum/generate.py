#!/usr/bin/env python3
"""Generates the ONNX Runtime reference data of tests/ops_einsum_test.cpp.

One Einsum model per equation: matrix products, transposes, traces and diagonals, sums, outer
products, ellipsis broadcasting, implicit outputs and three operands, in float32, float64 and
int types; see tests/data/onnx_cases.py for the files. Rerun from the repository root:
    python3 tests/data/einsum/generate.py
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from onnx_cases import CaseWriter  # noqa: E402

w = CaseWriter(HERE, 20240704)
rand = w.rand

CASES = [
    ("matmul", "ij,jk->ik", [(3, 4), (4, 5)]),
    ("batch_matmul", "bij, bjk -> bik", [(2, 3, 4), (2, 4, 5)]),
    ("transpose", "ij->ji", [(3, 4)]),
    ("permute_3d", "abc->cab", [(2, 3, 4)]),
    ("trace", "ii->", [(4, 4)]),
    ("diagonal", "ii->i", [(5, 5)]),
    ("batch_diagonal", "...ii->...i", [(3, 4, 4)]),
    ("sum_rows", "ij->i", [(3, 4)]),
    ("sum_all", "ij->", [(3, 4)]),
    ("inner", "i,i", [(6,), (6,)]),
    ("outer", "i,j->ij", [(3,), (4,)]),
    ("implicit_matmul", "ij,jk", [(3, 4), (4, 2)]),
    ("implicit_order", "ba", [(3, 4)]),
    ("bilinear", "bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    ("ellipsis_broadcast", "...ij,...jk->...ik", [(2, 1, 3, 4), (1, 5, 4, 2)]),
    ("ellipsis_middle", "i...j,j...->i...", [(2, 3, 4), (4, 3)]),
    ("upper_case", "Ab,bC->AC", [(2, 3), (3, 2)]),
    ("size_one_broadcast", "ij,ij->ij", [(1, 4), (3, 4)]),
]
for name, eq, shapes in CASES:
    w.node(f"einsum_{name}", "Einsum", [rand(s) for s in shapes], attrs={"equation": eq}, opset=12, rtol=1e-5, atol=1e-5)
w.node("einsum_f64", "Einsum", [rand((2, 3, 4), dtype=np.float64), rand((4, 3), dtype=np.float64)],
       attrs={"equation": "bij,jk->bik"}, opset=12, rtol=1e-12, atol=1e-12)
w.node("einsum_int32", "Einsum", [w.rng.integers(-5, 5, (3, 4)).astype(np.int32), w.rng.integers(-5, 5, (4, 2)).astype(np.int32)],
       attrs={"equation": "ij,jk->ik"}, opset=12, rtol=0, atol=0)
w.node("einsum_int64_dynamic", "Einsum", [w.rng.integers(-5, 5, (2, 3, 3)).astype(np.int64)], attrs={"equation": "bii->b"},
       opset=12, dynamic=True, rtol=0, atol=0)

w.write()
