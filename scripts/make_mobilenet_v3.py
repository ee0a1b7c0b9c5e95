#!/usr/bin/env python3
"""Writes a MobileNetV3-Small ONNX model with random weights, for benchmarks and model tests.

The graph is torchvision's mobilenet_v3_small layer for layer, exported the way
torch.onnx.export (opset 17, eval mode) writes it: BatchNormalization already folded into the
convolutions (every Conv has a bias), HardSwish and HardSigmoid as ONNX ops (HardSigmoid with
alpha=1/6, beta=0.5, as PyTorch's hardsigmoid exports), Dropout gone. Structure:
  * stem: Conv 3x3 stride 2 (3 -> 16) + HardSwish;
  * 11 inverted residual blocks: [Conv 1x1 expand + act] (when the width changes), depthwise
    Conv kxk (group = channels, 3x3 or 5x5, stride 1 or 2) + act, optional squeeze-excitation
    (GlobalAveragePool -> Conv 1x1 -> Relu -> Conv 1x1 -> HardSigmoid -> Mul with the block's
    tensor), Conv 1x1 project (no activation), Add of the input when stride 1 and the width is kept;
    act is Relu in the first three blocks and HardSwish after;
  * head: Conv 1x1 (96 -> 576) + HardSwish, GlobalAveragePool, Flatten, Gemm 576 -> 1024,
    HardSwish, Gemm 1024 -> 1000.
Input "input" [N,3,224,224] with a dynamic N, output "logits" [N,1000]. Only `onnx` and `numpy`
build the model; `onnxruntime` computes the reference output.

Weights come from a fixed seed: He-normal convolutions with small biases, and the projection of
every residual block scaled down so activations stay O(1) through the blocks.

Writes OUT_DIR/model.onnx and OUT_DIR/test_data_set_0/{input_0.pb,output_0.pb} (batch 1).

Usage: python3 scripts/make_mobilenet_v3.py OUT_DIR [--seed S] [--batch N]
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17

# torchvision's mobilenet_v3_small: (in, kernel, expanded, out, squeeze-excitation, activation, stride)
BLOCKS = [
    (16, 3, 16, 16, True, "RE", 2),
    (16, 3, 72, 24, False, "RE", 2),
    (24, 3, 88, 24, False, "RE", 1),
    (24, 5, 96, 40, True, "HS", 2),
    (40, 5, 240, 40, True, "HS", 1),
    (40, 5, 240, 40, True, "HS", 1),
    (40, 5, 120, 48, True, "HS", 1),
    (48, 5, 144, 48, True, "HS", 1),
    (48, 5, 288, 96, True, "HS", 2),
    (96, 5, 576, 96, True, "HS", 1),
    (96, 5, 576, 96, True, "HS", 1),
]


def make_divisible(v, divisor=8):
    """torchvision's _make_divisible: the squeeze width rounded to a multiple of 8."""
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


