"""Shared helper of the generators of ONNX-model op cases (tests/data/{scatter,quantize,sampling,rnn}/
generate.py): builds a one-node (or small) ONNX model, runs it with ONNX Runtime (an implementation
independent of kiln), and stores <name>.onnx, <name>_in<i>.npy and <name>_out<i>.npy next to the
generator plus an entry of cases.json (name, tolerances), the family's op table (tests/op_table.h):
its runners import the model, run it on the CPU (and on CUDA, as its one layer when it is one)
and compare every output.
"""
import json
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

NP_TO_ONNX = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64, np.int32: TensorProto.INT32,
              np.float64: TensorProto.DOUBLE, np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8,
              np.bool_: TensorProto.BOOL, np.float16: TensorProto.FLOAT16}


class CaseWriter:
    def __init__(self, here):
        self.here = here
        self.cases = []

    def add(self, name, nodes, inputs, n_outputs=1, opset=21, initializers=None, rtol=1e-4, atol=1e-5, saved=None):
        """nodes read graph inputs i0, i1, ... (None entries skip a name, for omitted inputs that
        nodes spell "") and write outputs o0, o1, ...; initializers: {name: array} constants.
        saved: (nodes, inputs, outputs_fn) of an equivalent model to store instead of the one run
        (for forms ONNX Runtime lacks, e.g. batch-first RNNs run as their transposes)."""
        outs = self._run(name, nodes, inputs, n_outputs, opset, initializers)
        if saved is not None:
            nodes, inputs, fn = saved
            outs = fn(outs)
        model = self._model(name, nodes, inputs, n_outputs, opset, initializers)
        onnx.save(model, os.path.join(self.here, f"{name}.onnx"))
        n_in = 0
        for k, a in enumerate(inputs):
            if a is None:
                continue
            np.save(os.path.join(self.here, f"{name}_in{n_in}.npy"), a)
            n_in += 1
        for k, o in enumerate(outs):
            np.save(os.path.join(self.here, f"{name}_out{k}.npy"), o)
        self.cases.append({"name": name, "inputs": n_in, "outputs": len(outs), "rtol": rtol, "atol": atol})
        return outs

    def _run(self, name, nodes, inputs, n_outputs, opset, initializers):
        model = self._model(name, nodes, inputs, n_outputs, opset, initializers)
        feeds = {f"i{k}": a for k, a in enumerate(inputs) if a is not None}
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)

    def _model(self, name, nodes, inputs, n_outputs, opset, initializers):
        g_inputs = []
        for k, a in enumerate(inputs):
            if a is None:
                continue
            g_inputs.append(helper.make_tensor_value_info(f"i{k}", NP_TO_ONNX[a.dtype.type], list(a.shape)))
        inits = [onnx.numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()]
        g_outputs = [onnx.ValueInfoProto(name=f"o{k}") for k in range(n_outputs)]
        graph = helper.make_graph(nodes, name, g_inputs, g_outputs, initializer=inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        return model

    def write(self):
        path = os.path.join(self.here, "cases.json")
        if os.path.exists(path):  # cases written by hand (tests/op_table.h: "source": "hand") stay
            with open(path) as f:
                self.cases += [c for c in json.load(f) if c.get("source") == "hand"]
        with open(os.path.join(self.here, "cases.json"), "w") as f:
            # One case per line (tests/op_table.h describes the entries).
            f.write("[\n" + ",\n".join(json.dumps(c) for c in self.cases) + "\n]\n")
