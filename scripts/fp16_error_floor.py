#!/usr/bin/env python3
"""The accuracy floor of float16 matrix products for an ONNX model, computed with ONNX Runtime.

An fp16 engine runs its MatMul/Gemm layers on float16 inputs (tensor cores). This script shows how
far from an fp32 reference that alone puts the outputs, with everything else in float32: it
inserts Cast(float16) -> Cast(float32) in front of the chosen inputs of every MatMul/Gemm node,
runs ONNX Runtime on the model's test inputs and prints, per variant, the error statistics of each
output against the reference, per element relative to max(|ref|, 1e-3) as kiln's model tests
measure it. When even "weights" (only the weights rounded) exceeds a tolerance, no engine that
stores those weights in float16 can meet it; `kiln debug precision` then finds the layers to keep
in float32.

    python3 scripts/fp16_error_floor.py ../shared/models/bert_tiny --tol 2e-2
"""
import argparse
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

VARIANTS = {
    "weights": (1,),          # only the second operand (the weights of a projection)
    "activations": (0,),      # only the first operand
    "all": (0, 1),            # both operands, as a float16 GEMM reads them
}


def load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def rounded_model(model, operands):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    nodes = []
    for n in m.graph.node:
        if n.op_type in ("MatMul", "Gemm"):
            for k in operands:
                src = n.input[k]
                half, back = f"{src}__fp16_{len(nodes)}", f"{src}__fp32_{len(nodes)}"
                nodes.append(helper.make_node("Cast", [src], [half], to=TensorProto.FLOAT16))
                nodes.append(helper.make_node("Cast", [half], [back], to=TensorProto.FLOAT))
                n.input[k] = back
        nodes.append(n)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return m


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model_dir", help="folder with model.onnx and test_data_set_0/")
    p.add_argument("--tol", type=float, default=2e-2, help="per-element relative tolerance to count against")
    a = p.parse_args()
    model = onnx.load(os.path.join(a.model_dir, "model.onnx"))
    data = os.path.join(a.model_dir, "test_data_set_0")
    names = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    feeds = {n: load_pb(os.path.join(data, f"input_{i}.pb")) for i, n in enumerate(names)}
    refs = [load_pb(os.path.join(data, f"output_{i}.pb")) for i in range(len(model.graph.output))]
    print(f"{a.model_dir}: MatMul/Gemm operands rounded to float16, everything else float32 (ONNX Runtime "
          f"{ort.__version__}); relative error per element = |a-b| / max(|ref|, 1e-3)")
    for variant, operands in VARIANTS.items():
        sess = ort.InferenceSession(rounded_model(model, operands).SerializeToString(),
                                    providers=["CPUExecutionProvider"])
        outs = sess.run(None, feeds)
        for i, (out, ref) in enumerate(zip(outs, refs)):
            err = np.abs(out.astype(np.float64) - ref)
            rel = err / np.maximum(np.abs(ref), 1e-3)
            print(f"  {variant:12s} output {i}: max abs err {err.max():.3e}, max rel err {rel.max():.3e}, "
                  f"{int((rel > a.tol).sum())} of {rel.size} above {a.tol:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
