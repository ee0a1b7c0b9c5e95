#!/usr/bin/env python3
"""Generates the reference data of tests/ops_data_test.cpp: one single-layer case per entry of
cases.json, whose inputs and expected outputs are .npy files computed here by ONNX Runtime
(an implementation independent of kiln). Each case names the kiln layer type and attributes
(docs/layers.md) that must reproduce the ONNX node. Run from anywhere:
    python3 tests/data/data/gen_cases.py
"""
import json
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
OPSET = 19
rng = np.random.default_rng(20261129)
cases = []

NP_TO_ONNX = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64, np.int32: TensorProto.INT32,
              np.float64: TensorProto.DOUBLE, np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8,
              np.bool_: TensorProto.BOOL, np.float16: TensorProto.FLOAT16}


def run_onnx(nodes, inputs, n_outputs):
    """Runs a graph of `nodes` whose inputs are named i0.. and outputs o0.. with ONNX Runtime."""
    g_inputs, feeds = [], {}
    for k, a in enumerate(inputs):
        if a is None:
            continue
        g_inputs.append(helper.make_tensor_value_info(f"i{k}", NP_TO_ONNX[a.dtype.type], list(a.shape)))
        feeds[f"i{k}"] = a
    g_outputs = [onnx.ValueInfoProto(name=f"o{k}") for k in range(n_outputs)]
    graph = helper.make_graph(nodes, "g", g_inputs, g_outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 9
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def tolerance(name):
    """Linear and cubic interpolation round differently (ONNX Runtime sums in float), and so does
    a float Range (ONNX Runtime adds delta repeatedly; kiln computes start + i * delta, as the
    ONNX definition reads). Everything else moves values and must match exactly."""
    interpolates = "linear" in name or "cubic" in name or name == "range_float"
    return {"rtol": 1e-5, "atol": 1e-5} if interpolates else {"rtol": 0.0, "atol": 0.0}


def add_case(name, kiln_type, attrs, inputs, nodes, n_outputs=1, onnx_inputs=None):
    """inputs: arrays for the kiln layer (None = omitted optional input). onnx_inputs: the ONNX
    graph's inputs when they differ from kiln's (e.g. Resize's roi)."""
    outs = run_onnx(nodes, inputs if onnx_inputs is None else onnx_inputs, n_outputs)
    entry = {"name": name, "type": kiln_type, "attrs": attrs, "inputs": [], "outputs": []}
    for k, a in enumerate(inputs):
        if a is None:
            entry["inputs"].append(None)
            continue
        fn = f"{name}_in{k}.npy"
        np.save(os.path.join(HERE, fn), a)
        entry["inputs"].append(fn)
    for k, o in enumerate(outs):
        fn = f"{name}_out{k}.npy"
        np.save(os.path.join(HERE, fn), o)
        entry["outputs"].append(fn)
    entry.update(tolerance(name))
    cases.append(entry)


def node(op, n_in, n_out=1, **kw):
    ins = [f"i{k}" if k is not None else "" for k in n_in] if isinstance(n_in, list) else [f"i{k}" for k in range(n_in)]
    return helper.make_node(op, ins, [f"o{k}" for k in range(n_out)], **kw)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def i64(*v):
    return np.array(v, dtype=np.int64)


# ---- Resize: every combination the YOLO / UNet exporters use, and then some ----------------------
def resize(name, x, mode, ctm, nearest="round_prefer_floor", scales=None, sizes=None, a=-0.75, excl=0):
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm, "nearest_mode": nearest, "cubic_coeff_a": a,
             "exclude_outside": excl}
    s = None if scales is None else np.array(scales, dtype=np.float32)
    z = None if sizes is None else np.array(sizes, dtype=np.int64)
    n = helper.make_node("Resize", ["i0", "", "i1" if s is not None else "", "i2" if z is not None else ""], ["o0"],
                         mode=mode, coordinate_transformation_mode=ctm, nearest_mode=nearest, cubic_coeff_a=a,
                         exclude_outside=excl)
    add_case(name, "Resize", attrs, [x, s, z], [n])


