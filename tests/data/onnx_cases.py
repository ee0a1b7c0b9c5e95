"""Shared helper of the tests/data/<family>/generate.py scripts whose cases are whole ONNX models.

Each case is a small ONNX model (usually one node) run by ONNX Runtime's CPU provider (or, for
the few cases ONNX Runtime rejects, by the onnx package's reference evaluator or numpy); the
model, its inputs and the outputs are saved as <case>.onnx, <case>_in<i>.npy and
<case>_out<i>.npy, and cases.json (the family's op table, tests/op_table.h) lists every case with
its tolerances. The table's runners import each model with kiln's ONNX parser, build an engine
for the saved input shapes (CPU; CUDA, or the one layer when the model is one), run it and
compare every output.
"""
import json
import os

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

ONNX_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
              np.dtype(np.float16): TensorProto.FLOAT16, np.dtype(np.int32): TensorProto.INT32,
              np.dtype(np.int64): TensorProto.INT64, np.dtype(np.int8): TensorProto.INT8,
              np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.bool_): TensorProto.BOOL}


class CaseWriter:
    def __init__(self, folder, seed):
        self.folder = folder
        self.rng = np.random.default_rng(seed)
        self.cases = []
        for f in os.listdir(folder):  # drop files of cases that no longer exist
            if f.endswith(".onnx") or f.endswith(".npy"):
                os.remove(os.path.join(folder, f))

    def rand(self, shape, low=-2.0, high=2.0, dtype=np.float32):
        return self.rng.uniform(low, high, size=shape).astype(dtype)

    def graph(self, name, nodes, inputs, consts=None, outputs=("y",), opset=18, dynamic=False, rtol=1e-5, atol=1e-6,
              runner="ort"):
        """nodes: NodeProtos; inputs: {name: array} fed at run time; consts: {name: array} initializers.
        dynamic=True declares every input dim symbolic, so the importer cannot rely on static dims.
        runner="onnx" uses the onnx reference evaluator instead of ONNX Runtime; a callable runner
        computes the outputs (a list) from the input arrays itself."""
        consts = consts or {}
        g_in = []
        for n, a in inputs.items():
            dims = [f"{n}_d{i}" for i in range(a.ndim)] if dynamic else list(a.shape)
            g_in.append(helper.make_tensor_value_info(n, ONNX_TYPES[a.dtype], dims))
        g_out = [helper.make_empty_tensor_value_info(o) for o in outputs]
        inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in consts.items()]
        model = helper.make_model(helper.make_graph(nodes, name, g_in, g_out, inits),
                                  opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        if runner == "ort":
            opts = ort.SessionOptions()
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            opts.log_severity_level = 3
            sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
            results = sess.run(list(outputs), inputs)
        elif runner == "onnx":
            results = ReferenceEvaluator(model).run(list(outputs), inputs)
        else:  # a function of the input arrays, for what neither runtime computes (right)
            results = runner(*inputs.values())
        with open(os.path.join(self.folder, name + ".onnx"), "wb") as f:
            f.write(model.SerializeToString())
        for i, a in enumerate(inputs.values()):
            np.save(os.path.join(self.folder, f"{name}_in{i}.npy"), np.asarray(a))
        for i, r in enumerate(results):
            np.save(os.path.join(self.folder, f"{name}_out{i}.npy"), np.asarray(r))
        self.cases.append({"name": name, "inputs": len(inputs), "outputs": len(outputs), "rtol": rtol, "atol": atol})
        return results

    def node(self, name, op, inputs, consts=None, attrs=None, outputs=1, opset=18, dynamic=False, rtol=1e-5, atol=1e-6,
             runner="ort"):
        """One node `op`. inputs: list of arrays (run-time inputs, in order) or None (omitted);
        consts: {position: array} inputs that are initializers instead."""
        consts = consts or {}
        names, feeds, inits = [], {}, {}
        for pos in range(len(inputs) + len(consts)):
            if pos in consts:
                names.append(f"c{pos}")
                inits[f"c{pos}"] = consts[pos]
            else:
                a = inputs[pos - sum(1 for c in consts if c < pos)]
                if a is None:
                    names.append("")
                else:
                    names.append(f"x{pos}")
                    feeds[f"x{pos}"] = a
        while names and names[-1] == "":
            names.pop()
        outs = [f"y{i}" for i in range(outputs)]
        node = helper.make_node(op, names, outs, **(attrs or {}))
        return self.graph(name, [node], feeds, inits, outs, opset, dynamic, rtol, atol, runner)

    def model_only(self, name, nodes, inputs, consts=None, outputs=("y",), opset=18):
        """Saves <name>.onnx without running it or listing it in cases.json (for import-error tests).
        inputs: {name: (numpy dtype, dims)}."""
        g_in = [helper.make_tensor_value_info(n, ONNX_TYPES[np.dtype(t)], list(d)) for n, (t, d) in inputs.items()]
        g_out = [helper.make_empty_tensor_value_info(o) for o in outputs]
        inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in (consts or {}).items()]
        model = helper.make_model(helper.make_graph(nodes, name, g_in, g_out, inits),
                                  opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = 8
        with open(os.path.join(self.folder, name + ".onnx"), "wb") as f:
            f.write(model.SerializeToString())

    def write(self):
        path = os.path.join(self.folder, "cases.json")
        if os.path.exists(path):  # cases written by hand (tests/op_table.h: "source": "hand") stay
            with open(path) as f:
                self.cases += [c for c in json.load(f) if c.get("source") == "hand"]
        with open(os.path.join(self.folder, "cases.json"), "w") as f:
            # One case per line (tests/op_table.h describes the entries).
            f.write("[\n" + ",\n".join(json.dumps(c) for c in self.cases) + "\n]\n")
        print(f"{len(self.cases)} cases written to {self.folder}")
