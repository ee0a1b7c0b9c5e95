#!/usr/bin/env python3
"""Generates the reference data of tests/ops_conv_test.cpp with ONNX Runtime.

Each case is one ONNX node (Conv, ConvTranspose, MaxPool, AveragePool, Global*Pool; the
residual case is Conv -> Add -> Relu) run by ONNX Runtime's CPU provider on small random
inputs. Writes <case>_in<i>.npy / <case>_out.npy and cases.json, which lists for every case the
kiln layer type, the kiln attributes and the files. Rerun from the repository root:
    python3 tests/data/conv/generate.py
"""
import json
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(20240607)
cases = []


def run_onnx(nodes, inputs, out_name="y"):
    """Runs a graph of `nodes` whose inputs are the arrays in `inputs` (dict name -> array)."""
    g_inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in inputs.items()]
    g_out = helper.make_tensor_value_info(out_name, TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", g_inputs, [g_out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)[0]


def add_case(name, kiln_type, kiln_attrs, arrays, out):
    files = []
    for i, a in enumerate(arrays):
        f = f"{name}_in{i}.npy"
        np.save(os.path.join(HERE, f), np.ascontiguousarray(a, dtype=np.float32))
        files.append(f)
    np.save(os.path.join(HERE, f"{name}_out.npy"), np.ascontiguousarray(out, dtype=np.float32))
    cases.append({"name": name, "type": kiln_type, "attrs": kiln_attrs, "inputs": files,
                  "output": f"{name}_out.npy", "rtol": 1e-5, "atol": 1e-5})


def rand(*shape):
    return rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)


def conv_case(name, x_shape, w_shape, bias=True, **attrs):
    x, w = rand(*x_shape), rand(*w_shape)
    arrays = {"x": x, "w": w}
    if bias:
        arrays["b"] = rand(w_shape[0])
    node = helper.make_node("Conv", list(arrays.keys()), ["y"], **attrs)
    y = run_onnx([node], arrays)
    add_case(name, "Convolution", attrs, list(arrays.values()), y)


def deconv_case(name, x_shape, w_shape, bias=True, **attrs):
    x, w = rand(*x_shape), rand(*w_shape)
    arrays = {"x": x, "w": w}
    if bias:
        arrays["b"] = rand(w_shape[1] * attrs.get("group", 1))
    node = helper.make_node("ConvTranspose", list(arrays.keys()), ["y"], **attrs)
    y = run_onnx([node], arrays)
    add_case(name, "Deconvolution", attrs, list(arrays.values()), y)


def pool_case(name, onnx_op, x_shape, **attrs):
    x = rand(*x_shape)
    node = helper.make_node(onnx_op, ["x"], ["y"], **attrs)
    y = run_onnx([node], {"x": x})
    kiln_attrs = {k: v for k, v in attrs.items() if k != "kernel_shape"}
    if "kernel_shape" in attrs:
        kiln_attrs["kernel"] = attrs["kernel_shape"]
    kiln_attrs["mode"] = "max" if "Max" in onnx_op else "average"
    if onnx_op.startswith("Global"):
        kiln_attrs["global"] = 1
    add_case(name, "Pooling", kiln_attrs, [x], y)


# ---- Convolution ----------------------------------------------------------------------------
conv_case("conv2d_group_stride_dil_pads_batch2", (2, 4, 9, 8), (6, 2, 3, 3), group=2, strides=[2, 1],
          dilations=[2, 1], pads=[1, 0, 2, 1])
conv_case("conv2d_depthwise", (1, 5, 7, 7), (5, 1, 3, 3), group=5, pads=[1, 1, 1, 1])
conv_case("conv2d_depthwise_multiplier", (2, 3, 6, 5), (6, 1, 3, 2), group=3, strides=[2, 2],
          pads=[0, 1, 1, 0], bias=False)
conv_case("conv2d_plain_nobias", (1, 3, 5, 5), (4, 3, 3, 3), bias=False)
conv_case("conv1d_stride_dil_pads", (2, 3, 13), (4, 3, 3), strides=[2], dilations=[2], pads=[2, 1])
conv_case("conv3d_group_pads", (2, 4, 5, 4, 6), (4, 2, 2, 3, 3), group=2, strides=[1, 2, 1],
          pads=[1, 0, 1, 0, 1, 2], dilations=[1, 1, 2])

# Residual + relu: Conv -> Add(residual) -> Relu, fused into one kiln Convolution.
x, w, b = rand(2, 3, 6, 6), rand(4, 3, 3, 3), rand(4)
r = rand(2, 4, 6, 6)
y = run_onnx([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
              helper.make_node("Add", ["c", "r"], ["s"]),
              helper.make_node("Relu", ["s"], ["y"])], {"x": x, "w": w, "b": b, "r": r})