x4 = f32(1, 2, 5, 7)
resize("resize_nearest_asym_floor_2x", x4, "nearest", "asymmetric", "floor", scales=[1, 1, 2, 2])
resize("resize_nearest_halfpixel_rpf_2x", x4, "nearest", "half_pixel", "round_prefer_floor", scales=[1, 1, 2, 2])
resize("resize_nearest_halfpixel_rpf_frac", x4, "nearest", "half_pixel", "round_prefer_floor", scales=[1, 1, 1.5, 0.6])
# Sizes chosen so that no source coordinate is an exact .5 tie: at such ties ONNX Runtime's binary
# rounds the float quotient inconsistently (1 / float(2/7) rounds up, 7 / float(2/7) down).
resize("resize_nearest_asym_rpc_sizes", x4, "nearest", "asymmetric", "round_prefer_ceil", sizes=[1, 2, 3, 9])
resize("resize_nearest_tfnn_ceil", x4, "nearest", "tf_half_pixel_for_nn", "ceil", scales=[1, 1, 1.7, 2.3])
resize("resize_nearest_align_rpf", x4, "nearest", "align_corners", "round_prefer_floor", sizes=[1, 2, 9, 3])
resize("resize_nearest_pytorch_floor", x4, "nearest", "pytorch_half_pixel", "floor", sizes=[1, 2, 1, 11])
resize("resize_nearest_int32", rng.integers(-50, 50, (2, 3, 4)).astype(np.int32), "nearest", "half_pixel",
       "round_prefer_ceil", scales=[1, 2, 1.5])
resize("resize_linear_halfpixel_2x", x4, "linear", "half_pixel", scales=[1, 1, 2, 2])
resize("resize_linear_halfpixel_down", x4, "linear", "half_pixel", scales=[1, 1, 0.5, 0.75])
resize("resize_linear_align_sizes", x4, "linear", "align_corners", sizes=[1, 2, 9, 12])
resize("resize_linear_pytorch_sizes", x4, "linear", "pytorch_half_pixel", sizes=[1, 2, 1, 10])
resize("resize_linear_asym", x4, "linear", "asymmetric", scales=[1, 1, 1.5, 2.5])
resize("resize_linear_symmetric", x4, "linear", "half_pixel_symmetric", scales=[1, 1, 1.3, 0.7])
resize("resize_linear_3d", f32(1, 2, 3, 4, 5), "linear", "half_pixel", scales=[1, 1, 2, 1.5, 0.8])
resize("resize_cubic_halfpixel_2x", x4, "cubic", "half_pixel", scales=[1, 1, 2, 2])
resize("resize_cubic_align_excl", x4, "cubic", "align_corners", sizes=[1, 2, 8, 10], a=-0.5, excl=1)
resize("resize_cubic_asym_down", x4, "cubic", "asymmetric", scales=[1, 1, 0.6, 0.8])
resize("resize_cubic_pytorch_excl", x4, "cubic", "pytorch_half_pixel", scales=[1, 1, 1.4, 3], excl=1)

# ---- Padding -----------------------------------------------------------------------------------
def pad(name, x, pads, mode, value=None):
    p = np.array(pads, dtype=np.int64)
    ins = [x, p] + ([value] if value is not None else [])
    add_case(name, "Padding", {"mode": mode}, ins, [node("Pad", len(ins), mode=mode)])


x3 = f32(2, 3, 4)
pad("pad_constant_value", x3, [0, 1, 2, 1, 0, 3], "constant", np.array(1.5, dtype=np.float32))
pad("pad_constant_default", x3, [1, 0, 1, 0, 2, 0], "constant")
pad("pad_reflect", x3, [0, 2, 3, 0, 1, 2], "reflect")
pad("pad_edge", x3, [1, 2, 0, 0, 1, 5], "edge")
pad("pad_wrap", x3, [0, 2, 3, 0, 1, 2], "wrap")
pad("pad_negative_constant", x3, [0, -1, 2, -1, 1, -2], "constant", np.array(-3.0, dtype=np.float32))
pad("pad_int64_edge", rng.integers(-9, 9, (3, 4)).astype(np.int64), [1, 2, 2, 1], "edge")

