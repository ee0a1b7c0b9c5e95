#!/usr/bin/env python3
"""Generates the reference data of tests/ops_math_test.cpp with ONNX Runtime and numpy.

Each case is one kiln math layer (Activation, ParametricReLU, Scale, ElementWise, Unary, Select,
Cast, SoftMax, Reduce, MatrixMultiply, Gemm) on small inputs. Where ONNX has the same op, ONNX
Runtime's CPU provider computes the expected output (the semantics the ONNX importer relies on);
the rest comes from numpy in float64. Writes <case>_in<i>.npy / <case>_out.npy and cases.json
(kiln layer type, kiln attributes, files, tolerances). Rerun from the repository root:
    python3 tests/data/math/generate.py
"""
import json
import math
import os

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper  # noqa: F401

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(20240611)
cases = []

ONNX_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
              np.dtype(np.float16): TensorProto.FLOAT16, np.dtype(np.int32): TensorProto.INT32,
              np.dtype(np.int64): TensorProto.INT64, np.dtype(np.int8): TensorProto.INT8,
              np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.bool_): TensorProto.BOOL}


COMPARISONS = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"}


def run_onnx(op, inputs, opset=19, **attrs):
    """Runs one ONNX node `op` on the arrays in `inputs` (list); returns its single output."""
    if op in COMPARISONS:
        out_type = TensorProto.BOOL
    elif op == "Cast":
        out_type = attrs["to"]
    else:
        out_type = ONNX_TYPES[inputs[0].dtype]
    names = [f"x{i}" for i in range(len(inputs))]
    node = helper.make_node(op, names, ["y"], **attrs)
    g_in = [helper.make_tensor_value_info(n, ONNX_TYPES[a.dtype], a.shape) for n, a in zip(names, inputs)]
    g_out = helper.make_tensor_value_info("y", out_type, None)
    graph = helper.make_graph([node], "g", g_in, [g_out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, dict(zip(names, inputs)))[0]


def add_case(name, kiln_type, attrs, arrays, out, rtol=1e-5, atol=1e-6):
    files = []
    for i, a in enumerate(arrays):
        if a is None:  # an omitted optional input
            files.append("")
            continue
        f = f"{name}_in{i}.npy"
        np.save(os.path.join(HERE, f), np.array(a, order="C"))  # keeps 0-d arrays 0-d
        files.append(f)
    np.save(os.path.join(HERE, f"{name}_out.npy"), np.array(out, order="C"))
    cases.append({"name": name, "type": kiln_type, "attrs": attrs, "inputs": files,
                  "output": f"{name}_out.npy", "rtol": rtol, "atol": atol})


def rand(shape, low=-2.0, high=2.0, dtype=np.float32):
    return rng.uniform(low, high, size=shape).astype(dtype)


# ---- Activation: every kind ------------------------------------------------------------------
x = rand((2, 3, 5), -4.0, 4.0)
x.flat[:6] = [0.0, -0.0, 1e-3, -1e-3, 3.0, -3.0]  # sign boundaries and hard_swish corners
f64 = x.astype(np.float64)
sig = 1.0 / (1.0 + np.exp(-f64))
acts = {
    "relu": ({}, run_onnx("Relu", [x])),
    "sigmoid": ({}, run_onnx("Sigmoid", [x])),
    "tanh": ({}, run_onnx("Tanh", [x])),
    "leaky_relu": ({"alpha": 0.1}, run_onnx("LeakyRelu", [x], alpha=0.1)),
    "elu": ({"alpha": 0.7}, run_onnx("Elu", [x], alpha=0.7)),
    "selu": ({"alpha": 1.67326, "beta": 1.0507}, run_onnx("Selu", [x], alpha=1.67326, gamma=1.0507)),
    "softplus": ({}, run_onnx("Softplus", [x])),
    "clip": ({"alpha": -1.5, "beta": 2.5}, np.clip(x, -1.5, 2.5)),
    "hard_sigmoid": ({"alpha": 0.2, "beta": 0.5}, run_onnx("HardSigmoid", [x], alpha=0.2, beta=0.5)),
    "hard_swish": ({}, run_onnx("HardSwish", [x])),
    "silu": ({}, f64 * sig),
    "swish": ({"alpha": 1.7}, f64 / (1.0 + np.exp(-1.7 * f64))),
    "gelu_erf": ({}, run_onnx("Gelu", [x], opset=20)),
    "gelu_tanh": ({}, run_onnx("Gelu", [x], opset=20, approximate="tanh")),
    "mish": ({}, run_onnx("Mish", [x])),
    "softsign": ({}, run_onnx("Softsign", [x])),
    "celu": ({"alpha": 1.3}, run_onnx("Celu", [x], alpha=1.3)),
    "thresholded_relu": ({"alpha": 0.5}, run_onnx("ThresholdedRelu", [x], alpha=0.5)),
}
for kind, (params, y) in acts.items():
    add_case(f"act_{kind}", "Activation", {"kind": kind, **params}, [x], y.astype(np.float32), rtol=2e-5, atol=2e-6)

# ---- ParametricReLU, Scale ---------------------------------------------------------------------
x = rand((2, 3, 4, 5))
slope = rand((3, 1, 1), 0.0, 1.0)
add_case("prelu_channel", "ParametricReLU", {}, [x, slope], run_onnx("PRelu", [x, slope]))

x = rand((2, 3, 4), 0.1, 2.0)
s, b, p = rand((3,), 0.5, 1.5), rand((3,), 0.0, 1.0), rand((3,), 0.5, 2.0)
y = (x.astype(np.float64) * s[None, :, None] + b[None, :, None]) ** p[None, :, None]
add_case("scale_channel_power", "Scale", {"mode": "channel", "channel_axis": 1}, [x, s, b, p], y.astype(np.float32))
s1 = np.array([1.5], np.float32)
add_case("scale_uniform_scale_only", "Scale", {"mode": "uniform"}, [x, s1, None, None],
         (x.astype(np.float64) * 1.5).astype(np.float32))
se, be = rand((3, 4), 0.5, 1.5), rand((2, 3, 4))
y = x.astype(np.float64) * se + be
add_case("scale_elementwise_broadcast", "Scale", {"mode": "elementwise"}, [x, se, be], y.astype(np.float32))
xc = rand((2, 4, 3), 0.1, 2.0)
s = rand((3,), 0.5, 1.5)
add_case("scale_channel_last_axis", "Scale", {"mode": "channel", "channel_axis": -1}, [xc, s, None],
         (xc.astype(np.float64) * s).astype(np.float32))

# ---- ElementWise: every op, float32, [2,3,4] x [3,1] -----------------------------------------
a = rand((2, 3, 4))
bb = rand((3, 1))
bb[np.abs(bb) < 0.3] = 0.7  # keep divisors away from 0
apos = rand((2, 3, 4), 0.2, 2.0)
float_ops = {
    "sum": ("Add", a, bb, {}), "sub": ("Sub", a, bb, {}), "prod": ("Mul", a, bb, {}), "div": ("Div", a, bb, {}),
    "pow": ("Pow", apos, bb, {}), "max": ("Max", a, bb, {}), "min": ("Min", a, bb, {}),
    "equal": ("Equal", np.round(a), np.round(bb), {}), "less": ("Less", a, bb, {}),
    "greater": ("Greater", a, bb, {}), "less_or_equal": ("LessOrEqual", np.round(a), np.round(bb), {}),
    "greater_or_equal": ("GreaterOrEqual", np.round(a), np.round(bb), {}),
}
for op, (onnx_op, u, v, extra) in float_ops.items():
    add_case(f"ew_{op}_f32_bcast", "ElementWise", {"op": op}, [u, v], run_onnx(onnx_op, [u, v]))
add_case("ew_mod_fmod1_f32_bcast", "ElementWise", {"op": "mod", "fmod": 1}, [a, bb], run_onnx("Mod", [a, bb], fmod=1))
add_case("ew_mod_f32_bcast", "ElementWise", {"op": "mod"}, [a, bb], np.mod(a, bb).astype(np.float32))
add_case("ew_floor_div_f32_bcast", "ElementWise", {"op": "floor_div"}, [a, bb],
         np.floor(a.astype(np.float64) / bb).astype(np.float32))
ba, bbool = rng.random((2, 3, 4)) < 0.5, rng.random((3, 1)) < 0.5
for op, onnx_op in {"and": "And", "or": "Or", "xor": "Xor"}.items():
    add_case(f"ew_{op}_bool_bcast", "ElementWise", {"op": op}, [ba, bbool], run_onnx(onnx_op, [ba, bbool]))

# Integer division and modulo sign cases (int32 and int64).
ia = np.array([7, -7, 7, -7, 6, -6, 0, 9, -9, 1, 2147483647, -5], np.int32)
ib = np.array([2, 2, -2, -2, 3, 3, 4, -4, 4, 5, 2, 7], np.int32)
add_case("ew_div_i32_signs", "ElementWise", {"op": "div"}, [ia, ib], run_onnx("Div", [ia, ib]))
add_case("ew_mod_i32_signs", "ElementWise", {"op": "mod"}, [ia, ib], run_onnx("Mod", [ia, ib], fmod=0))
add_case("ew_mod_fmod1_i32_signs", "ElementWise", {"op": "mod", "fmod": 1}, [ia, ib], run_onnx("Mod", [ia, ib], fmod=1))
add_case("ew_floor_div_i32_signs", "ElementWise", {"op": "floor_div"}, [ia, ib], np.floor_divide(ia, ib))
la, lb = ia.astype(np.int64) * 3, ib.astype(np.int64)
add_case("ew_div_i64_signs", "ElementWise", {"op": "div"}, [la, lb], run_onnx("Div", [la, lb]))
add_case("ew_mod_i64_signs", "ElementWise", {"op": "mod"}, [la, lb], run_onnx("Mod", [la, lb], fmod=0))
pa = np.array([2, -3, 5, 0, 1, 7, -2, 3], np.int32)
pb = np.array([3, 3, 0, 4, 9, 2, 5, 10], np.int32)
add_case("ew_pow_i32", "ElementWise", {"op": "pow"}, [pa, pb], run_onnx("Pow", [pa, pb]))
i64a = rng.integers(-100, 100, size=(2, 3, 4)).astype(np.int64)
i64b = rng.integers(-100, 100, size=(3, 1)).astype(np.int64)
for op, onnx_op in {"sum": "Add", "sub": "Sub", "prod": "Mul", "max": "Max", "min": "Min", "less": "Less",
                    "equal": "Equal"}.items():
    add_case(f"ew_{op}_i64_bcast", "ElementWise", {"op": op}, [i64a, i64b], run_onnx(onnx_op, [i64a, i64b]))
ua = np.array([5, 200, 0, 255], np.uint8)
ub = np.array([10, 100, 1, 1], np.uint8)
add_case("ew_sub_u8_wraps", "ElementWise", {"op": "sub"}, [ua, ub], ua - ub)
add_case("ew_sum_u8_wraps", "ElementWise", {"op": "sum"}, [ua, ub], ua + ub)

# ---- Unary: every op -------------------------------------------------------------------------
def unary_input(low, high):
    return rand((3, 7), low, high)


xr = unary_input(-3.0, 3.0)
xr.flat[:8] = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.0, -0.0]
xnan = unary_input(-3.0, 3.0)
xnan.flat[:4] = [np.nan, np.inf, -np.inf, 0.0]
unary = {
    "exp": (unary_input(-3, 3), np.exp), "log": (unary_input(0.1, 5), np.log),
    "sqrt": (unary_input(0.0, 5), np.sqrt), "recip": (unary_input(0.5, 3) * np.where(rng.random((3, 7)) < 0.5, -1, 1).astype(np.float32), np.reciprocal),
    "abs": (xr, np.abs), "neg": (xr, np.negative), "floor": (xr, np.floor), "ceil": (xr, np.ceil),
    "round": (xr, np.round), "sin": (xr, np.sin), "cos": (xr, np.cos), "tan": (unary_input(-1.2, 1.2), np.tan),
    "asin": (unary_input(-0.95, 0.95), np.arcsin), "acos": (unary_input(-0.95, 0.95), np.arccos),
    "atan": (xr, np.arctan), "sinh": (xr, np.sinh), "cosh": (xr, np.cosh), "tanh": (xr, np.tanh),
    "asinh": (xr, np.arcsinh), "acosh": (unary_input(1.05, 5), np.arccosh),
    "atanh": (unary_input(-0.9, 0.9), np.arctanh), "erf": (xr, np.vectorize(math.erf)),
    "sign": (xr, np.sign), "isnan": (xnan, np.isnan), "isinf": (xnan, np.isinf),
}
for op, (u, fn) in unary.items():
    y = fn(u.astype(np.float64))
    y = y if y.dtype == np.bool_ else y.astype(np.float32)
    add_case(f"unary_{op}_f32", "Unary", {"op": op}, [u], y, rtol=2e-6, atol=1e-7)
