#!/usr/bin/env python3
"""Writes a ResNet-50 v1.5 ONNX model with random weights, for benchmarks and model tests.

The graph is the torchvision ResNet-50 v1.5 layout (stride 2 in the 3x3 convolution of each
downsampling bottleneck), exported the way an unfused PyTorch model looks: every convolution is
followed by its own BatchNormalization (no bias), then Relu; bottlenecks with a projection
shortcut (1x1 conv + BN) where the shape changes; MaxPool after the stem; GlobalAveragePool,
Flatten and Gemm at the end. Opset 17, input "input" [N,3,224,224] with a dynamic N, output
"logits" [N,1000]. Only `onnx` and `numpy` build the model; `onnxruntime` computes the reference.

Weights come from a fixed seed: He-normal convolutions, BatchNorm statistics drawn around the
identity, and the last BN of every residual branch scaled down (as with zero-init-residual
training) so activations stay O(1) through the 16 blocks instead of growing with depth.

Writes OUT_DIR/model.onnx and OUT_DIR/test_data_set_0/{input_0.pb,output_0.pb} (batch 1).

Usage: python3 scripts/make_resnet50.py OUT_DIR [--seed S] [--batch N]
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class GraphBuilder:
    """Accumulates nodes and initializers with unique, readable names."""

    def __init__(self, rng):
        self.rng = rng
        self.nodes = []
        self.initializers = []

    def const(self, name, array):
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def conv_bn(self, x, prefix, c_in, c_out, kernel, stride, relu, branch_end=False):
        """Conv (He-normal, no bias) + BatchNormalization (+ Relu)."""
        fan_in = c_in * kernel * kernel
        w = self.rng.normal(0.0, np.sqrt(2.0 / fan_in), size=(c_out, c_in, kernel, kernel)).astype(np.float32)
        pad = kernel // 2
        conv_out = f"{prefix}/conv_out"
        self.nodes.append(
            helper.make_node(
                "Conv", [x, self.const(f"{prefix}.conv.weight", w)], [conv_out], name=f"{prefix}/Conv",
                kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[pad] * 4, dilations=[1, 1], group=1))
        # Statistics near the identity transform; the end of a residual branch is damped so the
        # sum x + F(x) does not grow block after block.
        gamma_scale = 0.25 if branch_end else 1.0
        gamma = (gamma_scale * self.rng.uniform(0.8, 1.2, size=c_out)).astype(np.float32)
        beta = self.rng.normal(0.0, 0.05, size=c_out).astype(np.float32)
        mean = self.rng.normal(0.0, 0.05, size=c_out).astype(np.float32)
        var = self.rng.uniform(0.8, 1.2, size=c_out).astype(np.float32)
        bn_out = f"{prefix}/bn_out"
        self.nodes.append(
            helper.make_node(
                "BatchNormalization",
                [conv_out, self.const(f"{prefix}.bn.weight", gamma), self.const(f"{prefix}.bn.bias", beta),
                 self.const(f"{prefix}.bn.running_mean", mean), self.const(f"{prefix}.bn.running_var", var)],
                [bn_out], name=f"{prefix}/BatchNormalization", epsilon=1e-5, momentum=0.9))
        if not relu:
            return bn_out
        relu_out = f"{prefix}/relu_out"
        self.nodes.append(helper.make_node("Relu", [bn_out], [relu_out], name=f"{prefix}/Relu"))
        return relu_out

    def bottleneck(self, x, prefix, c_in, width, stride):
        c_out = width * 4
        y = self.conv_bn(x, f"{prefix}.conv1", c_in, width, 1, 1, relu=True)
        y = self.conv_bn(y, f"{prefix}.conv2", width, width, 3, stride, relu=True)  # v1.5: stride here
        y = self.conv_bn(y, f"{prefix}.conv3", width, c_out, 1, 1, relu=False, branch_end=True)
        shortcut = x
        if stride != 1 or c_in != c_out:
            shortcut = self.conv_bn(x, f"{prefix}.downsample", c_in, c_out, 1, stride, relu=False)
        total = f"{prefix}/add_out"
        self.nodes.append(helper.make_node("Add", [y, shortcut], [total], name=f"{prefix}/Add"))
        out = f"{prefix}/out"
        self.nodes.append(helper.make_node("Relu", [total], [out], name=f"{prefix}/Relu"))
        return out


def make_model(seed):
    rng = np.random.default_rng(seed)
    g = GraphBuilder(rng)
    x = g.conv_bn("input", "stem", 3, 64, 7, 2, relu=True)
    g.nodes.append(helper.make_node("MaxPool", [x], ["stem/pool_out"], name="stem/MaxPool",
                                    kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x = "stem/pool_out"
    c_in = 64
    for stage, (blocks, width, stride) in enumerate([(3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)], start=1):
        for b in range(blocks):
            x = g.bottleneck(x, f"layer{stage}.{b}", c_in, width, stride if b == 0 else 1)
            c_in = width * 4
    g.nodes.append(helper.make_node("GlobalAveragePool", [x], ["head/gap_out"], name="head/GlobalAveragePool"))
    g.nodes.append(helper.make_node("Flatten", ["head/gap_out"], ["head/flat_out"], name="head/Flatten", axis=1))
    fc_w = rng.normal(0.0, np.sqrt(1.0 / c_in), size=(1000, c_in)).astype(np.float32)
    fc_b = rng.normal(0.0, 0.01, size=1000).astype(np.float32)
    g.nodes.append(helper.make_node(
        "Gemm", ["head/flat_out", g.const("fc.weight", fc_w), g.const("fc.bias", fc_b)], ["logits"],
        name="head/Gemm", alpha=1.0, beta=1.0, transB=1))

    graph = helper.make_graph(
        g.nodes, "resnet50_v1_5",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 1000])],
        initializer=g.initializers)
    model = helper.make_model(graph, producer_name="kiln scripts/make_resnet50.py",
                              opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="folder to write model.onnx and test_data_set_0/ into")
    parser.add_argument("--seed", type=int, default=50, help="random seed of the weights and the input (default 50)")
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
        sys.exit("make_resnet50.py: onnxruntime is needed for the reference output (pip install onnxruntime)")
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
    print(f"wrote {model_path}: {len(model.graph.node)} nodes, {n_params / 1e6:.1f}M parameters; "
          f"logits mean {y.mean():.3f}, std {y.std():.3f}, max |.| {np.abs(y).max():.3f}")


if __name__ == "__main__":
    main()