# ---- Gather ------------------------------------------------------------------------------------
data3 = f32(4, 5, 3)
add_case("gather_axis0_neg", "Gather", {"axis": 0}, [data3, i64(3, -1, 0, -4)], [node("Gather", 2, axis=0)])
add_case("gather_axis1_2d_neg", "Gather", {"axis": 1}, [data3, np.array([[0, -1], [-5, 2], [4, 1]], dtype=np.int32)],
         [node("Gather", 2, axis=1)])
add_case("gather_axis_neg1_scalar", "Gather", {"axis": -1}, [data3, np.array(-2, dtype=np.int64)],
         [node("Gather", 2, axis=-1)])
add_case("gather_int64_data", "Gather", {"axis": 0},
         [rng.integers(-1000, 1000, (5, 2)).astype(np.int64), i64(4, -5, 2)], [node("Gather", 2, axis=0)])
add_case("gather_elements_axis1", "Gather", {"mode": "elements", "axis": 1},
         [data3, rng.integers(-5, 5, (4, 7, 2)).astype(np.int64)], [node("GatherElements", 2, axis=1)])
add_case("gather_elements_axis0", "Gather", {"mode": "elements", "axis": 0},
         [f32(3, 4), rng.integers(-3, 3, (2, 4)).astype(np.int64)], [node("GatherElements", 2, axis=0)])
add_case("gather_nd_b0", "Gather", {"mode": "nd"},
         [data3, np.array([[[1, -2], [3, 4]], [[0, 0], [-1, 1]]], dtype=np.int64)], [node("GatherND", 2)])
add_case("gather_nd_b1", "Gather", {"mode": "nd", "batch_dims": 1},
         [data3, rng.integers(0, 3, (4, 2, 2)).astype(np.int64) % np.array([5, 3])], [node("GatherND", 2, batch_dims=1)])

# ---- Slice -------------------------------------------------------------------------------------
xs = f32(6, 7, 5)
BIG = np.iinfo(np.int64).max
def slc(name, starts, ends, axes=None, steps=None, dtype=np.int64):
    ins = [xs, np.array(starts, dtype), np.array(ends, dtype)]
    ins.append(None if axes is None else np.array(axes, dtype))
    ins.append(None if steps is None else np.array(steps, dtype))
    present = [k for k, a in enumerate(ins) if a is not None]
    n = helper.make_node("Slice", [f"i{k}" if ins[k] is not None else "" for k in range(len(ins))], ["o0"])
    while ins and ins[-1] is None:
        ins.pop()
    add_case(name, "Slice", {}, ins, [n])


slc("slice_basic", [1, 2], [4, 6])
slc("slice_clamp_big", [-100, 3], [BIG, 100], axes=[0, 2])
slc("slice_negative_steps", [-1, 5, 100], [-BIG - 1, 0, -100], axes=[0, 1, 2], steps=[-2, -3, -1])
slc("slice_steps_neg_axes", [0, 1], [7, 5], axes=[-2, -1], steps=[3, 2], dtype=np.int32)
slc("slice_empty", [4], [2], axes=[1])

# ---- Tile / Expand -----------------------------------------------------------------------------
add_case("tile_3d", "Tile", {}, [f32(2, 3, 2), i64(2, 1, 3)], [node("Tile", 2)])
add_case("tile_bool", "Tile", {}, [rng.integers(0, 2, (2, 3)).astype(np.bool_), i64(3, 2)], [node("Tile", 2)])
add_case("expand_up", "Expand", {}, [f32(3, 1), i64(2, 1, 4)], [node("Expand", 2)])
add_case("expand_bidirectional", "Expand", {}, [f32(1, 4, 1), i64(3, 1, 1, 5)], [node("Expand", 2)])
add_case("expand_shape_smaller", "Expand", {}, [f32(2, 3, 4), i64(3, 1)], [node("Expand", 2)])