add_case("conv2d_residual_relu", "Convolution", {"pads": [1, 1, 1, 1], "activation": "relu"}, [x, w, b, r], y)

# Leaky relu post-op on a conv without residual.
x, w, b = rand(1, 2, 5, 5), rand(3, 2, 3, 3), rand(3)
y = run_onnx([helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[2, 2]),
              helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.1)], {"x": x, "w": w, "b": b})
add_case("conv2d_leaky_relu", "Convolution", {"strides": [2, 2], "activation": "leaky_relu",
                                              "activation_alpha": 0.1}, [x, w, b], y)

# ---- Deconvolution --------------------------------------------------------------------------
deconv_case("deconv2d_stride2_outpad_pads_batch2", (2, 3, 4, 5), (3, 2, 3, 3), strides=[2, 2],
            output_padding=[1, 0], pads=[1, 0, 0, 1])
deconv_case("deconv2d_group_dil", (1, 4, 4, 4), (4, 3, 3, 2), group=2, dilations=[2, 1], strides=[1, 2],
            pads=[1, 1, 2, 0])
deconv_case("deconv1d", (2, 2, 6), (2, 3, 4), strides=[3], pads=[1, 2], output_padding=[2], bias=False)
deconv_case("deconv3d", (1, 2, 3, 3, 2), (2, 2, 2, 3, 2), strides=[2, 1, 2], pads=[0, 1, 0, 0, 1, 1])

# ---- Pooling --------------------------------------------------------------------------------
pool_case("maxpool2d_ceil", "MaxPool", (2, 3, 8, 7), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 0, 1],
          ceil_mode=1)
pool_case("maxpool2d_ceil_drop", "MaxPool", (1, 2, 5, 5), kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1],
          ceil_mode=1)
pool_case("maxpool2d_dil", "MaxPool", (1, 2, 9, 9), kernel_shape=[3, 2], strides=[1, 2], dilations=[2, 2],
          pads=[1, 1, 1, 0])
pool_case("maxpool1d", "MaxPool", (2, 3, 11), kernel_shape=[3], strides=[2], pads=[1, 1])
pool_case("maxpool3d", "MaxPool", (1, 2, 5, 4, 6), kernel_shape=[2, 2, 3], strides=[2, 1, 2], pads=[0, 1, 1, 1, 0, 1])
pool_case("avgpool2d_exclude_pad", "AveragePool", (2, 3, 7, 6), kernel_shape=[3, 3], strides=[2, 2],
          pads=[1, 1, 1, 0], count_include_pad=0)
pool_case("avgpool2d_include_pad", "AveragePool", (2, 3, 7, 6), kernel_shape=[3, 3], strides=[2, 2],
          pads=[1, 1, 1, 0], count_include_pad=1)
pool_case("avgpool2d_include_pad_ceil", "AveragePool", (1, 2, 6, 7), kernel_shape=[3, 3], strides=[2, 2],
          pads=[1, 0, 0, 1], count_include_pad=1, ceil_mode=1)
pool_case("avgpool2d_exclude_pad_ceil", "AveragePool", (1, 2, 6, 7), kernel_shape=[3, 3], strides=[2, 2],
          pads=[1, 0, 0, 1], count_include_pad=0, ceil_mode=1)
pool_case("avgpool1d", "AveragePool", (2, 2, 10), kernel_shape=[4], strides=[3], pads=[2, 1])
pool_case("avgpool3d_include_pad", "AveragePool", (1, 2, 4, 5, 3), kernel_shape=[2, 3, 2], strides=[2, 2, 1],
          pads=[1, 1, 0, 0, 1, 1], count_include_pad=1)
pool_case("globalavgpool", "GlobalAveragePool", (2, 3, 5, 6))
pool_case("globalmaxpool", "GlobalMaxPool", (2, 3, 5, 6))
pool_case("globalavgpool3d", "GlobalAveragePool", (1, 2, 3, 4, 2))

# Cases written by hand (tests/op_table.h: "source": "hand") stay in the file.
if os.path.exists(os.path.join(HERE, "cases.json")):
    with open(os.path.join(HERE, "cases.json")) as f:
        cases += [c for c in json.load(f) if c.get("source") == "hand"]
with open(os.path.join(HERE, "cases.json"), "w") as f:
    # One case per line (tests/op_table.h describes the entries).
    f.write("[\n" + ",\n".join(json.dumps(c) for c in cases) + "\n]\n")
print(f"{len(cases)} cases")
