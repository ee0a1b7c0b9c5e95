#!/usr/bin/env python3
"""Writes kiln's demo model: a small CNN whose activations are custom ops no other engine knows.

    python3 scripts/make_demo_model.py OUT_DIR

OUT_DIR/model.onnx            Conv -> custom::TemperatureSwish(temperature=0.5) -> Conv ->
                              custom::ThresholdReLU(threshold=-0.1) -> MaxPool -> Conv -> custom::Mish
                              -> GlobalAveragePool -> Flatten -> Gemm; input "image" [N,3,64,64]
                              with a dynamic batch N.
OUT_DIR/model_standard.onnx   the same network with each custom op written in standard ONNX ops,
                              so ONNX Runtime can compute the reference.
OUT_DIR/test_data_set_0/      input_0.pb (batch 2) and output_0.pb (ONNX Runtime on the standard
                              model), in the ONNX backend-test layout.
Only the `onnx` package, numpy and onnxruntime are needed (no PyTorch). Deterministic (seed 0).
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def conv_weights(rng, m, c, k):
    w = (rng.standard_normal((m, c, k, k)) * np.sqrt(2.0 / (c * k * k))).astype(np.float32)
    b = (rng.standard_normal(m) * 0.1).astype(np.float32)
    return w, b


def build(custom: bool):
    rng = np.random.default_rng(0)
    nodes, inits = [], []

    def init(name, array):
        inits.append(numpy_helper.from_array(array, name))
        return name

    def conv(x, name, m, c, k, stride=1):
        w, b = conv_weights(rng, m, c, k)
        nodes.append(helper.make_node("Conv", [x, init(name + ".w", w), init(name + ".b", b)], [name],
                                      name=name, kernel_shape=[k, k], pads=[k // 2] * 4, strides=[stride, stride]))
        return name

    def tswish(x, name, t):
        if custom:
            nodes.append(helper.make_node("TemperatureSwish", [x], [name], name=name, domain="custom", temperature=t))
        else:
            tx = init(name + ".t", np.array(t, dtype=np.float32))
            nodes.extend([helper.make_node("Mul", [x, tx], [name + "_tx"]),
                      helper.make_node("Sigmoid", [name + "_tx"], [name + "_s"]),
                      helper.make_node("Mul", [x, name + "_s"], [name])])
        return name

    def threshold_relu(x, name, th):
        if custom:
            nodes.append(helper.make_node("ThresholdReLU", [x], [name], name=name, domain="custom", threshold=th))
        else:
            nodes.append(helper.make_node("Max", [x, init(name + ".th", np.array(th, dtype=np.float32))], [name]))
        return name

    def mish(x, name):
        if custom:
            nodes.append(helper.make_node("Mish", [x], [name], name=name, domain="custom"))
        else:
            nodes.extend([helper.make_node("Softplus", [x], [name + "_sp"]),
                      helper.make_node("Tanh", [name + "_sp"], [name + "_t"]),
                      helper.make_node("Mul", [x, name + "_t"], [name])])
        return name

    x = conv("image", "conv1", 16, 3, 3, stride=2)
    x = tswish(x, "act1", 0.5)
    x = conv(x, "conv2", 32, 16, 3)
    x = threshold_relu(x, "act2", -0.1)
    nodes.append(helper.make_node("MaxPool", [x], ["pool"], name="pool", kernel_shape=[2, 2], strides=[2, 2]))
    x = conv("pool", "conv3", 32, 32, 3)
    x = mish(x, "act3")
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1))
    fw = (rng.standard_normal((10, 32)) * 0.2).astype(np.float32)
    fb = (rng.standard_normal(10) * 0.1).astype(np.float32)
    nodes.append(helper.make_node("Gemm", ["flat", init("fc.w", fw), init("fc.b", fb)], ["scores"], name="fc", transB=1))
    graph = helper.make_graph(nodes, "kiln_demo", [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, 64, 64])],
                              [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 10])], inits)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("custom", 1)] if custom else [])
    model = helper.make_model(graph, opset_imports=opsets, producer_name="kiln make_demo_model.py")
    model.ir_version = 8
    return model


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    out = sys.argv[1]
    os.makedirs(os.path.join(out, "test_data_set_0"), exist_ok=True)
    custom, standard = build(True), build(False)
    onnx.checker.check_model(standard)
    onnx.save(custom, os.path.join(out, "model.onnx"))
    onnx.save(standard, os.path.join(out, "model_standard.onnx"))
    import onnxruntime as ort
    x = np.random.default_rng(1).standard_normal((2, 3, 64, 64)).astype(np.float32)
    sess = ort.InferenceSession(os.path.join(out, "model_standard.onnx"), providers=["CPUExecutionProvider"])
    y = sess.run(None, {"image": x})[0]
    for name, arr, tensor_name in (("input_0.pb", x, "image"), ("output_0.pb", y, "scores")):
        with open(os.path.join(out, "test_data_set_0", name), "wb") as f:
            f.write(numpy_helper.from_array(arr, tensor_name).SerializeToString())
    print(f"wrote {out}/model.onnx (custom ops: TemperatureSwish, ThresholdReLU, Mish), "
          f"model_standard.onnx and test_data_set_0 (reference from ONNX Runtime on the standard model)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