# ---- Shuffle (Transpose / Reshape chains) ------------------------------------------------------
add_case("transpose_4d", "Shuffle", {"first_transpose": [0, 2, 3, 1]}, [f32(2, 3, 4, 5)],
         [node("Transpose", 1, perm=[0, 2, 3, 1])])
add_case("transpose_5d", "Shuffle", {"first_transpose": [0, 3, 1, 4, 2]}, [f32(2, 3, 2, 4, 3)],
         [node("Transpose", 1, perm=[0, 3, 1, 4, 2])])
add_case("shuffle_t_reshape_t", "Shuffle",
         {"first_transpose": [0, 2, 1, 3], "reshape_mode": "dims", "reshape": [0, -1, 6],
          "second_transpose": [2, 0, 1]},
         [f32(2, 3, 4, 6)],
         [helper.make_node("Transpose", ["i0"], ["t"], perm=[0, 2, 1, 3]),
          helper.make_node("Constant", [], ["s"], value=numpy_helper.from_array(i64(0, -1, 6))),
          helper.make_node("Reshape", ["t", "s"], ["r"]),
          helper.make_node("Transpose", ["r"], ["o0"], perm=[2, 0, 1])])
add_case("shuffle_dynamic_reshape", "Shuffle", {"reshape_mode": "dims"}, [f32(2, 3, 4), i64(4, 0, -1)],
         [node("Reshape", 2)])
add_case("shuffle_yolo_head", "Shuffle",  # [N, A*(5+C), H, W] -> [N, A, H, W, 5+C]
         {"reshape_mode": "dims", "reshape": [1, 3, 7, 4, 5], "second_transpose": [0, 1, 3, 4, 2]},
         [f32(1, 21, 4, 5)],
         [helper.make_node("Constant", [], ["s"], value=numpy_helper.from_array(i64(1, 3, 7, 4, 5))),
          helper.make_node("Reshape", ["i0", "s"], ["r"]),
          helper.make_node("Transpose", ["r"], ["o0"], perm=[0, 1, 3, 4, 2])])

# ---- Concatenation / Split ---------------------------------------------------------------------
add_case("concat_axis1", "Concatenation", {"axis": 1}, [f32(2, 1, 3), f32(2, 4, 3), f32(2, 2, 3)],
         [node("Concat", 3, axis=1)])
add_case("concat_axis_neg1_int8", "Concatenation", {"axis": -1},
         [rng.integers(-100, 100, (3, 2)).astype(np.int8), rng.integers(-100, 100, (3, 5)).astype(np.int8)],
         [node("Concat", 2, axis=-1)])
add_case("split_uneven", "Split", {"axis": 1}, [f32(2, 7, 3)], [node("Split", 1, 3, axis=1, num_outputs=3)], 3)
add_case("split_sizes_input", "Split", {"axis": -1}, [f32(3, 2, 6), i64(1, 3, 2)], [node("Split", 2, 3, axis=-1)], 3)

# ---- Fill (Range / ConstantOfShape) ------------------------------------------------------------
def scalar(v, dt):
    return np.array(v, dtype=dt)


add_case("range_float", "Fill", {"mode": "range"}, [scalar(0.5, np.float32), scalar(3.7, np.float32),
                                                     scalar(0.3, np.float32)], [node("Range", 3)])
add_case("range_int_negative", "Fill", {"mode": "range"}, [scalar(10, np.int64), scalar(-3, np.int64),
                                                           scalar(-4, np.int64)], [node("Range", 3)])
add_case("range_int32", "Fill", {"mode": "range"}, [scalar(-2, np.int32), scalar(9, np.int32),
                                                    scalar(3, np.int32)], [node("Range", 3)])

# Cases written by hand (tests/op_table.h: "source": "hand") stay in the file.
if os.path.exists(os.path.join(HERE, "cases.json")):
    with open(os.path.join(HERE, "cases.json")) as f:
        cases += [c for c in json.load(f) if c.get("source") == "hand"]
with open(os.path.join(HERE, "cases.json"), "w") as f:
    # One case per line (tests/op_table.h describes the entries).
    f.write("[\n" + ",\n".join(json.dumps(c) for c in cases) + "\n]\n")
print(len(cases), "cases")
