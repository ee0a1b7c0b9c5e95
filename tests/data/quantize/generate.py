#!/usr/bin/env python3
"""Generates the reference data of tests/ops_quantize_test.cpp: QuantizeLinear, DequantizeLinear
(per tensor, per axis, blocked; int8 / uint8 / int32), DynamicQuantizeLinear, MatMulInteger,
ConvInteger, QLinearMatMul and QLinearConv models run by ONNX Runtime. Quantization inputs
include exact .5 ties (round half to even) and values that saturate. Run from anywhere:
    python3 tests/data/quantize/generate.py
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from ort_cases import CaseWriter  # noqa: E402

rng = np.random.default_rng(20260517)
w = CaseWriter(HERE)
# Integer outputs must match exactly; float outputs to float rounding.
EXACT = dict(rtol=0.0, atol=0.0)


def node(op, n_in, n_out=1, **attrs):
    ins = [f"i{k}" if k is not None else "" for k in n_in] if isinstance(n_in, list) else [f"i{k}" for k in range(n_in)]
    return helper.make_node(op, ins, [f"o{k}" for k in range(n_out)], **attrs)


def ties(shape, scale):
    """Values on and between quantization steps, .5 ties included, some saturating."""
    steps = rng.integers(-300, 300, shape).astype(np.float32)
    half = rng.random(shape) < 0.4
    return ((steps + np.where(half, 0.5, 0.0)) * scale).astype(np.float32)


# ---- QuantizeLinear ----
s = np.float32(0.5)
w.add("quantize_per_tensor_uint8", [node("QuantizeLinear", 3)],
      [ties((3, 7), s), np.array(s), np.array(128, dtype=np.uint8)], opset=13, **EXACT)
w.add("quantize_no_zero_point", [node("QuantizeLinear", 2)], [ties((11,), s), np.array(s)], opset=13, **EXACT)
w.add("quantize_opset10", [node("QuantizeLinear", 3)],
      [ties((2, 5), np.float32(0.25)), np.array(np.float32(0.25)), np.array(-3, dtype=np.int8)], opset=10, **EXACT)
w.add("quantize_per_axis_int8", [node("QuantizeLinear", 3, axis=1)],
      [ties((2, 3, 4), np.float32(0.125)), np.array([0.125, 0.25, 1.0], dtype=np.float32),
       np.array([-5, 0, 7], dtype=np.int8)], opset=13, **EXACT)
w.add("quantize_axis_negative", [node("QuantizeLinear", 3, axis=-1)],
      [rng.standard_normal((3, 5)).astype(np.float32) * 20, rng.uniform(0.05, 0.3, 5).astype(np.float32),
       rng.integers(0, 255, 5).astype(np.uint8)], opset=13, **EXACT)
w.add("quantize_blocked", [node("QuantizeLinear", 3, axis=1, block_size=2)],
      [rng.standard_normal((2, 6)).astype(np.float32) * 10, rng.uniform(0.05, 0.3, (2, 3)).astype(np.float32),
       rng.integers(-20, 20, (2, 3)).astype(np.int8)], opset=21, **EXACT)
w.add("quantize_output_dtype_int8", [node("QuantizeLinear", 2, output_dtype=TensorProto.INT8)],
      [ties((9,), s), np.array(s)], opset=21, **EXACT)
w.add("quantize_float16", [node("QuantizeLinear", 3)],
      [rng.standard_normal((4, 3)).astype(np.float16) * 8, np.array(0.0625, dtype=np.float16),
       np.array(10, dtype=np.uint8)], opset=19, **EXACT)

# ---- DequantizeLinear ----
w.add("dequantize_per_tensor_uint8", [node("DequantizeLinear", 3)],
      [rng.integers(0, 256, (3, 4)).astype(np.uint8), np.array(np.float32(0.37)), np.array(100, dtype=np.uint8)],
      opset=13)
w.add("dequantize_per_axis_int8", [node("DequantizeLinear", 3, axis=0)],
      [rng.integers(-128, 128, (3, 2, 2)).astype(np.int8), rng.uniform(0.01, 2, 3).astype(np.float32),
       rng.integers(-10, 10, 3).astype(np.int8)], opset=13)
w.add("dequantize_int32_no_zero_point", [node("DequantizeLinear", 2)],
      [rng.integers(-100000, 100000, (6,)).astype(np.int32), np.array(np.float32(0.001))], opset=13)
w.add("dequantize_blocked", [node("DequantizeLinear", 3, axis=0, block_size=3)],
      [rng.integers(0, 256, (5, 2)).astype(np.uint8), rng.uniform(0.01, 2, (2, 2)).astype(np.float32),
       rng.integers(0, 256, (2, 2)).astype(np.uint8)], opset=21)
w.add("dequantize_float16_scale", [node("DequantizeLinear", 3)],
      [rng.integers(-128, 128, (7,)).astype(np.int8), np.array(0.125, dtype=np.float16), np.array(3, dtype=np.int8)],
      opset=19, rtol=1e-3, atol=1e-3)

# ---- DynamicQuantizeLinear ----
w.add("dynamic_quantize_mixed", [node("DynamicQuantizeLinear", 1, 3)],
      [rng.standard_normal((4, 5)).astype(np.float32) * 3], n_outputs=3, opset=11)
w.add("dynamic_quantize_positive", [node("DynamicQuantizeLinear", 1, 3)],
      [rng.uniform(1, 5, (7,)).astype(np.float32)], n_outputs=3, opset=11)
w.add("dynamic_quantize_negative", [node("DynamicQuantizeLinear", 1, 3)],
      [rng.uniform(-5, -1, (2, 3)).astype(np.float32)], n_outputs=3, opset=11)
w.add("dynamic_quantize_zeros", [node("DynamicQuantizeLinear", 1, 3)],
      [np.zeros((2, 2), dtype=np.float32)], n_outputs=3, opset=11)

# ---- MatMulInteger ----
# ONNX Runtime's x86 uint8 x int8 kernels (MLAS without VNNI) add pairs of products in saturating
# int16, so cases mixing uint8 and int8 keep |a*b + c*d| < 2^15 with half ranges (u8h, i8h);
# uint8 x uint8 and int8 x int8 cases use the full ranges.
u8 = lambda *sh: rng.integers(0, 256, sh).astype(np.uint8)  # noqa: E731
i8 = lambda *sh: rng.integers(-128, 128, sh).astype(np.int8)  # noqa: E731
u8h = lambda *sh: rng.integers(0, 128, sh).astype(np.uint8)  # noqa: E731
i8h = lambda *sh: rng.integers(-64, 64, sh).astype(np.int8)  # noqa: E731


def check_integer_matmul(name, a, b, a_zp, b_zp):
    """Cross-checks ONNX Runtime's MatMulInteger result with numpy's exact integer matmul."""
    ref = (a.astype(np.int64) - (0 if a_zp is None else a_zp.astype(np.int64))) @ \
        (b.astype(np.int64) - (0 if b_zp is None else b_zp.astype(np.int64)))
    got = np.load(os.path.join(HERE, f"{name}_out0.npy"))
    assert np.array_equal(ref, got), name

w.add("matmul_integer_uint8", [node("MatMulInteger", 4)],
      [u8(4, 13), u8(13, 5), np.array(121, dtype=np.uint8), np.array(7, dtype=np.uint8)], opset=10, **EXACT)
w.add("matmul_integer_no_zero_points", [node("MatMulInteger", 2)], [u8h(3, 6), i8h(6, 2)], opset=10, **EXACT)
w.add("matmul_integer_per_column_b", [node("MatMulInteger", 4)],
      [u8h(2, 3, 8), i8h(8, 4), np.array(3, dtype=np.uint8), rng.integers(-5, 5, 4).astype(np.int8)], opset=10, **EXACT)
w.add("matmul_integer_int8_batched", [node("MatMulInteger", [0, 1, 2])],
      [i8(2, 3, 5), i8(2, 5, 3), np.array(-4, dtype=np.int8)], opset=10, **EXACT)
for case_name in ["matmul_integer_uint8", "matmul_integer_no_zero_points", "matmul_integer_per_column_b",
                  "matmul_integer_int8_batched"]:
    ins = [np.load(os.path.join(HERE, f"{case_name}_in{k}.npy")) for k in range(4)
           if os.path.exists(os.path.join(HERE, f"{case_name}_in{k}.npy"))]
    check_integer_matmul(case_name, ins[0], ins[1], ins[2] if len(ins) > 2 else None, ins[3] if len(ins) > 3 else None)

# ---- ConvInteger ----
w.add("conv_integer_pads_strides", [node("ConvInteger", 4, pads=[1, 0, 1, 2], strides=[2, 1])],
      [u8(1, 2, 6, 5), u8(3, 2, 3, 3), np.array(131, dtype=np.uint8), np.array(17, dtype=np.uint8)], opset=10,
      **EXACT)
w.add("conv_integer_no_zero_point_group", [node("ConvInteger", 2, group=2, dilations=[2, 1])],
      [u8(2, 4, 7, 6), u8(4, 2, 2, 3)], opset=10, **EXACT)

# ---- QLinearMatMul ----
def qmm(name, a, b, a_s, a_zp, b_s, b_zp, y_s, y_zp, opset=10):
    w.add(name, [node("QLinearMatMul", 8)], [a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp], opset=opset, **EXACT)


qmm("qlinear_matmul_uint8", u8(3, 9), u8(9, 4), np.array(np.float32(0.02)), np.array(120, dtype=np.uint8),
    np.array(np.float32(0.03)), np.array(130, dtype=np.uint8), np.array(np.float32(0.5)), np.array(125, dtype=np.uint8))
qmm("qlinear_matmul_int8_3d", i8(2, 3, 7), i8(2, 7, 5), np.array([0.05], dtype=np.float32), np.array([2], dtype=np.int8),
    np.array([0.04], dtype=np.float32), np.array([-3], dtype=np.int8), np.array([0.3], dtype=np.float32),
    np.array([1], dtype=np.int8))
qmm("qlinear_matmul_per_column", u8h(4, 6), i8h(6, 3), np.array(np.float32(0.01)), np.array(128, dtype=np.uint8),
    rng.uniform(0.01, 0.05, 3).astype(np.float32), np.zeros(3, dtype=np.int8), np.array(np.float32(0.2)),
    np.array(100, dtype=np.uint8), opset=21)

# ---- QLinearConv ----
def qconv(name, x, x_s, x_zp, wt, w_s, w_zp, y_s, y_zp, bias=None, **attrs):
    ins = [x, x_s, x_zp, wt, w_s, w_zp, y_s, y_zp] + ([bias] if bias is not None else [])
    w.add(name, [node("QLinearConv", len(ins), **attrs)], ins, opset=10, **EXACT)


qconv("qlinear_conv_uint8_bias", u8(1, 3, 7, 6), np.array(np.float32(0.02)), np.array(128, dtype=np.uint8), u8(4, 3, 3, 3),
      np.array(np.float32(0.01)), np.array(120, dtype=np.uint8), np.array(np.float32(0.15)), np.array(110, dtype=np.uint8),
      rng.integers(-2000, 2000, 4).astype(np.int32), pads=[1, 1, 1, 1])
qconv("qlinear_conv_per_channel_int8", u8h(2, 4, 8, 8), np.array(np.float32(0.05)), np.array(100, dtype=np.uint8),
      i8h(6, 2, 3, 3), rng.uniform(0.005, 0.02, 6).astype(np.float32), np.zeros(6, dtype=np.int8),
      np.array(np.float32(0.4)), np.array(128, dtype=np.uint8), rng.integers(-500, 500, 6).astype(np.int32),
      strides=[2, 2], group=2, pads=[0, 1, 1, 0])
qconv("qlinear_conv_int8_1d", i8(1, 2, 9), np.array(np.float32(0.1)), np.array(-2, dtype=np.int8), i8(3, 2, 4),
      np.array(np.float32(0.02)), np.array(0, dtype=np.int8), np.array(np.float32(0.25)), np.array(5, dtype=np.int8))

w.write()
