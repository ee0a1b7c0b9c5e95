#!/usr/bin/env python3
"""Generates the ONNX Runtime reference data of tests/ops_bitwise_test.cpp: BitShift on uint8
(the one unsigned type kiln has) in both directions, with broadcasting and shifts of 8 or more;
see tests/data/onnx_cases.py for the files. Rerun from the repository root:
    python3 tests/data/bitwise/generate.py
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from onnx_cases import CaseWriter  # noqa: E402

w = CaseWriter(HERE, 20240705)
u8 = np.uint8
x = w.rng.integers(0, 256, (3, 7)).astype(u8)
shifts = np.array([0, 1, 3, 7, 2, 8, 9], u8)  # 8 and 9 shift every bit out
for direction in ("LEFT", "RIGHT"):
    w.node(f"bitshift_{direction.lower()}_broadcast", "BitShift", [x, shifts], attrs={"direction": direction}, opset=11,
           rtol=0, atol=0)
    w.node(f"bitshift_{direction.lower()}_scalar", "BitShift", [x], consts={1: np.array(2, u8)}, attrs={"direction": direction},
           opset=11, rtol=0, atol=0)
w.write()
