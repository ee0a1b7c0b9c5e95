#!/usr/bin/env python3
"""Generates the reference data of tests/ops_sampling_test.cpp: GridSample (opset 16 and 20, every
mode, padding mode and align_corners, 2-D and 3-D), RoiAlign (opset 10 and 16, avg and max,
fixed and adaptive sampling) and MaxRoiPool models run by ONNX Runtime. Grid coordinates reach
past [-1, 1] so that every padding rule is used. Run from anywhere:
    python3 tests/data/sampling/generate.py
"""
import os
import sys

import numpy as np
from onnx import helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from ort_cases import CaseWriter  # noqa: E402

rng = np.random.default_rng(20260518)
w = CaseWriter(HERE)


def node(op, n_in, **attrs):
    return helper.make_node(op, [f"i{k}" for k in range(n_in)], ["o0"], **attrs)


def grid(*shape):
    return rng.uniform(-1.3, 1.3, shape).astype(np.float32)


x4 = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
g4 = grid(2, 4, 6, 2)
for mode16, mode20 in [("bilinear", "linear"), ("nearest", "nearest"), ("bicubic", "cubic")]:
    for pad in ["zeros", "border", "reflection"]:
        for ac in [0, 1]:
            w.add(f"grid_sample_{mode20}_{pad}_ac{ac}", [node("GridSample", 2, mode=mode16, padding_mode=pad,
                                                                align_corners=ac)], [x4, g4], opset=16)
w.add("grid_sample_opset20_linear", [node("GridSample", 2, mode="linear", padding_mode="border")], [x4, g4], opset=20)
w.add("grid_sample_float64", [node("GridSample", 2, mode="linear", padding_mode="reflection")],
      [x4.astype(np.float64), g4.astype(np.float64)], opset=20)
# Volumetric (3 spatial axes), opset 20.
x5 = rng.standard_normal((1, 2, 4, 5, 3)).astype(np.float32)
g5 = grid(1, 3, 2, 4, 3)
for mode in ["linear", "nearest"]:
    for pad in ["zeros", "border", "reflection"]:
        w.add(f"grid_sample_3d_{mode}_{pad}", [node("GridSample", 2, mode=mode, padding_mode=pad, align_corners=0)],
              [x5, g5], opset=20)

# RoiAlign: X [2, 3, 12, 10]; rois (x1, y1, x2, y2) partly outside the map.
xr = rng.standard_normal((2, 3, 12, 10)).astype(np.float32)
rois = np.array([[0, 0, 9, 11], [1.5, 2.2, 6.7, 8.1], [-2, -1, 4, 3], [5, 6, 14, 16], [3.3, 3.3, 3.6, 3.9]],
                dtype=np.float32)
bidx = np.array([0, 1, 1, 0, 1], dtype=np.int64)
for mode in ["avg", "max"]:
    for ctm in ["half_pixel", "output_half_pixel"]:
        w.add(f"roi_align_{mode}_{ctm}", [node("RoiAlign", 3, mode=mode, output_height=3, output_width=4,
                                               sampling_ratio=2, spatial_scale=1.0,
                                               coordinate_transformation_mode=ctm)], [xr, rois, bidx], opset=16)
w.add("roi_align_adaptive_scaled", [node("RoiAlign", 3, output_height=2, output_width=2, spatial_scale=0.5)],
      [xr, rois * 2, bidx], opset=16)
w.add("roi_align_opset10", [node("RoiAlign", 3, output_height=2, output_width=3, sampling_ratio=0)],
      [xr, rois, bidx], opset=10)

# MaxRoiPool: rois (batch, x1, y1, x2, y2).
rois5 = np.array([[0, 0, 0, 9, 11], [1, 1.4, 2.6, 6.5, 8.5], [1, -3, -2, 4, 3], [0, 5, 6, 20, 18], [0, 4, 4, 4, 4]],
                 dtype=np.float32)
w.add("max_roi_pool", [node("MaxRoiPool", 2, pooled_shape=[3, 2])], [xr, rois5], opset=16)
w.add("max_roi_pool_scaled", [node("MaxRoiPool", 2, pooled_shape=[2, 4], spatial_scale=0.5)],
      [xr, rois5 * np.array([1, 2, 2, 2, 2], dtype=np.float32)], opset=16)

w.write()