nb = rng.random((3, 7)) < 0.5
add_case("unary_not_bool", "Unary", {"op": "not"}, [nb], np.logical_not(nb))
ii = np.array([-5, -1, 0, 3, 2147483647, -2147483647], np.int32)
for op, fn in {"abs": np.abs, "neg": np.negative, "sign": np.sign, "floor": np.floor, "round": np.round}.items():
    add_case(f"unary_{op}_i32", "Unary", {"op": op}, [ii], fn(ii).astype(np.int32))

# ---- Select, Cast ------------------------------------------------------------------------------
c = rng.random((2, 1, 4)) < 0.5
sa, sb = rand((3, 4)), rand((2, 3, 1))
add_case("select_f32_bcast3", "Select", {}, [c, sa, sb], np.where(c, sa, sb))
la, lb = rng.integers(-9, 9, (3, 4)).astype(np.int64), rng.integers(-9, 9, (2, 3, 1)).astype(np.int64)
add_case("select_i64_bcast3", "Select", {}, [c, la, lb], np.where(c, la, lb))

cx = np.array([-2.7, -0.5, 0.0, 0.3, 1.9, 100.6, -100.6, 2.5, -2.5, 1e6, np.nan, -0.0], np.float32)
cxn = cx[~np.isnan(cx)]
add_case("cast_f32_to_i32", "Cast", {"to": "int32"}, [cxn], run_onnx("Cast", [cxn], to=TensorProto.INT32))
add_case("cast_f32_to_i64", "Cast", {"to": "int64"}, [cxn], run_onnx("Cast", [cxn], to=TensorProto.INT64))
add_case("cast_f32_to_bool", "Cast", {"to": "bool"}, [cx], cx.astype(np.bool_))
with np.errstate(over="ignore"):  # 1e6 overflows to inf, as it should
    add_case("cast_f32_to_f16", "Cast", {"to": "float16"}, [cx], cx.astype(np.float16))