class GraphBuilder:
    """Accumulates nodes and initializers with unique, readable names."""

    def __init__(self, rng):
        self.rng = rng
        self.nodes = []
        self.initializers = []

    def const(self, name, array):
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(self, op, inputs, name, **attrs):
        out = f"{name}_out"
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def act(self, x, prefix, kind):
        if kind == "RE":
            return self.node("Relu", [x], f"{prefix}/Relu")
        if kind == "HS":
            return self.node("HardSwish", [x], f"{prefix}/HardSwish")
        return x

    def conv(self, x, prefix, c_in, c_out, kernel, stride=1, group=1, act=None, scale=1.0):
        """Conv with bias (BatchNormalization folded in, as the exporter does) + activation."""
        fan_in = (c_in // group) * kernel * kernel
        w = (scale * self.rng.normal(0.0, np.sqrt(2.0 / fan_in), size=(c_out, c_in // group, kernel, kernel)))
        b = self.rng.normal(0.0, 0.05, size=c_out)
        pad = (kernel - 1) // 2
        y = self.node("Conv", [x, self.const(f"{prefix}.weight", w.astype(np.float32)),
                               self.const(f"{prefix}.bias", b.astype(np.float32))], f"{prefix}/Conv",
                      kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[pad] * 4,
                      dilations=[1, 1], group=group)
        return self.act(y, prefix, act)

    def squeeze_excitation(self, x, prefix, channels):
        squeeze = make_divisible(channels // 4, 8)
        s = self.node("GlobalAveragePool", [x], f"{prefix}/GlobalAveragePool")
        s = self.conv(s, f"{prefix}.fc1", channels, squeeze, 1, act="RE")
        s = self.conv(s, f"{prefix}.fc2", squeeze, channels, 1)
        s = self.node("HardSigmoid", [s], f"{prefix}/HardSigmoid", alpha=1.0 / 6.0, beta=0.5)
        return self.node("Mul", [s, x], f"{prefix}/Mul")

    def inverted_residual(self, x, prefix, c_in, kernel, expanded, c_out, se, act, stride):
        y = x
        if expanded != c_in:
            y = self.conv(y, f"{prefix}.expand", c_in, expanded, 1, act=act)
        y = self.conv(y, f"{prefix}.depthwise", expanded, expanded, kernel, stride, group=expanded, act=act)
        if se:
            y = self.squeeze_excitation(y, f"{prefix}.se", expanded)
        residual = stride == 1 and c_in == c_out
        y = self.conv(y, f"{prefix}.project", expanded, c_out, 1, scale=0.5 if residual else 1.0)
        if residual:
            y = self.node("Add", [y, x], f"{prefix}/Add")
        return y


def make_model(seed):
    rng = np.random.default_rng(seed)
    g = GraphBuilder(rng)
    x = g.conv("input", "features.0", 3, 16, 3, 2, act="HS")
    for i, (c_in, kernel, expanded, c_out, se, act, stride) in enumerate(BLOCKS, start=1):
        x = g.inverted_residual(x, f"features.{i}", c_in, kernel, expanded, c_out, se, act, stride)
    x = g.conv(x, "features.12", 96, 576, 1, act="HS")
    x = g.node("GlobalAveragePool", [x], "avgpool/GlobalAveragePool")
    x = g.node("Flatten", [x], "classifier/Flatten", axis=1)
    w1 = rng.normal(0.0, np.sqrt(2.0 / 576), size=(1024, 576)).astype(np.float32)
    b1 = rng.normal(0.0, 0.01, size=1024).astype(np.float32)
    x = g.node("Gemm", [x, g.const("classifier.0.weight", w1), g.const("classifier.0.bias", b1)],
               "classifier.0/Gemm", alpha=1.0, beta=1.0, transB=1)
    x = g.node("HardSwish", [x], "classifier.1/HardSwish")
    w2 = rng.normal(0.0, np.sqrt(1.0 / 1024), size=(1000, 1024)).astype(np.float32)
    b2 = rng.normal(0.0, 0.01, size=1000).astype(np.float32)
    g.nodes.append(helper.make_node(
        "Gemm", [x, g.const("classifier.3.weight", w2), g.const("classifier.3.bias", b2)], ["logits"],
        name="classifier.3/Gemm", alpha=1.0, beta=1.0, transB=1))

    graph = helper.make_graph(
        g.nodes, "mobilenet_v3_small",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 1000])],
        initializer=g.initializers)
    model = helper.make_model(graph, producer_name="kiln scripts/make_mobilenet_v3.py",
                              opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="folder to write model.onnx and test_data_set_0/ into")
    parser.add_argument("--seed", type=int, default=3, help="random seed of the weights and the input (default 3)")
    parser.add_argument("--batch", type=int, default=1, help="batch of the test input (default 1)")
    args = parser.parse_args()

    model = make_model(args.seed)
    os.makedirs(os.path.join(args.out_dir, "test_data_set_0"), exist_ok=True)
    model_path = os.path.join(args.out_dir, "model.onnx")
    onnx.save(model, model_path)

    rng = np.random.default_rng(args.seed + 1)
    x = rng.standard_normal((args.batch, 3, 224, 224)).astype(np.float32)
    try:
        import onnxruntime as ort
    except ImportError:
        sys.exit("make_mobilenet_v3.py: onnxruntime is needed for the reference output (pip install onnxruntime)")
    options = ort.SessionOptions()
    # The reference is the plain fp32 graph, without ORT's own fusions.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
    (y,) = session.run(["logits"], {"input": x})

    data_dir = os.path.join(args.out_dir, "test_data_set_0")
    with open(os.path.join(data_dir, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x, "input").SerializeToString())
    with open(os.path.join(data_dir, "output_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(y, "logits").SerializeToString())
    n_params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    print(f"wrote {model_path}: {len(model.graph.node)} nodes, {n_params / 1e6:.2f}M parameters; "
          f"logits mean {y.mean():.3f}, std {y.std():.3f}, max |.| {np.abs(y).max():.3f}")


if __name__ == "__main__":
    main()
