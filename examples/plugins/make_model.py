#!/usr/bin/env python3
"""Writes a tiny ONNX model that uses the ScaledTanh example plugin, plus test data.

    python3 make_model.py --out-dir DIR [--alpha 1.5] [--beta 0.5] [--batch 2]

DIR/model.onnx: x [N, 3, 8, 8] float32 -> custom::ScaledTanh(alpha, beta) -> y (N is dynamic).
DIR/test_data/input_0.npy: x for batch --batch, uniform in [-3, 3].
DIR/test_data/output_0.npy: y computed with numpy: alpha * tanh(beta * x).

kiln's ONNX importer turns a node of a custom domain into a Plugin layer when a plugin creator
of the node's op_type is registered (here: after `--plugins libkiln_example_plugins.so`); the
node's attributes become the plugin's fields.
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper


def make_model(alpha: float, beta: float) -> onnx.ModelProto:
    node = helper.make_node("ScaledTanh", ["x"], ["y"], name="scaled_tanh", domain="custom", alpha=alpha, beta=beta)
    graph = helper.make_graph(
        [node],
        "scaled_tanh_example",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 8, 8])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)]
    return helper.make_model(graph, opset_imports=opsets, producer_name="kiln examples/plugins/make_model.py")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--alpha", type=float, default=1.5)
    parser.add_argument("--beta", type=float, default=0.5)
    parser.add_argument("--batch", type=int, default=2)
    args = parser.parse_args()

    data_dir = os.path.join(args.out_dir, "test_data")
    os.makedirs(data_dir, exist_ok=True)
    onnx.save(make_model(args.alpha, args.beta), os.path.join(args.out_dir, "model.onnx"))

    rng = np.random.default_rng(0)
    x = rng.uniform(-3.0, 3.0, size=(args.batch, 3, 8, 8)).astype(np.float32)
    y = (np.float32(args.alpha) * np.tanh(np.float32(args.beta) * x)).astype(np.float32)
    np.save(os.path.join(data_dir, "input_0.npy"), x)
    np.save(os.path.join(data_dir, "output_0.npy"), y)
    print(f"wrote {args.out_dir}/model.onnx (y = {args.alpha} * tanh({args.beta} * x)) and {data_dir}/")


if __name__ == "__main__":
    main()