add_case("cast_f32_to_f64", "Cast", {"to": "float64"}, [cx], cx.astype(np.float64))
add_case("cast_f32_to_u8", "Cast", {"to": "uint8"}, [np.abs(cxn[:7])], np.abs(cxn[:7]).astype(np.uint8))
ci = np.array([-3, 0, 1, 7, 130, -129, 2147483647], np.int32)
add_case("cast_i32_to_f32", "Cast", {"to": "float32"}, [ci], ci.astype(np.float32))
add_case("cast_i32_to_i8", "Cast", {"to": "int8"}, [ci], ci.astype(np.int8))
add_case("cast_i32_to_bool", "Cast", {"to": "bool"}, [ci], ci.astype(np.bool_))
add_case("cast_i64_to_i32", "Cast", {"to": "int32"}, [ci.astype(np.int64)], ci)
add_case("cast_bool_to_f32", "Cast", {"to": "float32"}, [nb], nb.astype(np.float32))
add_case("cast_bool_to_i64", "Cast", {"to": "int64"}, [nb], nb.astype(np.int64))
h = np.array([0.5, -1.25, 3.0, 65504.0, -7.75], np.float16)
add_case("cast_f16_to_f32", "Cast", {"to": "float32"}, [h], h.astype(np.float32))
add_case("cast_f16_to_i32", "Cast", {"to": "int32"}, [h[:3]], h[:3].astype(np.float32).astype(np.int32))
add_case("cast_f64_to_f32", "Cast", {"to": "float32"}, [cx.astype(np.float64) / 3], (cx.astype(np.float64) / 3).astype(np.float32))
add_case("cast_u8_to_i32", "Cast", {"to": "int32"}, [ua], ua.astype(np.int32))
add_case("cast_i8_to_f32", "Cast", {"to": "float32"}, [np.array([-128, -1, 0, 127], np.int8)],
         np.array([-128, -1, 0, 127], np.float32))

