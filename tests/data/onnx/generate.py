#!/usr/bin/env python3
"""Generates the small ONNX models of tests/onnx_import_test.cpp.

Each model isolates one tricky corner of the importer (BatchNorm folding, opset-dependent
attribute/input spellings, auto_pad, external data, unsupported nodes, ...). For the models that
a kiln engine can run, ONNX Runtime's outputs on fixed random inputs are saved next to them as
<model>_in<i>.npy / <model>_out<i>.npy (inputs and outputs in graph order) so that the test can
also compare kiln end to end. Rerun from the repository root:
    python3 tests/data/onnx/generate.py
"""
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(20241129)


def vi(name, shape, elem=T.FLOAT):
    return h.make_tensor_value_info(name, elem, shape)


def init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def model(nodes, inputs, outputs, inits=(), opset=13, extra_opsets=(), ir_version=None):
    graph = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)] + list(extra_opsets))
    # ONNX Runtime accepts IR versions up to 10; the helper's default may be newer.
    m.ir_version = ir_version or min(m.ir_version, 8)
    return m


def save(name, m, feeds=None, check=True):
    if check:
        onnx.checker.check_model(m)
    onnx.save(m, os.path.join(HERE, name + ".onnx"))
    if feeds is None:
        return
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    outs = sess.run(None, feeds)
    for i, inp in enumerate(m.graph.input):
        if inp.name in feeds:
            np.save(os.path.join(HERE, f"{name}_in{i}.npy"), feeds[inp.name])
    for i, o in enumerate(outs):
        np.save(os.path.join(HERE, f"{name}_out{i}.npy"), o)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# ---- BatchNormalization -> Scale (channel) -------------------------------------------------
# The test recomputes scale = gamma / sqrt(var + eps), shift = beta - mean * scale from these values.
BN = dict(gamma=[0.5, 1.0, 2.0], beta=[0.1, -0.2, 0.3], mean=[0.0, 1.0, -1.0], var=[1.0, 4.0, 0.25], eps=1e-3)
save("batchnorm",
     model([h.make_node("BatchNormalization", ["x", "gamma", "beta", "mean", "var"], ["y"], name="bn", epsilon=BN["eps"])],
           [vi("x", ["N", 3, 4, 4])], [vi("y", ["N", 3, 4, 4])],
           [init(k, np.array(BN[k], np.float32)) for k in ("gamma", "beta", "mean", "var")]),
     {"x": randn(2, 3, 4, 4)})
save("batchnorm_dynamic",
     model([h.make_node("BatchNormalization", ["x", "gamma", "beta", "mean", "var"], ["y"], name="bn_dyn")],
           [vi("x", [1, 3, 4, 4]), vi("gamma", [3])], [vi("y", [1, 3, 4, 4])],
           [init(k, np.array(BN[k], np.float32)) for k in ("beta", "mean", "var")]))

# ---- Clip: attributes (opset 6) vs inputs (opset 13) ---------------------------------------
save("clip6",
     model([h.make_node("Clip", ["x"], ["y1"], name="clip_both", min=-1.0, max=2.0),
            h.make_node("Clip", ["x"], ["y2"], name="clip_max", max=0.5)],
           [vi("x", [2, 8])], [vi("y1", [2, 8]), vi("y2", [2, 8])], opset=6, ir_version=3),
     {"x": randn(2, 8) * 3})
save("clip13",
     model([h.make_node("Constant", [], ["hi"], name="hi_const", value=h.make_tensor("v", T.FLOAT, [], [1.5])),
            h.make_node("Clip", ["x", "lo"], ["y1"], name="clip_min"),
            h.make_node("Clip", ["x", "", "hi"], ["y2"], name="clip_max")],
           [vi("x", [2, 8])], [vi("y1", [2, 8]), vi("y2", [2, 8])], [init("lo", np.array(-0.5, np.float32))]),
     {"x": randn(2, 8) * 3})
save("clip13_dynamic",
     model([h.make_node("Clip", ["x", "lo"], ["y"], name="clip_dyn")],
           [vi("x", [2, 8]), vi("lo", [])], [vi("y", [2, 8])]))

# ---- Squeeze / Unsqueeze: axes attribute (11) vs input (13) --------------------------------
save("squeeze11",
     model([h.make_node("Squeeze", ["x"], ["s"], name="sq", axes=[0, 2]),
            h.make_node("Unsqueeze", ["s"], ["y"], name="unsq", axes=[1])],
           [vi("x", [1, 3, 1, 5])], [vi("y", [3, 1, 5])], opset=11),
     {"x": randn(1, 3, 1, 5)})
