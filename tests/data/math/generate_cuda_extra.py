#!/usr/bin/env python3
"""Adds op cases to tests/data/math/cases.json for layers that the CUDA op suite
(tests/cuda_ops_test.cpp, which reads the math/conv/data folders) must cover: BitShift, Quantize,
Dequantize, GridSample, RoiAlign, Det, and Resize / MaxUnpool cases that once failed on CUDA
(align_corners with `scales` downsampling; MaxUnpool with a larger output_shape). On the CPU,
tests/ops_math_test.cpp checks the reference kernel against the expected outputs here.

Expected outputs are independent of kiln: ONNX Runtime (GridSample, RoiAlign), the ONNX backend
test data and ONNX's reference evaluator (Resize, MaxUnpool: kiln follows the ONNX reference where
ONNX Runtime differs), numpy (BitShift, Quantize, Dequantize, Det: the documented formulas).
Idempotent: replaces the cases of the same names. Run from anywhere after generate.py:
    python3 tests/data/math/generate_cuda_extra.py
"""
import json
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(os.path.dirname(HERE), "data")  # Resize / MaxUnpool: shape inputs need its runner
NODE_DATA = "/usr/share/libonnx-testdata/data/node"
rng = np.random.default_rng(20261130)
cases = []
data_cases = []

ONNX_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
              np.dtype(np.float16): TensorProto.FLOAT16, np.dtype(np.int32): TensorProto.INT32,
              np.dtype(np.int64): TensorProto.INT64, np.dtype(np.int8): TensorProto.INT8,
              np.dtype(np.uint8): TensorProto.UINT8}


def model_of(op, inputs, opset, **attrs):
    names = [f"x{i}" if a is not None else "" for i, a in enumerate(inputs)]
    node = helper.make_node(op, names, ["y"], **attrs)
    g_in = [helper.make_tensor_value_info(n, ONNX_TYPES[a.dtype], list(a.shape)) for n, a in zip(names, inputs)
            if a is not None]
    g_out = [onnx.ValueInfoProto(name="y")]
    graph = helper.make_graph([node], "g", g_in, g_out)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    feeds = {n: a for n, a in zip(names, inputs) if a is not None}
    return model, feeds


def run_ort(op, inputs, opset, **attrs):
    model, feeds = model_of(op, inputs, opset, **attrs)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def run_ref(op, inputs, opset, **attrs):
    model, feeds = model_of(op, inputs, opset, **attrs)
    return ReferenceEvaluator(model).run(None, feeds)[0]


def add_case(name, kiln_type, attrs, arrays, out, rtol=1e-5, atol=1e-6):
    files = []
    for i, a in enumerate(arrays):
        if a is None:
            files.append("")
            continue
        f = f"{name}_in{i}.npy"
        np.save(os.path.join(HERE, f), np.array(a, order="C"))
        files.append(f)
    np.save(os.path.join(HERE, f"{name}_out.npy"), np.array(out, order="C"))
    cases.append({"name": name, "type": kiln_type, "attrs": attrs, "inputs": files, "output": f"{name}_out.npy",
                  "rtol": rtol, "atol": atol})


def add_data_case(name, kiln_type, attrs, arrays, out):
    """A case of tests/data/data/cases.json (tests/ops_data_test.cpp; exact unless the name says
    linear/cubic)."""
    entry = {"name": name, "type": kiln_type, "attrs": attrs, "inputs": [], "outputs": [f"{name}_out0.npy"]}
    interpolates = "linear" in name or "cubic" in name
    entry.update({"rtol": 1e-5, "atol": 1e-5} if interpolates else {"rtol": 0.0, "atol": 0.0})
    for k, a in enumerate(arrays):
        if a is None:
            entry["inputs"].append(None)
            continue
        np.save(os.path.join(DATA, f"{name}_in{k}.npy"), a)
        entry["inputs"].append(f"{name}_in{k}.npy")
    np.save(os.path.join(DATA, f"{name}_out0.npy"), out)
    data_cases.append(entry)