# ---- SoftMax -----------------------------------------------------------------------------------
x = rand((2, 3, 4, 5), -5.0, 5.0)
x[0, :, 0, 0] = [80.0, 85.0, 90.0]  # large values: only a max-subtracting softmax stays finite
add_case("softmax_axis1_4d", "SoftMax", {"axis": 1}, [x], run_onnx("Softmax", [x], axis=1))
add_case("log_softmax_axis1_4d", "SoftMax", {"axis": 1, "log": 1}, [x], run_onnx("LogSoftmax", [x], axis=1))
add_case("softmax_last_axis", "SoftMax", {}, [x], run_onnx("Softmax", [x], axis=-1))

# ---- Reduce --------------------------------------------------------------------------------------
x = rand((3, 4, 5), 0.5, 1.5)  # positive: log_sum and prod stay well conditioned
x64 = x.astype(np.float64)
reductions = {
    "sum": lambda v, ax, k: v.sum(axis=ax, keepdims=k),
    "mean": lambda v, ax, k: v.mean(axis=ax, keepdims=k),
    "max": lambda v, ax, k: v.max(axis=ax, keepdims=k),
    "min": lambda v, ax, k: v.min(axis=ax, keepdims=k),
    "prod": lambda v, ax, k: v.prod(axis=ax, keepdims=k),
    "l1": lambda v, ax, k: np.abs(v).sum(axis=ax, keepdims=k),
    "l2": lambda v, ax, k: np.sqrt((v * v).sum(axis=ax, keepdims=k)),
    "sum_square": lambda v, ax, k: (v * v).sum(axis=ax, keepdims=k),
    "log_sum": lambda v, ax, k: np.log(v.sum(axis=ax, keepdims=k)),
    "log_sum_exp": lambda v, ax, k: np.log(np.exp(v).sum(axis=ax, keepdims=k)),
}
for op, fn in reductions.items():
    add_case(f"reduce_{op}_axes02_keep", "Reduce", {"op": op, "axes": [0, 2], "keep_dims": 1}, [x],
             fn(x64, (0, 2), True).astype(np.float32))
    add_case(f"reduce_{op}_axis_neg1_drop", "Reduce", {"op": op, "axes": [-1], "keep_dims": 0}, [x],
             fn(x64, (2,), False).astype(np.float32))
