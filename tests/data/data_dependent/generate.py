#!/usr/bin/env python3
"""Generates the reference data of tests/data_dependent_ops_test.cpp: NonMaxSuppression, Unique and
TopK with a run-time k, each an ONNX model run by ONNX Runtime (independent of kiln) on several
input sets whose outputs have different sizes, all of which the test feeds to ONE execution
context. Stored as <case>.onnx, <case>_set<s>_in<i>.npy, <case>_set<s>_out<i>.npy and cases.json
(name, sets, inputs, outputs, tolerances). Run from anywhere:
    python3 tests/data/data_dependent/generate.py
"""
import json
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ONNX_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
              np.dtype(np.int32): TensorProto.INT32, np.dtype(np.int64): TensorProto.INT64,
              np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8}
rng = np.random.default_rng(20260601)
cases = []
for f in os.listdir(HERE):
    if f.endswith(".onnx") or f.endswith(".npy"):
        os.remove(os.path.join(HERE, f))


def case(name, node, input_names, sets, n_outputs, consts=None, opset=11, rtol=0.0, atol=0.0):
    """node reads input_names (graph inputs fed from each set, in order, then consts' names) and
    writes o0..; every set must give the inputs the same ranks and types; dims are symbolic."""
    consts = consts or {}
    first = sets[0]
    g_in = [helper.make_tensor_value_info(n, ONNX_TYPES[a.dtype], [f"{n}_d{i}" for i in range(a.ndim)])
            for n, a in zip(input_names, first)]
    g_out = [helper.make_empty_tensor_value_info(f"o{k}") for k in range(n_outputs)]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in consts.items()]
    model = helper.make_model(helper.make_graph([node], name, g_in, g_out, inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    with open(os.path.join(HERE, name + ".onnx"), "wb") as f:
        f.write(model.SerializeToString())
    sizes = []
    for s, inputs in enumerate(sets):
        outs = sess.run(None, dict(zip(input_names, inputs)))
        sizes.append(outs[0].shape)
        for i, a in enumerate(inputs):
            np.save(os.path.join(HERE, f"{name}_set{s}_in{i}.npy"), np.asarray(a))
        for i, o in enumerate(outs):
            np.save(os.path.join(HERE, f"{name}_set{s}_out{i}.npy"), np.asarray(o))
    assert len(set(sizes)) > 1, f"{name}: every set gives output 0 the dims {sizes[0]}"
    cases.append({"name": name, "sets": len(sets), "inputs": len(input_names), "outputs": n_outputs,
                  "rtol": rtol, "atol": atol})


# ---- NonMaxSuppression ------------------------------------------------------------------------------

def corner_boxes(b, n, flip=True):
    """[b, n, 4] boxes [y1, x1, y2, x2] on a 0..10 grid in steps of 0.25 (exact IoU ties are rare
    but equal scores and identical boxes occur); `flip` swaps some corners."""
    y = rng.integers(0, 32, (b, n, 1)) * 0.25
    x = rng.integers(0, 32, (b, n, 1)) * 0.25
    h = rng.integers(1, 12, (b, n, 1)) * 0.25
    w = rng.integers(1, 12, (b, n, 1)) * 0.25
    boxes = np.concatenate([y, x, y + h, x + w], axis=2)
    if flip:
        swap = rng.random((b, n)) < 0.3
        boxes[swap] = boxes[swap][:, [2, 3, 0, 1]]
    boxes[:, n // 2] = boxes[:, 0]  # an identical pair
    return boxes.astype(np.float32)


def scores(b, c, n, levels=16):
    """Scores on `levels` steps, so that ties (broken by the lower box index) are common."""
    return (rng.integers(0, levels, (b, c, n)) / levels).astype(np.float32)


i64 = lambda v: np.array([v], dtype=np.int64)  # noqa: E731
f32 = lambda v: np.array([v], dtype=np.float32)  # noqa: E731

nms = helper.make_node("NonMaxSuppression", ["boxes", "scores", "max", "iou", "score_threshold"], ["o0"])
case("nms_corners_runtime_scalars", nms, ["boxes", "scores", "max", "iou", "score_threshold"], [
    [corner_boxes(2, 40), scores(2, 3, 40), i64(5), f32(0.5), f32(0.2)],
    [corner_boxes(2, 40), scores(2, 3, 40), i64(40), f32(0.3), f32(0.0)],
    [corner_boxes(1, 25), scores(1, 2, 25), i64(3), f32(0.7), f32(0.6)],
    [corner_boxes(2, 40), scores(2, 3, 40), i64(0), f32(0.5), f32(0.0)],
    [corner_boxes(2, 33), scores(2, 1, 33), i64(100), f32(0.0), f32(-1.0)],
    [corner_boxes(2, 40), scores(2, 3, 40), i64(2), f32(1.0), f32(0.99)],
], 1)


def center_boxes(b, n):
    c = rng.integers(0, 40, (b, n, 2)) * 0.25
    s = rng.integers(1, 16, (b, n, 2)) * 0.25
    return np.concatenate([c, s], axis=2).astype(np.float32)


nms_center = helper.make_node("NonMaxSuppression", ["boxes", "scores", "max", "iou"], ["o0"], center_point_box=1)
case("nms_center_constant_max", nms_center, ["boxes", "scores", "iou"], [
    [center_boxes(1, 30), scores(1, 4, 30), f32(0.4)],
    [center_boxes(1, 30), scores(1, 4, 30), f32(0.0)],
    [center_boxes(3, 12), scores(3, 4, 12), f32(0.9)],
], 1, consts={"max": i64(4)}, opset=10)

# More candidates than one shared-memory sort of the CUDA kernel takes (2048).
case("nms_many_boxes", nms, ["boxes", "scores", "max", "iou", "score_threshold"], [
    [corner_boxes(1, 3000), scores(1, 2, 3000, 1000), i64(50), f32(0.5), f32(0.1)],
    [corner_boxes(1, 3000), scores(1, 2, 3000, 1000), i64(400), f32(0.2), f32(0.0)],
], 1)

# ---- Unique -------------------------------------------------------------------------------------------

def few_values(shape, distinct, dtype):
    return rng.integers(-distinct // 2, distinct - distinct // 2, shape).astype(dtype)


uniq = helper.make_node("Unique", ["x"], ["o0", "o1", "o2", "o3"])
case("unique_flat_sorted", uniq, ["x"], [
    [few_values((12,), 3, np.float32)],
    [rng.permutation(20).astype(np.float32) * 0.5],
    [np.full((7,), 2.5, np.float32)],
    [few_values((15,), 6, np.float32)],
], 4)
uniq_unsorted = helper.make_node("Unique", ["x"], ["o0", "o1", "o2", "o3"], sorted=0)
case("unique_flat_first_occurrence_int64", uniq_unsorted, ["x"], [
    [few_values((3, 4), 5, np.int64)],
    [few_values((2, 9), 40, np.int64)],
    [few_values((1, 6), 1, np.int64)],
], 4)


def rows(n, width, distinct, axis=0, dtype=np.float32):
    """n slices (along axis) drawn from `distinct` different ones."""
    pool = rng.integers(-3, 4, (distinct, width)).astype(dtype)
    picked = pool[rng.integers(0, distinct, n)]
    return np.moveaxis(picked, 0, axis) if axis else picked


uniq_axis0 = helper.make_node("Unique", ["x"], ["o0", "o1", "o2", "o3"], axis=0, sorted=1)
case("unique_axis0_sorted", uniq_axis0, ["x"], [
    [rows(8, 3, 3)],
    [rows(10, 3, 10)],
    [rows(5, 3, 1)],
], 4)


def slices_axis1(n, distinct, dtype):
    """x [2, n, 3]: slice j = x[:, j, :] drawn from `distinct` different ones."""
    pool = rng.integers(-2, 3, (distinct, 2, 3)).astype(dtype)
    picked = pool[rng.integers(0, distinct, n)]  # [n, 2, 3]
    return np.ascontiguousarray(np.transpose(picked, (1, 0, 2)))


uniq_axis1 = helper.make_node("Unique", ["x"], ["o0", "o1", "o2", "o3"], axis=1, sorted=0)
case("unique_axis1_first_occurrence_int8", uniq_axis1, ["x"], [
    [slices_axis1(9, 4, np.int8)],
    [slices_axis1(6, 6, np.int8)],
    [slices_axis1(9, 2, np.int8)],
], 4)
uniq_neg = helper.make_node("Unique", ["x"], ["o0", "o1", "o2", "o3"], axis=-1)
case("unique_last_axis_sorted_float64", uniq_neg, ["x"], [
    [np.ascontiguousarray(rows(7, 2, 3).astype(np.float64).T)],
    [np.ascontiguousarray(rows(7, 2, 7).astype(np.float64).T)],
], 4)

# Longer than one shared-memory tile of the CUDA sort (2048).
case("unique_flat_long_first_occurrence", uniq_unsorted, ["x"], [
    [few_values((5000,), 300, np.float32)],
    [few_values((4000,), 3000, np.float32)],
], 4)
case("unique_flat_long_sorted_int64", uniq, ["x"], [
    [few_values((2, 2500), 700, np.int64)],
    [few_values((2, 2500), 70, np.int64)],
], 4)

# ---- TopK with a run-time k ---------------------------------------------------------------------------

def distinct(shape, dtype=np.float32):
    return (rng.permutation(int(np.prod(shape))).reshape(shape) - np.prod(shape) // 3).astype(dtype) * 0.5


topk = helper.make_node("TopK", ["x", "k"], ["o0", "o1"], axis=1)
case("topk_runtime_k", topk, ["x", "k"], [
    [distinct((3, 10)), i64(3)],
    [distinct((3, 10)), i64(10)],
    [distinct((3, 10)), i64(0)],
    [distinct((2, 7)), i64(1)],
], 2)
topk_small = helper.make_node("TopK", ["x", "k"], ["o0", "o1"], axis=0, largest=0)
case("topk_runtime_k_smallest_axis0_int64", topk_small, ["x", "k"], [
    [distinct((12, 4), np.int64), i64(5)],
    [distinct((12, 4), np.int64), i64(12)],
    [distinct((9, 4), np.int64), i64(2)],
], 2)
# Rows longer than one shared-memory tile of the CUDA sort (2048).
topk_long = helper.make_node("TopK", ["x", "k"], ["o0", "o1"], axis=-1)
case("topk_runtime_k_long_rows", topk_long, ["x", "k"], [
    [distinct((2, 3000)), i64(5)],
    [distinct((2, 3000)), i64(2500)],
    [distinct((2, 3000)), i64(40)],
], 2)

# Cases written by hand (tests/op_table.h: "source": "hand") stay in the file.
if os.path.exists(os.path.join(HERE, "cases.json")):
    with open(os.path.join(HERE, "cases.json")) as f:
        cases += [c for c in json.load(f) if c.get("source") == "hand"]
with open(os.path.join(HERE, "cases.json"), "w") as f:
    # One case per line (tests/op_table.h describes the entries).
    f.write("[\n" + ",\n".join(json.dumps(c) for c in cases) + "\n]\n")
