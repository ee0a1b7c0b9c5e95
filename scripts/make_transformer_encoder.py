#!/usr/bin/env python3
"""Writes a small transformer encoder ONNX model with random weights, for kiln's model tests.

The graph is a BERT-style encoder written out op by op, the way exporters emit it: token and
position embeddings (Gather; the positions come from Shape -> Gather -> Range on the sequence
length), LayerNormalization, then LAYERS encoder layers of multi-head self-attention (Q/K/V MatMul +
bias, Reshape to [N, S, heads, head_dim] with 0-copy dims, Transpose, scaled QK^T, an additive
attention mask, Softmax, context, output projection) and a GELU feed-forward block, each with a
residual connection and a post-LayerNormalization; a pooled output (first token, dense, Tanh) at
the end. Inputs `input_ids` and `attention_mask` are [N, S] int64 with a dynamic batch N and
sequence S (S <= --max-positions); outputs `last_hidden_state` [N, S, hidden] and `pooled`
[N, hidden].

Two spellings of the mask and of GELU, so one script covers both exporter styles:
  --mask large_negative   (1 - Cast(mask)) * -1e9 (opset 17 style arithmetic)
  --mask neg_inf          Where(Equal(mask, 0), -inf, 0) (every row needs one unmasked token)
  --gelu erf              0.5 * x * (1 + Erf(x / sqrt(2)))   (opset 17)
  --gelu op               the opset-20 Gelu operator (the model is then opset 20)

Only `onnx` and `numpy` build the model; `onnxruntime` (optional) writes the reference of
OUT_DIR/test_data_set_0 (inputs input_0.pb, input_1.pb and outputs output_<i>.pb).

Usage: python3 scripts/make_transformer_encoder.py OUT_DIR [--seed S] [--layers 2] [--hidden 64]
           [--heads 4] [--mask large_negative|neg_inf] [--gelu erf|op] [--no-test-data]
"""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Graph:
    """Accumulates nodes and initializers with unique, readable names."""

    def __init__(self, rng):
        self.rng = rng
        self.nodes = []
        self.initializers = []
        self.count = 0

    def const(self, name, array):
        self.initializers.append(numpy_helper.from_array(np.array(array, order="C"), name))
        return name

    def weight(self, name, shape, std):
        return self.const(name, self.rng.normal(0.0, std, size=shape).astype(np.float32))

    def op(self, op_type, inputs, prefix, outputs=1, **attrs):
        self.count += 1
        names = [f"{prefix}/{op_type}_{self.count}" + (f"_{i}" if outputs > 1 else "") for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, name=f"{prefix}/{op_type}_{self.count}", **attrs))
        return names[0] if outputs == 1 else names

    def scalar(self, name, value, dtype=np.float32):
        return self.const(name, np.array(value, dtype=dtype))

    def layer_norm(self, x, prefix, hidden):
        gamma = self.const(f"{prefix}.weight", self.rng.uniform(0.8, 1.2, hidden).astype(np.float32))
        beta = self.const(f"{prefix}.bias", self.rng.normal(0.0, 0.05, hidden).astype(np.float32))
        return self.op("LayerNormalization", [x, gamma, beta], prefix, axis=-1, epsilon=1e-12)

    def dense(self, x, prefix, n_in, n_out):
        w = self.weight(f"{prefix}.weight", (n_in, n_out), 1.0 / np.sqrt(n_in))
        b = self.weight(f"{prefix}.bias", (n_out,), 0.02)
        return self.op("Add", [self.op("MatMul", [x, w], prefix), b], prefix)

    def gelu(self, x, prefix, style):
        if style == "op":
            return self.op("Gelu", [x], prefix, approximate="none")
        inner = self.op("Erf", [self.op("Div", [x, self.scalar(f"{prefix}.sqrt2", np.sqrt(2.0))], prefix)], prefix)
        one_plus = self.op("Add", [inner, self.scalar(f"{prefix}.one", 1.0)], prefix)
        return self.op("Mul", [self.op("Mul", [x, one_plus], prefix), self.scalar(f"{prefix}.half", 0.5)], prefix)


def attention_bias(g, mask, style):
    """[N, S] int64 0/1 mask -> [N, 1, 1, S] float additive bias."""
    p = "mask"
    if style == "neg_inf":
        is_pad = g.op("Equal", [mask, g.scalar("mask.zero", 0, np.int64)], p)
        bias = g.op("Where", [is_pad, g.scalar("mask.neg_inf", -np.inf), g.scalar("mask.zero_f", 0.0)], p)
    else:
        m = g.op("Cast", [mask], p, to=TensorProto.FLOAT)
        inv = g.op("Sub", [g.scalar("mask.one", 1.0), m], p)
        bias = g.op("Mul", [inv, g.scalar("mask.neg_large", -1e9)], p)
    return g.op("Unsqueeze", [bias, g.const("mask.axes", np.array([1, 2], np.int64))], p)