add_case("reduce_sum_all_drop", "Reduce", {"op": "sum", "keep_dims": 0}, [x], np.array(x64.sum(), np.float32))
add_case("reduce_max_all_keep", "Reduce", {"op": "max"}, [x], x64.max(keepdims=True).astype(np.float32))
xs = rand((2, 3), -1.0, 1.0)
add_case("reduce_l1_mixed_signs", "Reduce", {"op": "l1", "axes": [1], "keep_dims": 1}, [xs],
         np.abs(xs.astype(np.float64)).sum(axis=1, keepdims=True).astype(np.float32))
xl = rand((2, 4), 500.0, 600.0)
add_case("reduce_log_sum_exp_large", "Reduce", {"op": "log_sum_exp", "axes": [1], "keep_dims": 0}, [xl],
         run_onnx("ReduceLogSumExp", [xl, np.array([1], np.int64)], opset=18, keepdims=0))
xi = rng.integers(-20, 20, (3, 4)).astype(np.int64)
add_case("reduce_sum_i64", "Reduce", {"op": "sum", "axes": [0], "keep_dims": 0}, [xi], xi.sum(axis=0))
add_case("reduce_prod_i64", "Reduce", {"op": "prod", "axes": [1], "keep_dims": 1}, [xi[:, :3]],
         xi[:, :3].prod(axis=1, keepdims=True))
