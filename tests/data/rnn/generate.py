#!/usr/bin/env python3
"""Generates the reference data of tests/ops_rnn_test.cpp: RNN, GRU and LSTM models (forward,
reverse, bidirectional; default and explicit activations with alpha/beta; clip; sequence_lens;
initial states; peepholes; input_forget; linear_before_reset; layout 1; partial outputs) run by
ONNX Runtime. Run from anywhere:
    python3 tests/data/rnn/generate.py
"""
import os
import sys

import numpy as np
from onnx import helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from ort_cases import CaseWriter  # noqa: E402

rng = np.random.default_rng(20260519)
w = CaseWriter(HERE)
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def randn(*shape, scale=0.4):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def case(name, op, seq, batch, inp, hidden, direction="forward", layout=0, bias=True, lens=None, init_h=False,
         init_c=False, peep=False, outputs=("Y", "Y_h", "Y_c"), opset=14, **attrs):
    """layout 1 (batch first) is stored as such but run by ONNX Runtime, which lacks it, as the
    layout-0 model on transposed inputs, its outputs transposed back."""
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    x = randn(seq, batch, inp, scale=1.0)
    values = [x, randn(dirs, g * hidden, inp), randn(dirs, g * hidden, hidden),
              randn(dirs, 2 * g * hidden) if bias else None,
              np.array(lens, dtype=np.int32) if lens is not None else None,
              randn(dirs, batch, hidden, scale=1.0) if init_h else None,
              randn(dirs, batch, hidden, scale=1.0) if init_c else None,
              randn(dirs, 3 * hidden) if peep else None]
    while values[-1] is None:
        values.pop()
    names = [f"i{k}" if v is not None else "" for k, v in enumerate(values)]
    all_outputs = ["Y", "Y_h", "Y_c"] if op == "LSTM" else ["Y", "Y_h"]
    out_names, kinds, n = [], [], 0
    for o in all_outputs:
        if o in outputs:
            out_names.append(f"o{n}")
            kinds.append(o)
            n += 1
        else:
            out_names.append("")
    while out_names and out_names[-1] == "":
        out_names.pop()

    def make(lay):
        extra = {"layout": lay} if lay else {}
        return [helper.make_node(op, names, out_names, hidden_size=hidden, direction=direction, **attrs, **extra)]

    saved = None
    if layout == 1:
        state = lambda a: None if a is None else np.ascontiguousarray(a.transpose(1, 0, 2))  # noqa: E731
        batch_first = list(values)
        batch_first[0] = state(x)
        for k in (5, 6):
            if k < len(batch_first):
                batch_first[k] = state(batch_first[k])

        def outs_fn(outs):
            return [np.ascontiguousarray(o.transpose(2, 0, 1, 3)) if kind == "Y" else state(o)
                    for o, kind in zip(outs, kinds)]
        saved = (make(1), batch_first, outs_fn)
    w.add(name, make(0), values, n_outputs=n, opset=opset, rtol=1e-4, atol=1e-5, saved=saved)


case("rnn_forward", "RNN", 5, 3, 4, 6)
case("rnn_reverse_lens", "RNN", 5, 3, 4, 6, direction="reverse", lens=[5, 2, 3], init_h=True)
case("rnn_bidirectional_relu_leaky", "RNN", 4, 2, 3, 5, direction="bidirectional", init_h=True,
     activations=["Relu", "LeakyRelu"], activation_alpha=[0.2])
case("rnn_layout1_no_bias", "RNN", 4, 3, 2, 3, layout=1, bias=False, init_h=True)
case("gru_forward", "GRU", 5, 3, 4, 6)
case("gru_linear_before_reset", "GRU", 5, 2, 3, 4, linear_before_reset=1, init_h=True)
case("gru_bidirectional_lens", "GRU", 6, 3, 4, 5, direction="bidirectional", lens=[6, 1, 4], init_h=True)
case("gru_reverse_clip", "GRU", 4, 2, 3, 4, direction="reverse", clip=0.5)
case("gru_layout1", "GRU", 3, 4, 2, 3, layout=1, init_h=True, linear_before_reset=1)
case("gru_activations", "GRU", 4, 2, 3, 4, activations=["HardSigmoid", "Softsign"], activation_alpha=[0.3],
     activation_beta=[0.4])
case("gru_only_y_h", "GRU", 4, 2, 3, 4, outputs=("Y_h",))
case("lstm_forward", "LSTM", 5, 3, 4, 6)
case("lstm_peepholes_lens", "LSTM", 5, 3, 4, 3, lens=[5, 3, 1], init_h=True, init_c=True, peep=True)
case("lstm_bidirectional", "LSTM", 4, 2, 3, 5, direction="bidirectional", init_h=True, init_c=True, peep=True,
     lens=[4, 2])
case("lstm_reverse_clip", "LSTM", 4, 2, 3, 4, direction="reverse", clip=0.7)
case("lstm_layout1", "LSTM", 3, 2, 3, 4, layout=1, init_h=True, init_c=True)
case("lstm_input_forget", "LSTM", 4, 2, 3, 4, input_forget=1)
case("lstm_activations", "LSTM", 4, 2, 3, 4, activations=["HardSigmoid", "Elu", "Softplus"],
     activation_alpha=[0.25, 0.9], activation_beta=[0.45])
case("lstm_only_y_c", "LSTM", 4, 2, 3, 4, outputs=("Y_c",))
case("lstm_opset7", "LSTM", 3, 2, 3, 4, opset=7, init_h=True)

w.write()