save("squeeze13",
     model([h.make_node("Squeeze", ["x", "sq_axes"], ["s"], name="sq"),
            h.make_node("Unsqueeze", ["s", "unsq_axes"], ["y"], name="unsq")],
           [vi("x", [1, 3, 1, 5])], [vi("y", [3, 1, 5])],
           [init("sq_axes", np.array([0, 2], np.int64)), init("unsq_axes", np.array([1], np.int64))]),
     {"x": randn(1, 3, 1, 5)})

# ---- Softmax: coerce-to-2D (opset 11) vs axis (13) ------------------------------------------
save("softmax11",
     model([h.make_node("Softmax", ["x"], ["y1"], name="sm_default"),          # axis 1 of 3-D: 2-D semantics
            h.make_node("Softmax", ["x"], ["y2"], name="sm_last", axis=2),     # last axis: plain softmax
            h.make_node("LogSoftmax", ["x"], ["y3"], name="lsm_neg", axis=-1)],
           [vi("x", [2, 3, 4])], [vi("y1", [2, 3, 4]), vi("y2", [2, 3, 4]), vi("y3", [2, 3, 4])], opset=11),
     {"x": randn(2, 3, 4)})
save("softmax13",
     model([h.make_node("Softmax", ["x"], ["y"], name="sm", axis=1)], [vi("x", [2, 3, 4])], [vi("y", [2, 3, 4])]),
     {"x": randn(2, 3, 4)})

# ---- Resize 10 vs 13, Upsample 7 ------------------------------------------------------------
save("resize10",
     model([h.make_node("Resize", ["x", "scales"], ["y"], name="rs", mode="nearest")],
           [vi("x", [1, 2, 3, 3])], [vi("y", [1, 2, 6, 6])], [init("scales", np.array([1, 1, 2, 2], np.float32))], opset=10),
     {"x": randn(1, 2, 3, 3)})