add_case("reduce_max_i32", "Reduce", {"op": "max", "axes": [1], "keep_dims": 0}, [xi.astype(np.int32)],
         xi.astype(np.int32).max(axis=1))

# ---- MatrixMultiply, Gemm --------------------------------------------------------------------------
def mm(name, sa, sb, ta=0, tb=0):
    u, v = rand(sa), rand(sb)
    ue = np.swapaxes(u, -1, -2) if ta and u.ndim >= 2 else u
    ve = np.swapaxes(v, -1, -2) if tb and v.ndim >= 2 else v
    y = run_onnx("MatMul", [np.ascontiguousarray(ue), np.ascontiguousarray(ve)])
    attrs = {}
    if ta:
        attrs["transpose_a"] = 1
    if tb:
        attrs["transpose_b"] = 1
    add_case(name, "MatrixMultiply", attrs, [u, v], y, rtol=1e-5, atol=1e-5)


mm("matmul_2d", (5, 7), (7, 3))
mm("matmul_batch_bcast", (2, 1, 3, 4), (5, 4, 6))
mm("matmul_1d_left", (4,), (2, 4, 3))
mm("matmul_1d_right", (2, 3, 4), (4,))
mm("matmul_1d_both", (6,), (6,))
mm("matmul_trans_a", (2, 4, 3), (4, 5), ta=1)
mm("matmul_trans_b_bcast", (3, 2, 4), (1, 5, 4), tb=1)
mm("matmul_trans_both", (2, 4, 3), (2, 5, 4), ta=1, tb=1)
ia2, ib2 = rng.integers(-5, 5, (2, 3, 4)).astype(np.int64), rng.integers(-5, 5, (4, 2)).astype(np.int64)
add_case("matmul_i64", "MatrixMultiply", {}, [ia2, ib2], np.matmul(ia2, ib2))


def gemm(name, m, k, n, c_shape=None, ta=0, tb=0, alpha=1.0, beta=1.0, act=None):
    u = rand((k, m) if ta else (m, k))
    v = rand((n, k) if tb else (k, n))
    ins = [u, v]
    if c_shape is not None:
        ins.append(rand(c_shape))
    y = run_onnx("Gemm", ins, transA=ta, transB=tb, alpha=alpha, beta=beta)
    attrs = {"alpha": alpha, "beta": beta, "trans_a": ta, "trans_b": tb}
    if act == "relu":
        y = np.maximum(y, 0.0)
        attrs["activation"] = "relu"
    elif act == "leaky_relu":
        y = np.where(y >= 0, y, 0.2 * y).astype(np.float32)
        attrs.update({"activation": "leaky_relu", "activation_alpha": 0.2})
    add_case(name, "Gemm", attrs, ins, y, rtol=1e-5, atol=1e-5)


gemm("gemm_plain", 4, 5, 3)
gemm("gemm_trans_a_c_row", 4, 5, 3, c_shape=(3,), ta=1, alpha=0.5, beta=2.0)
gemm("gemm_trans_b_c_col", 4, 5, 3, c_shape=(4, 1), tb=1)
gemm("gemm_trans_both_c_full", 3, 6, 2, c_shape=(3, 2), ta=1, tb=1, alpha=1.5, beta=-0.5)
gemm("gemm_c_scalar_relu", 5, 3, 4, c_shape=(1,), act="relu")
gemm("gemm_c_row_leaky", 2, 7, 3, c_shape=(1, 3), tb=1, act="leaky_relu")

# Cases written by hand (tests/op_table.h: "source": "hand") stay in the file.
if os.path.exists(os.path.join(HERE, "cases.json")):
    with open(os.path.join(HERE, "cases.json")) as f:
        cases += [c for c in json.load(f) if c.get("source") == "hand"]
with open(os.path.join(HERE, "cases.json"), "w") as f:
    # One case per line (tests/op_table.h describes the entries).
    f.write("[\n" + ",\n".join(json.dumps(c) for c in cases) + "\n]\n")
print(len(cases), "cases")