def node_test(test):
    d = os.path.join(NODE_DATA, test, "test_data_set_0")
    ins, outs = [], []
    for k in range(8):
        p = os.path.join(d, f"input_{k}.pb")
        if os.path.exists(p):
            ins.append(numpy_helper.to_array(onnx.load_tensor(p)))
    outs.append(numpy_helper.to_array(onnx.load_tensor(os.path.join(d, "output_0.pb"))))
    return ins, outs[0]


def f32(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# ---- Resize: align_corners / pytorch_half_pixel with `scales` (resized length in * scale) -------
def resize_attrs(mode, ctm, nearest="round_prefer_floor", a=-0.75, excl=0):
    return {"mode": mode, "coordinate_transformation_mode": ctm, "nearest_mode": nearest, "cubic_coeff_a": a,
            "exclude_outside": excl}


for test, mode in [("test_resize_downsample_scales_linear_align_corners", "linear"),
                   ("test_resize_downsample_scales_cubic_align_corners", "cubic")]:
    (x, scales), y = node_test(test)
    add_data_case("resize_onnx_" + test[len("test_resize_"):], "Resize", resize_attrs(mode, "align_corners"),
                  [x, scales, None], y)  # kiln: x, scales, sizes (no roi)


def resize_scales(name, x, scales, mode, ctm, nearest="round_prefer_floor"):
    s = np.array(scales, dtype=np.float32)
    y = run_ref("Resize", [x, None, s], 19, mode=mode, coordinate_transformation_mode=ctm, nearest_mode=nearest)
    add_data_case(name, "Resize", resize_attrs(mode, ctm, nearest), [x, s, None], y)


x4 = f32(1, 2, 5, 7)
resize_scales("resize_linear_align_scales_frac", x4, [1, 1, 0.6, 1.7], "linear", "align_corners")
resize_scales("resize_cubic_align_scales_frac", x4, [1, 1, 1.3, 0.7], "cubic", "align_corners")
resize_scales("resize_nearest_align_scales_frac", x4, [1, 1, 0.7, 1.3], "nearest", "align_corners")
resize_scales("resize_linear_pytorch_scales_down", x4, [1, 1, 0.5, 0.4], "linear", "pytorch_half_pixel")

# ---- MaxUnpool with a larger output_shape (indices over the default unpooled shape) ------------
(x, idx, shape), y = node_test("test_maxunpool_export_with_output_shape")
add_data_case("maxunpool_onnx_export_with_output_shape", "MaxUnpool", {"kernel": [2, 2], "strides": [2, 2]},
              [x, idx, shape], y)


def unpool_numpy(x, idx, unpooled, out_shape):
    u = np.zeros(unpooled, dtype=x.dtype)
    u.reshape(-1)[idx.reshape(-1)] = x.reshape(-1)
    y = np.zeros(out_shape, dtype=x.dtype)
    y[tuple(slice(0, e) for e in unpooled)] = u
    return y


# x [1,2,3,3] pooled from [1,2,6,6] (kernel 2, stride 2): one random position per window.
xp = f32(1, 2, 3, 3)
ip = np.zeros((1, 2, 3, 3), dtype=np.int64)
for c in range(2):
    for i in range(3):
        for j in range(3):
            r, s = 2 * i + rng.integers(0, 2), 2 * j + rng.integers(0, 2)
            ip[0, c, i, j] = (c * 6 + r) * 6 + s
out_shape = np.array([1, 2, 8, 7], dtype=np.int64)
add_data_case("maxunpool_output_shape_padded", "MaxUnpool", {"kernel": [2, 2], "strides": [2, 2]}, [xp, ip, out_shape],
              unpool_numpy(xp, ip, (1, 2, 6, 6), tuple(out_shape)))
# 1-D with pads: unpooled (4-1)*2 - 1 - 0 + 3 = 8, output 11.
x1 = f32(2, 1, 4)
i1 = np.array([[[0, 3, 4, 7]], [[9, 10, 13, 15]]], dtype=np.int64)  # flat over [2, 1, 8]
add_data_case("maxunpool_1d_pads_output_shape", "MaxUnpool", {"kernel": [3], "strides": [2], "pads": [1, 0]},
              [x1, i1, np.array([2, 1, 11], dtype=np.int64)], unpool_numpy(x1, i1, (2, 1, 8), (2, 1, 11)))

# ---- BitShift (numpy: logical shift of the unsigned pattern; >= width gives 0) -----------------
def bitshift_numpy(x, s, left):
    bits = x.dtype.itemsize * 8
    u = x.view(np.dtype(f"u{x.dtype.itemsize}")).astype(np.uint64)
    sh = np.broadcast_to(s.view(np.dtype(f"u{s.dtype.itemsize}")).astype(np.uint64), np.broadcast_shapes(x.shape, s.shape))
    safe = np.where(sh < bits, sh, 0)
    r = (u << safe) if left else (u >> safe)
    r = np.where(sh < bits, r & np.uint64((1 << bits) - 1), 0)
    return r.astype(np.dtype(f"u{x.dtype.itemsize}")).view(x.dtype)


xb = rng.integers(0, 256, (3, 4)).astype(np.uint8)
sb = np.array([0, 1, 3, 7], dtype=np.uint8)
add_case("bitshift_uint8_left_broadcast", "BitShift", {"direction": "left"}, [xb, sb], bitshift_numpy(xb, sb, True), 0, 0)
sb2 = rng.integers(0, 10, (3, 4)).astype(np.uint8)  # amounts 8, 9 give 0
add_case("bitshift_uint8_right_wide", "BitShift", {"direction": "right"}, [xb, sb2], bitshift_numpy(xb, sb2, False), 0, 0)
xi = rng.integers(-2**31, 2**31 - 1, (2, 3, 5)).astype(np.int32)
si = rng.integers(-2, 34, (3, 1)).astype(np.int32)  # negative amounts are huge as unsigned: 0
add_case("bitshift_int32_right_logical", "BitShift", {"direction": "right"}, [xi, si], bitshift_numpy(xi, si, False), 0, 0)
xl = rng.integers(-2**40, 2**40, (4,)).astype(np.int64)
sl = np.array(5, dtype=np.int64)
add_case("bitshift_int64_left_scalar", "BitShift", {"direction": "left"}, [xl, sl], bitshift_numpy(xl, sl, True), 0, 0)


# ---- Quantize / Dequantize (numpy; x / scale in float32, round half to even, saturate) ---------
def param_of(x, p, axis, block):
    """Broadcasts per-tensor / per-axis / blocked parameters to x's shape."""
    if p.size == 1 and block == 0:
        return np.broadcast_to(p.reshape(()), x.shape)
    axis = axis % x.ndim
    if block == 0:
        shape = [1] * x.ndim
        shape[axis] = -1
        return np.broadcast_to(p.reshape(shape), x.shape)
    return np.repeat(p, block, axis=axis).take(range(x.shape[axis]), axis=axis)


def quantize_numpy(x, scale, zp, axis=1, block=0, qtype=np.uint8):
    s = param_of(x, scale, axis, block).astype(np.float32)
    z = np.zeros(x.shape, np.float32) if zp is None else param_of(x, zp, axis, block).astype(np.float32)
    v = np.rint(x.astype(np.float32) / s) + z
    info = np.iinfo(qtype)
    return np.clip(v, info.min, info.max).astype(qtype)


def dequantize_numpy(x, scale, zp, axis=1, block=0):
    s = param_of(x, scale, axis, block)
    z = np.zeros(x.shape, np.int64) if zp is None else param_of(x, zp, axis, block).astype(np.int64)
    return ((x.astype(np.int64) - z).astype(np.float32) * s.astype(np.float32)).astype(scale.dtype)


# Ties: with scale 0.5, x = k/2 + 1/4 divides to exactly k + 0.5 (round half to even).
xq = np.concatenate([np.array([0.25, 0.75, -0.25, -0.75, 1.25, 2.25, 300.0, -300.0], np.float32),
                     f32(16, scale=20.0)]).reshape(4, 6)
sq = np.array(0.5, np.float32)
zq = np.array(7, np.uint8)
add_case("quantize_per_tensor_uint8_ties", "Quantize", {"axis": 1, "block_size": 0, "output_type": "uint8"},
         [xq, sq, zq], quantize_numpy(xq, sq, zq), 0, 0)
xa = f32(2, 3, 4, scale=10.0)
sa = np.array([0.25, 0.5, 0.125], np.float32)
za = np.array([-3, 0, 5], np.int8)
add_case("quantize_per_axis_int8", "Quantize", {"axis": 1, "block_size": 0, "output_type": "uint8"},
         [xa, sa, za], quantize_numpy(xa, sa, za, 1, 0, np.int8), 0, 0)
xk = f32(2, 6, scale=10.0)
sk = np.array([[0.5, 0.25], [0.125, 1.0]], np.float32)
zk = np.array([[1, 2], [120, 250]], np.uint8)
add_case("quantize_blocked_uint8", "Quantize", {"axis": 1, "block_size": 3, "output_type": "uint8"},
         [xk, sk, zk], quantize_numpy(xk, sk, zk, 1, 3, np.uint8), 0, 0)
xn = f32(3, 5, scale=30.0)
sn = np.array(0.75, np.float32)
add_case("quantize_no_zero_point_int8", "Quantize", {"axis": 1, "block_size": 0, "output_type": "int8"},
         [xn, sn, None], quantize_numpy(xn, sn, None, qtype=np.int8), 0, 0)

xd = rng.integers(0, 256, (3, 4)).astype(np.uint8)
add_case("dequantize_per_tensor_uint8", "Dequantize", {"axis": 1, "block_size": 0},
         [xd, np.array(0.37, np.float32), np.array(128, np.uint8)],
         dequantize_numpy(xd, np.array(0.37, np.float32), np.array(128, np.uint8)), 1e-6, 1e-6)
xe = rng.integers(-128, 128, (3, 2, 4)).astype(np.int8)
se = np.array([0.5, 0.01, 3.0], np.float32)
ze = np.array([-1, 0, 9], np.int8)
add_case("dequantize_axis0_int8", "Dequantize", {"axis": 0, "block_size": 0}, [xe, se, ze],
         dequantize_numpy(xe, se, ze, 0), 1e-6, 1e-6)
xg = rng.integers(-100000, 100000, (5,)).astype(np.int32)
add_case("dequantize_int32_no_zero_point", "Dequantize", {"axis": 1, "block_size": 0},
         [xg, np.array(0.001, np.float32), None], dequantize_numpy(xg, np.array(0.001, np.float32), None), 1e-6, 1e-6)
xh = rng.integers(0, 256, (4, 2)).astype(np.uint8)
sh = np.array([[0.5, 2.0], [0.25, 1.5]], np.float32)
zh = np.array([[3, 200], [0, 10]], np.uint8)
add_case("dequantize_blocked_axis0", "Dequantize", {"axis": 0, "block_size": 2}, [xh, sh, zh],
         dequantize_numpy(xh, sh, zh, 0, 2), 1e-6, 1e-6)

# ---- GridSample (ONNX Runtime, opset 20 mode names) ----------------------------------------------
xs = f32(2, 3, 4, 5)
gs = rng.uniform(-1.3, 1.3, (2, 3, 4, 2)).astype(np.float32)
for mode in ["linear", "nearest", "cubic"]:
    for pad, ac in [("zeros", 0), ("border", 1), ("reflection", 0), ("reflection", 1)]:
        if mode == "cubic" and pad == "reflection" and ac == 1:
            continue
        y = run_ort("GridSample", [xs, gs], 20, mode=mode, padding_mode=pad, align_corners=ac)
        add_case(f"gridsample_{mode}_{pad}_ac{ac}", "GridSample", {"mode": mode, "padding_mode": pad, "align_corners": ac},
                 [xs, gs], y, 1e-4, 1e-5)
y = run_ort("GridSample", [xs, gs], 20, mode="cubic", padding_mode="border", align_corners=0)
add_case("gridsample_cubic_border_ac0", "GridSample", {"mode": "cubic", "padding_mode": "border", "align_corners": 0},
         [xs, gs], y, 1e-4, 1e-5)
x5 = f32(1, 2, 3, 4, 3)
g5 = rng.uniform(-1.2, 1.2, (1, 2, 3, 2, 3)).astype(np.float32)
for mode, pad in [("linear", "zeros"), ("nearest", "reflection")]:
    y = run_ort("GridSample", [x5, g5], 20, mode=mode, padding_mode=pad, align_corners=0)
    add_case(f"gridsample_3d_{mode}_{pad}", "GridSample", {"mode": mode, "padding_mode": pad, "align_corners": 0},
             [x5, g5], y, 1e-4, 1e-5)

# ---- RoiAlign (ONNX Runtime, opset 16) -----------------------------------------------------------
xr = f32(2, 3, 8, 9)
rois = np.array([[0.5, 1.0, 6.0, 7.5], [2.0, 0.0, 8.5, 5.0], [-1.0, -0.5, 3.0, 2.0], [1.0, 1.0, 1.5, 1.2]], np.float32)
bidx = np.array([0, 1, 1, 0], np.int64)
for mode, ctm, ratio, scale, oh, ow in [("avg", "half_pixel", 0, 1.0, 3, 2), ("max", "half_pixel", 2, 1.0, 2, 3),
                                        ("avg", "output_half_pixel", 2, 0.5, 3, 3),
                                        ("max", "output_half_pixel", 0, 0.75, 2, 2)]:
    y = run_ort("RoiAlign", [xr, rois, bidx], 16, mode=mode, coordinate_transformation_mode=ctm, sampling_ratio=ratio,
                spatial_scale=scale, output_height=oh, output_width=ow)
    add_case(f"roialign_{mode}_{ctm}_r{ratio}", "RoiAlign",
             {"mode": mode, "coordinate_transformation_mode": ctm, "sampling_ratio": ratio, "spatial_scale": scale,
              "output_height": oh, "output_width": ow}, [xr, rois, bidx], y, 1e-4, 1e-5)

# ---- Det (numpy in float64) ----------------------------------------------------------------------
xdet = f32(2, 3, 4, 4)
xdet[0, 1] = np.array([[0, 2, 1, 0], [1, 0, 0, 3], [0, 0, 0, 1], [2, 1, 0, 0]], np.float32)  # zero pivots: swaps
xdet[1, 2, 3] = xdet[1, 2, 0] * 2  # singular
add_case("det_batched_4x4", "Det", {}, [xdet], np.linalg.det(xdet.astype(np.float64)).astype(np.float32), 1e-4, 1e-5)
x1x1 = f32(5, 1, 1)
add_case("det_1x1", "Det", {}, [x1x1], np.linalg.det(x1x1.astype(np.float64)).astype(np.float32), 1e-5, 1e-6)
x33 = f32(3, 3)
add_case("det_single_3x3", "Det", {}, [x33], np.array(np.linalg.det(x33.astype(np.float64)), np.float32), 1e-5, 1e-6)

# ---- merge into the two cases.json files -------------------------------------------------------
def merge(folder, new):
    path = os.path.join(folder, "cases.json")
    with open(path) as f:
        existing = json.load(f)
    names = {c["name"] for c in new}
    merged = [c for c in existing if c["name"] not in names] + new
    with open(path, "w") as f:
        # One case per line (tests/op_table.h describes the entries).
        f.write("[\n" + ",\n".join(json.dumps(c) for c in merged) + "\n]\n")
    print(f"{path}: {len(new)} cases written ({len(merged)} in all)")


merge(HERE, cases)
merge(DATA, data_cases)