save("resize13",
     model([h.make_node("Resize", ["x", "", "", "sizes"], ["y1"], name="rs_sizes", mode="linear",
                        coordinate_transformation_mode="align_corners"),
            h.make_node("Resize", ["x", "roi", "scales", ""], ["y2"], name="rs_scales", mode="nearest",
                        coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
            h.make_node("Resize", ["x", "", "no_scales", "sizes"], ["y3"], name="rs_empty_scales", mode="nearest")],
           [vi("x", [1, 2, 3, 3])], [vi("y1", [1, 2, 5, 7]), vi("y2", [1, 2, 6, 6]), vi("y3", [1, 2, 5, 7])],
           [init("sizes", np.array([1, 2, 5, 7], np.int64)), init("roi", np.zeros([0], np.float32)),
            init("scales", np.array([1, 1, 2, 2], np.float32)), init("no_scales", np.zeros([0], np.float32))]),
     {"x": randn(1, 2, 3, 3)})
save("upsample7",
     model([h.make_node("Upsample", ["x"], ["y"], name="up", scales=[1.0, 1.0, 2.0, 3.0], mode="nearest")],
           [vi("x", [1, 2, 3, 3])], [vi("y", [1, 2, 6, 9])], opset=7, ir_version=3),
     {"x": randn(1, 2, 3, 3)})

# ---- Split: attribute (11), input (13), num_outputs (18) ------------------------------------
save("split11",
     model([h.make_node("Split", ["x"], ["a", "b"], name="split", axis=1, split=[2, 3])],
           [vi("x", [2, 5])], [vi("a", [2, 2]), vi("b", [2, 3])], opset=11),
     {"x": randn(2, 5)})
save("split13",
     model([h.make_node("Split", ["x", "sizes"], ["a", "b"], name="split", axis=1)],
           [vi("x", [2, 5])], [vi("a", [2, 2]), vi("b", [2, 3])], [init("sizes", np.array([2, 3], np.int64))]),
     {"x": randn(2, 5)})
save("split18",
     model([h.make_node("Split", ["x"], ["a", "b", "c"], name="split", axis=0, num_outputs=3)],
           [vi("x", [7, 2])], [vi("a", [3, 2]), vi("b", [3, 2]), vi("c", [1, 2])], opset=18),
     {"x": randn(7, 2)})

# ---- ConvTranspose with output_shape / SAME_UPPER --------------------------------------------
# output_shape 6x6 from 3x3 with stride 2, kernel 3: total padding 2*2 + 3 - 6 = 1 -> pads [1,1,0,0]
# (the larger half first, ONNX spec and ONNX Runtime); SAME_UPPER: total = 0 + 3 - 2 = 1 -> [0,0,1,1].
save("convtranspose",
     model([h.make_node("ConvTranspose", ["x", "w", "b"], ["y1"], name="ct_output_shape", strides=[2, 2], output_shape=[6, 6]),
            h.make_node("ConvTranspose", ["x", "w"], ["y2"], name="ct_same_upper", strides=[2, 2], auto_pad="SAME_UPPER")],
           [vi("x", [1, 2, 3, 3])], [vi("y1", [1, 3, 6, 6]), vi("y2", [1, 3, 6, 6])],
           [init("w", randn(2, 3, 3, 3)), init("b", randn(3))]),
     {"x": randn(1, 2, 3, 3)})

# ---- auto_pad on Conv / pools ------------------------------------------------------------------
# Conv k4 s2 SAME_UPPER on 7: out 4, total 3*2+4-7 = 3 -> [1,1,2,2]; MaxPool k2 s1 SAME_LOWER: total 1
# -> [1,1,0,0]; AveragePool k2 s2 SAME_LOWER on 7: total 3*2+2-7 = 1 -> [1,1,0,0]; Conv VALID -> zeros.
save("autopad",
     model([h.make_node("Conv", ["x", "w"], ["y1"], name="conv_same_upper", strides=[2, 2], auto_pad="SAME_UPPER"),
            h.make_node("MaxPool", ["x"], ["y2"], name="maxpool_same_lower", kernel_shape=[2, 2], auto_pad="SAME_LOWER"),
            h.make_node("AveragePool", ["x"], ["y3"], name="avgpool_same_lower", kernel_shape=[2, 2], strides=[2, 2],
                        auto_pad="SAME_LOWER"),
            h.make_node("Conv", ["x", "w"], ["y4"], name="conv_valid", auto_pad="VALID")],
           [vi("x", [1, 1, 7, 7])], [vi("y1", [1, 2, 4, 4]), vi("y2", [1, 1, 7, 7]), vi("y3", [1, 1, 4, 4]), vi("y4", [1, 2, 4, 4])],
           [init("w", randn(2, 1, 4, 4))]),
     {"x": randn(1, 1, 7, 7)})
save("autopad_dynamic",
     model([h.make_node("Conv", ["x", "w"], ["y1"], name="conv_s1", auto_pad="SAME_UPPER"),
            h.make_node("Conv", ["x", "w"], ["y2"], name="conv_s2", strides=[2, 2], auto_pad="SAME_UPPER")],
           [vi("x", ["N", 1, "H", "W"])], [vi("y1", None), vi("y2", None)], [init("w", randn(2, 1, 3, 3))]),
     check=False)

# ---- external data and typed-field tensors ------------------------------------------------------
# w = arange(108)/100 as [4,3,3,3], b = [1,2,3,4], stored in external_data.bin; the test checks the values.
ext = model([h.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", pads=[1, 1, 1, 1]),
             h.make_node("Cast", ["h"], ["hf"], name="cast", to=T.FLOAT),
             h.make_node("Mul", ["y", "hf"], ["out"], name="mul_half")],
            [vi("x", [1, 3, 4, 4])], [vi("out", [1, 4, 4, 4])],
            [init("w", (np.arange(108, dtype=np.float32) / 100).reshape(4, 3, 3, 3)), init("b", np.array([1, 2, 3, 4], np.float32)),
             h.make_tensor("h", T.FLOAT16, [1], [0.5])])
if os.path.exists(os.path.join(HERE, "external_data.bin")):
    os.remove(os.path.join(HERE, "external_data.bin"))  # onnx appends to an existing file
onnx.save_model(ext, os.path.join(HERE, "external_data.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                location="external_data.bin", size_threshold=0)
os.chmod(os.path.join(HERE, "external_data.bin"), 0o644)
_x = randn(1, 3, 4, 4)
np.save(os.path.join(HERE, "external_data_in0.npy"), _x)
_sess = ort.InferenceSession(os.path.join(HERE, "external_data.onnx"), providers=["CPUExecutionProvider"])
np.save(os.path.join(HERE, "external_data_out0.npy"), _sess.run(None, {"x": _x})[0])
save("typed_fields",
     model([h.make_node("Identity", ["i64"], ["o1"], name="id_i64"),
            h.make_node("Identity", ["f16"], ["o2"], name="id_f16"),
            h.make_node("Identity", ["i8"], ["o3"], name="id_i8"),
            h.make_node("Identity", ["f32"], ["o4"], name="id_f32")],
           [], [vi("o1", [3], T.INT64), vi("o2", [2], T.FLOAT16), vi("o3", [2], T.INT8), vi("o4", [2])],
           [h.make_tensor("i64", T.INT64, [3], [-1, 0, 1 << 40]),
            h.make_tensor("f16", T.FLOAT16, [2], [1.5, -2.0]),
            h.make_tensor("i8", T.INT8, [2], [-7, 100]),
            h.make_tensor("f32", T.FLOAT, [2], [0.25, -3.0])]))


def external_variant(name, location, offset, length):
    """A one-initializer model whose external data reference is wrong in one way."""
    t = h.make_tensor("w", T.FLOAT, [4], [0, 0, 0, 0])
    t.ClearField("float_data")
    t.data_location = T.EXTERNAL
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(length))):
        e = t.external_data.add()
        e.key, e.value = k, v
    m = model([h.make_node("Relu", ["w"], ["y"], name="relu")], [], [vi("y", [4])], [t])
    save(name, m, check=False)


external_variant("external_past_end", "external_data.bin", 10**6, 16)
external_variant("external_escape", "../external_data.bin", 0, 16)

# ---- unsupported nodes are all reported ----------------------------------------------------------
save("unsupported",
     model([h.make_node("Relu", ["x"], ["r1"], name="relu_in"),
            h.make_node("FooBar", ["r1"], ["f"], name="foo"),
            h.make_node("MyOp", ["f"], ["c"], name="custom_1", domain="com.example", alpha=2.0),
            h.make_node("Relu", ["c"], ["r2"], name="relu_after"),
            h.make_node("Relu", ["r2"], ["r3"], name="relu_after2"),
            # Would be an error (non-constant bound), but only because of the unsupported nodes upstream.
            h.make_node("Clip", ["x", "r3"], ["cc"], name="clip_consequence"),
            h.make_node("MaxPool", ["x"], ["p"], name="pool_storage", kernel_shape=[2, 2], storage_order=1),
            h.make_node("Add", ["r2", "p"], ["y"], name="add")],
           [vi("x", [1, 1, 4, 4])], [vi("y", None), vi("cc", None)], extra_opsets=[h.make_opsetid("com.example", 3)]),
     check=False)

# ---- a broad sample of mappings (structure only) -----------------------------------------------
save("misc",
     model([h.make_node("Mean", ["x", "x2", "x3"], ["mean"], name="mean3"),
            h.make_node("Gemm", ["mat", "gw", "gb"], ["gemm"], name="gemm", transB=1, alpha=0.5),
            h.make_node("Transpose", ["x"], ["tr"], name="transpose_default"),
            h.make_node("Constant", [], ["shape"], name="shape_const", value_ints=[0, -1]),
            h.make_node("Reshape", ["x", "shape"], ["rs"], name="reshape_allowzero", allowzero=1),
            h.make_node("Reshape", ["x", "dyn_shape"], ["rs2"], name="reshape_dynamic"),
            h.make_node("PRelu", ["x", "slope"], ["prelu"], name="prelu"),
            h.make_node("Selu", ["x"], ["selu"], name="selu"),
            h.make_node("HardSigmoid", ["x"], ["hs"], name="hard_sigmoid"),
            h.make_node("Greater", ["x", "x2"], ["gt"], name="greater"),
            h.make_node("Where", ["gt", "x", "x2"], ["where"], name="where"),
            h.make_node("Pad", ["x", "pads", "pad_value"], ["pad"], name="pad", mode="reflect"),
            h.make_node("Slice", ["x", "starts", "ends", "", "steps"], ["slice"], name="slice"),
            h.make_node("Flatten", ["x"], ["flat"], name="flatten", axis=2),
            h.make_node("Shape", ["x"], ["shp"], name="shape_tail", start=1),
            h.make_node("ConstantOfShape", ["shp"], ["fill"], name="fill", value=h.make_tensor("v", T.INT64, [1], [7])),
            h.make_node("Range", ["r_start", "r_limit", "r_delta"], ["range"], name="range"),
            h.make_node("Expand", ["x", "shp_full"], ["expand"], name="expand"),
            h.make_node("Tile", ["x", "repeats"], ["tile"], name="tile"),
            h.make_node("Gather", ["x", "idx"], ["gather"], name="gather", axis=1),
            h.make_node("GatherElements", ["x", "idx_el"], ["gel"], name="gather_elements", axis=2),
            h.make_node("ReduceMean", ["x"], ["rmean"], name="reduce_mean", axes=[1, 2], keepdims=0),
            h.make_node("ReduceSum", ["x", "rs_axes"], ["rsum"], name="reduce_sum"),
            h.make_node("Dropout", ["x"], ["drop"], name="dropout"),
            h.make_node("Cast", ["x"], ["cast"], name="cast_i32", to=T.INT32),
            h.make_node("Sqrt", ["x"], ["sqrt"], name="sqrt"),
            h.make_node("Not", ["gt"], ["not"], name="not"),
            h.make_node("MatMul", ["x", "mw"], ["mm"], name="matmul"),
            h.make_node("Identity", ["gw"], ["gw_copy"], name="identity_of_init"),
            h.make_node("Concat", ["x", "x2"], ["cat"], name="concat", axis=-1)],
           [vi("x", ["N", 3, 4]), vi("x2", ["N", 3, 4]), vi("x3", [1, 3, 4]), vi("mat", [2, 5]), vi("dyn_shape", [2], T.INT64)],
           [vi(n, None) for n in ("mean", "gemm", "tr", "rs", "rs2", "prelu", "selu", "hs", "where", "pad", "slice", "flat",
                                  "fill", "range", "expand", "tile", "gather", "gel", "rmean", "rsum", "drop", "cast", "sqrt",
                                  "not", "mm", "cat")] + [vi("gw", [6, 5]), vi("gw_copy", [6, 5])],
           [init("gw", randn(6, 5)), init("gb", randn(6)), init("slope", randn(3, 1)),
            init("pads", np.array([0, 0, 1, 0, 0, 2], np.int64)), init("pad_value", np.array(0.0, np.float32)),
            init("starts", np.array([1], np.int64)), init("ends", np.array([3], np.int64)),
            init("steps", np.array([1], np.int64)), init("r_start", np.array(0, np.int64)),
            init("r_limit", np.array(5, np.int64)), init("r_delta", np.array(2, np.int64)),
            init("shp_full", np.array([2, 3, 4], np.int64)), init("repeats", np.array([1, 2, 1], np.int64)),
            init("idx", np.array([0, 2], np.int64)), init("idx_el", np.zeros([1, 3, 2], np.int64)),
            init("rs_axes", np.array([-1], np.int64)), init("mw", randn(4, 2))]),
     check=False)

# ---- older opsets: Slice/Pad attributes, Upsample input, Softmax -----------------------------------
save("legacy9",
     model([h.make_node("Slice", ["x"], ["s"], name="slice_attrs", starts=[1], ends=[3], axes=[2]),
            h.make_node("Pad", ["x"], ["p"], name="pad_attrs", pads=[0, 0, 1, 0, 0, 1], value=2.5),
            h.make_node("Upsample", ["x4", "up_scales"], ["u"], name="upsample_input", mode="linear")],
           [vi("x", [1, 2, 4]), vi("x4", [1, 1, 2, 2])], [vi("s", [1, 2, 2]), vi("p", [1, 2, 6]), vi("u", [1, 1, 4, 4])],
           [init("up_scales", np.array([1, 1, 2, 2], np.float32))], opset=9, ir_version=4),
     {"x": randn(1, 2, 4), "x4": randn(1, 1, 2, 2)})

# ---- opset 18: Pad axes input, ReduceMean axes input ---------------------------------------------
save("opset18",
     model([h.make_node("Pad", ["x", "pads", "", "axes"], ["p"], name="pad_axes"),
            h.make_node("ReduceMean", ["x", "r_axes"], ["r"], name="reduce_axes", keepdims=1),
            h.make_node("ReduceMean", ["x"], ["n"], name="reduce_noop", noop_with_empty_axes=1)],
           [vi("x", [2, 3, 4])], [vi("p", [2, 5, 5]), vi("r", [2, 1, 4]), vi("n", [2, 3, 4])],
           [init("pads", np.array([1, 0, 1, 1], np.int64)), init("axes", np.array([1, -1], np.int64)),
            init("r_axes", np.array([1], np.int64))], opset=18),
     {"x": randn(2, 3, 4)})

# ---- names, dynamic dims, initializer listed as input, outputs that are inputs / initializers -----
names = model([h.make_node("Relu", ["x"], ["r"]),                       # no name: "Relu_0"
               h.make_node("Add", ["r", "bias"], ["y"], name=""),       # no name: "Add_1"
               h.make_node("Relu", ["y"], ["z"], name="named_relu")],
              [vi("x", ["batch", 3, None]), vi("bias", [3, 1])],
              [vi("z", ["batch", 3, None]), vi("bias", [3, 1]), vi("x", ["batch", 3, None])],
              [init("bias", np.array([[1], [2], [3]], np.float32))], ir_version=3)
save("names", names, check=False)