def self_attention(g, x, bias, prefix, hidden, heads):
    head_dim = hidden // heads
    split = g.const(f"{prefix}.split_shape", np.array([0, 0, heads, head_dim], np.int64))

    def project(name, perm):
        y = g.dense(x, f"{prefix}.{name}", hidden, hidden)
        return g.op("Transpose", [g.op("Reshape", [y, split], prefix)], prefix, perm=perm)

    q = project("query", [0, 2, 1, 3])  # [N, H, S, D]
    k = project("key", [0, 2, 3, 1])  # [N, H, D, S]
    v = project("value", [0, 2, 1, 3])
    scores = g.op("Div", [g.op("MatMul", [q, k], prefix), g.scalar(f"{prefix}.scale", np.sqrt(head_dim))], prefix)
    probs = g.op("Softmax", [g.op("Add", [scores, bias], prefix)], prefix, axis=-1)
    ctx = g.op("Transpose", [g.op("MatMul", [probs, v], prefix)], prefix, perm=[0, 2, 1, 3])
    merged = g.op("Reshape", [ctx, g.const(f"{prefix}.merge_shape", np.array([0, 0, hidden], np.int64))], prefix)
    return g.dense(merged, f"{prefix}.output", hidden, hidden)


def build(seed=0, layers=2, hidden=64, heads=4, ffn=128, vocab=1000, max_positions=128, mask="large_negative",
          gelu="erf"):
    """Returns the onnx.ModelProto."""
    if hidden % heads:
        raise ValueError(f"--hidden {hidden} is not a multiple of --heads {heads}")
    g = Graph(np.random.default_rng(seed))
    ids, mask_in = "input_ids", "attention_mask"
    # Embeddings: tokens plus positions 0..S-1.
    tok = g.op("Gather", [g.weight("embeddings.word", (vocab, hidden), 1.0), ids], "embeddings", axis=0)
    seq_len = g.op("Gather", [g.op("Shape", [ids], "embeddings"), g.scalar("embeddings.one_i", 1, np.int64)],
                   "embeddings", axis=0)
    positions = g.op("Range", [g.scalar("embeddings.zero_i", 0, np.int64), seq_len,
                               g.scalar("embeddings.step", 1, np.int64)], "embeddings")
    pos = g.op("Gather", [g.weight("embeddings.position", (max_positions, hidden), 0.5), positions], "embeddings",
               axis=0)
    x = g.layer_norm(g.op("Add", [tok, pos], "embeddings"), "embeddings.norm", hidden)
    bias = attention_bias(g, mask_in, mask)
    for i in range(layers):
        p = f"layer{i}"
        attn = self_attention(g, x, bias, f"{p}.attention", hidden, heads)
        x = g.layer_norm(g.op("Add", [x, attn], p), f"{p}.attention_norm", hidden)
        h = g.gelu(g.dense(x, f"{p}.ffn_in", hidden, ffn), f"{p}.gelu", gelu)
        x = g.layer_norm(g.op("Add", [x, g.dense(h, f"{p}.ffn_out", ffn, hidden)], p), f"{p}.ffn_norm", hidden)
    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="output/Identity"))
    first = g.op("Gather", [x, g.scalar("pooler.index", 0, np.int64)], "pooler", axis=1)
    g.nodes.append(helper.make_node("Tanh", [g.dense(first, "pooler.dense", hidden, hidden)], ["pooled"],
                                    name="pooler/Tanh"))
    opset = 20 if gelu == "op" else 17
    graph = helper.make_graph(
        g.nodes, "transformer_encoder",
        [helper.make_tensor_value_info(ids, TensorProto.INT64, ["N", "S"]),
         helper.make_tensor_value_info(mask_in, TensorProto.INT64, ["N", "S"])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["N", "S", hidden]),
         helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["N", hidden])],
        initializer=g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="kiln-make_transformer_encoder")
    model.ir_version = 8 if opset < 20 else 9
    onnx.checker.check_model(model, full_check=True)
    return model


def random_inputs(rng, batch, seq, vocab=1000):
    """Token ids and a 0/1 mask with at least one unmasked (leading) token per row."""
    ids = rng.integers(0, vocab, size=(batch, seq), dtype=np.int64)
    lengths = rng.integers(1, seq + 1, size=batch)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)
    return ids, mask


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=128)
    ap.add_argument("--mask", choices=["large_negative", "neg_inf"], default="large_negative")
    ap.add_argument("--gelu", choices=["erf", "op"], default="erf")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--no-test-data", action="store_true")
    a = ap.parse_args()
    model = build(a.seed, a.layers, a.hidden, a.heads, a.ffn, mask=a.mask, gelu=a.gelu)
    os.makedirs(a.out_dir, exist_ok=True)
    onnx.save(model, os.path.join(a.out_dir, "model.onnx"))
    print(f"wrote {os.path.join(a.out_dir, 'model.onnx')}: {len(model.graph.node)} nodes, opset "
          f"{model.opset_import[0].version}")
    if a.no_test_data:
        return 0
    try:
        import onnxruntime as ort
    except ImportError:
        print("onnxruntime is not installed: no test data written", file=sys.stderr)
        return 0
    ids, mask = random_inputs(np.random.default_rng(a.seed + 1), a.batch, a.seq)
    outs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": ids, "attention_mask": mask})
    data = os.path.join(a.out_dir, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    for i, (name, arr) in enumerate([("input_ids", ids), ("attention_mask", mask)]):
        onnx.save_tensor(numpy_helper.from_array(arr, name), os.path.join(data, f"input_{i}.pb"))
    for i, (out, arr) in enumerate(zip(model.graph.output, outs)):
        onnx.save_tensor(numpy_helper.from_array(arr, out.name), os.path.join(data, f"output_{i}.pb"))
    print(f"wrote {data} (batch {a.batch}, sequence {a.seq})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
