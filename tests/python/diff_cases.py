"""Differential testing of kiln against ONNX Runtime on random one-node models.

`generate(seed, count)` draws `count` cases, cycling through every operator of OP_TABLE in a
shuffled order so that a few hundred cases cover every operator; `run_cases()` computes the ONNX
Runtime reference of each case, runs kiln on batches of cases put side by side in one model (one
process per batch; a failing batch is re-run case by case to find the culprit) and classifies every
case as pass, mismatch, kiln error, documented-unsupported or no-reference.

Also a command line for reproducing and reducing cases by hand:

    python3 tests/python/diff_cases.py --seed 7 --count 2000            # a long run
    python3 tests/python/diff_cases.py --seed 7 --count 300 --ops Conv,Resize
    python3 tests/python/diff_cases.py --spec case.json                 # one spec (or a list)
"""
import argparse
import copy
import json
import re
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import diff_ops_data  # noqa: E402,F401  (registers generators)
import diff_ops_math  # noqa: E402,F401
import diff_ops_nn  # noqa: E402,F401
from diff_spec import (FLOATS, OP_TABLE, Draw, build_model, describe, dtype_name, input_values,  # noqa: E402
                       substitute_types, substituted_values)
from kiln_tools import TOLERANCE, KilnError, compare, find_kiln, kiln_run, ort_session  # noqa: E402

REGRESSIONS = Path(__file__).resolve().parent / "diff_regressions.json"

# kiln import errors that are not failures: features kiln rejects on purpose, each documented in
# docs/onnx-support.md. (op regex, error-message regex, reason). Keep it short.
ALLOWED_ERRORS = [
    ("Conv", r"auto_pad.*static|static.*spatial", "docs: auto_pad SAME with strides > 1 needs static spatial dims"),
    ("ConvTranspose", r"output_shape.*static|static.*spatial", "docs: output_shape needs static spatial dims"),
]

# Open kiln bugs found by this test, each with a reduced case in diff_regressions.json:
# (op, predicate(spec, detail), description). Random cases that hit them count as known_issue.
KNOWN_ISSUES = [
    ("Mean", lambda spec, detail: "must have the same data type" in detail,
     "Mean on float16/float64 scales by a float32 constant (regression mean_float16)"),
]

# When ONNX Runtime has no kernel for a type, the reference runs on wider types holding the same
# values (outputs converted back); the value ranges of the generators keep results representable.
# float64 -> float32 is the last resort: the case is then compared with float32's tolerance.
ORT_TYPE_FALLBACKS = [{"float16": "float32"}, {"int8": "int32", "uint8": "int32"},
                      {"int8": "int64", "uint8": "int64", "int32": "int64"},
                      {"float16": "float32", "int8": "int32", "uint8": "int32"},
                      {"float64": "float32"}, {"float64": "float32", "int8": "int32", "uint8": "int32"}]
# Operators that only move or select elements may also run on other types of the same values.
MOVEMENT_OPS = {"DepthToSpace", "SpaceToDepth", "EyeLike", "Transpose", "Reshape", "Tile", "Expand", "Slice", "Pad",
                "Concat", "Split", "Gather", "GatherElements", "GatherND", "Compress", "ReverseSequence", "Trilu",
                "Resize", "ScatterElements", "ScatterND", "Squeeze", "Unsqueeze", "Flatten"}
INDEX_INPUTS = {"indices", "shape", "sizes", "scales", "repeats", "pads", "axes", "starts", "ends", "steps", "split",
                "k", "K", "sequence_lens", "condition"}  # these keep their types in MOVEMENT_FALLBACKS
MOVEMENT_FALLBACKS = [{"bool": "uint8"}, {"int64": "float64", "int32": "float64", "int8": "float32",
                                          "uint8": "float32", "bool": "float32"},
                      {"int64": "float32", "int32": "float32", "float64": "float32"}]


# Element-wise ops chained after a float output now and then (a case's "post" list), so the
# builder's activation and element-wise fusions see conv/matmul/pool/norm outputs too.
POST_UNARY = [("Relu", {}), ("Sigmoid", {}), ("Tanh", {}), ("LeakyRelu", {"alpha": 0.1}), ("Elu", {"alpha": 1.0}),
              ("HardSigmoid", {"alpha": 0.2, "beta": 0.5}), ("Softplus", {}), ("Abs", {}), ("Neg", {}), ("Erf", {})]
POST_BINARY = ["Add", "Mul", "Sub", "Div"]


def _draw_post(d, spec):
    """A chain of 1-2 element-wise ops after output 0 when it is a float tensor of known shape."""
    try:
        model, _, names = build_model([spec])
    except Exception:
        return None
    out = model.graph.output[0].type.tensor_type
    dims = [x.dim_value if x.HasField("dim_value") else None for x in out.shape.dim]
    if dtype_name(out.elem_type) not in FLOATS or None in dims:
        return None
    t = dtype_name(out.elem_type)
    if t == "float64":
        spec["tol"] = "float32"  # kiln's activations and fused element-wise chains compute in float32
    chain = []
    for _ in range(d.int(1, 2)):
        if d.chance(0.5):
            op, attrs = d.pick(POST_UNARY)
            chain.append({"op": op, "attrs": attrs})
        else:
            shape = d.pick([[], dims[-1:], [1 if d.chance(0.5) else v for v in dims]]) if dims else []
            if len(dims) == 4 and d.chance(0.3):
                shape = [dims[1], 1, 1]  # per channel
            op = d.pick(POST_BINARY)
            dist = {"kind": "nonzero", "low": 0.5, "high": 2.0} if op == "Div" else {"kind": "normal"}
            chain.append({"op": op, "operands": [{"dtype": t, "shape": shape, "dist": dist}]})
    return chain


def draw_case(op, case_seed, p_dyn=0.2, p_post=0.2, p_large=0.08):
    d = Draw(np.random.default_rng(case_seed), p_dyn=p_dyn)
    d.large = d.chance(p_large)
    entry = OP_TABLE[op]
    opset = d.pick(entry.opsets)
    types = entry.allowed_types(opset)
    if not types:
        raise ValueError(f"{op}-{opset}: none of kiln's types {entry.types} is allowed by the schema")
    spec = entry.fn(d, types, opset)
    spec["seed"] = case_seed
    # `kiln run` needs at least one graph input: make the first present input one.
    if not any(i["kind"] == "input" for i in spec["inputs"]):
        next(i for i in spec["inputs"] if i["kind"] != "absent")["kind"] = "input"
    # Not on older opsets (old Add/Relu schemas) nor where the reference is computed specially.
    if spec.get("opset", 17) >= 13 and op not in SPECIAL_REFERENCES and d.chance(p_post):
        post = _draw_post(d, spec)
        if post:
            spec["post"] = post
    return spec


def generate(seed, count, ops=None, **chances):
    """`count` cases cycling through `ops` (default all) in shuffled rounds; `chances` go to
    draw_case (p_dyn, p_post, p_large)."""
    rng = np.random.default_rng(seed)
    names = sorted(ops or OP_TABLE)
    order = []
    while len(order) < count:
        order += [names[i] for i in rng.permutation(len(names))]
    return [draw_case(op, int(rng.integers(2 ** 31)), **chances) for op in order[:count]]


def load_regressions(path=REGRESSIONS):
    if not Path(path).is_file():
        return []
    return json.loads(Path(path).read_text())


class Result:
    """Outcome of one case: status is pass, mismatch, kiln_error, unsupported, no_reference or
    invalid (the generator drew a model the ONNX checker rejects)."""

    def __init__(self, spec, status, detail=""):
        self.spec, self.status, self.detail = spec, status, detail

    def line(self):
        return f"[{self.status}] {describe(self.spec)}: {self.detail}"


def _matmul_integer_exact(spec):
    """onnxruntime's uint8 x int8 MatMulInteger saturates int16 partial sums on AVX2 machines
    (it returned 4122 for 19791), so the reference is numpy's exact integer product."""
    vals = input_values(spec)
    a, b = vals[0].astype(np.int64), vals[1].astype(np.int64)
    a_zp = int(vals[2]) if len(vals) > 2 and vals[2] is not None else 0
    b_zp = int(vals[3]) if len(vals) > 3 and vals[3] is not None else 0
    return [np.matmul(a - a_zp, b - b_zp).astype(np.int32)]


def _batch_major_recurrent(spec):
    """RNN/GRU/LSTM with layout=1: onnxruntime supports layout 0 only, so the reference runs the
    same numbers in layout 0 and transposes back."""
    vals = input_values(spec)
    spec0 = copy.deepcopy(spec)
    del spec0["attrs"]["layout"]
    names = [i.get("name") for i in spec["inputs"]]
    for k, name in enumerate(names):
        if name == "X" or (name in ("initial_h", "initial_c") and vals[k] is not None):
            vals[k] = np.ascontiguousarray(np.swapaxes(vals[k], 0, 1))
            spec0["inputs"][k]["shape"] = list(vals[k].shape)
            spec0["inputs"][k].pop("dyn", None)
    model, feeds, out = build_model([spec0], values=[vals])
    outs = ort_session(model).run(out[0], feeds)
    # Y: [seq, dirs, batch, hidden] -> [batch, seq, dirs, hidden]; Y_h, Y_c: [dirs, batch, h] -> [batch, dirs, h].
    return [np.transpose(o, (2, 0, 1, 3)) if j == 0 else np.swapaxes(o, 0, 1) for j, o in enumerate(outs)]


def _conv_integer_exact(spec):
    """ConvInteger through onnxruntime's float Conv on the zero-point-shifted values (exact: the
    sums stay far below 2^24), as onnxruntime's ConvInteger takes uint8 weights only."""
    vals = input_values(spec)
    x, w = vals[0].astype(np.float32), vals[1].astype(np.float32)
    x_zp = float(vals[2]) if len(vals) > 2 and vals[2] is not None else 0.0
    w_zp = float(vals[3]) if len(vals) > 3 and vals[3] is not None else 0.0
    conv = {"op": "Conv", "opset": 11, "attrs": dict(spec["attrs"]), "outputs": 1, "seed": 0,
            "inputs": [{"name": "x", "dtype": "float32", "shape": list(x.shape), "kind": "input"},
                       {"name": "w", "dtype": "float32", "shape": list(w.shape), "kind": "const"}]}
    model, feeds, names = build_model([conv], values=[[x - x_zp, w - w_zp]])
    return [np.rint(ort_session(model).run(names[0], feeds)[0]).astype(np.int32)]


# References computed without (or around) onnxruntime: op -> (applies(spec), fn(spec) -> outputs).
SPECIAL_REFERENCES = {
    "MatMulInteger": (lambda s: True, _matmul_integer_exact),
    "ConvInteger": (lambda s: True, _conv_integer_exact),
    "RNN": (lambda s: s["attrs"].get("layout") == 1, _batch_major_recurrent),
    "GRU": (lambda s: s["attrs"].get("layout") == 1, _batch_major_recurrent),
    "LSTM": (lambda s: s["attrs"].get("layout") == 1, _batch_major_recurrent),
}


def reference(spec):
    """(outputs, type mapping or None) from ONNX Runtime, or raises ValueError (invalid model) / RuntimeError
    (ONNX Runtime cannot run it)."""
    try:
        model, feeds, names = build_model([spec])
    except Exception as e:  # the checker or strict shape inference rejected the model
        raise ValueError(f"invalid model: {str(e).splitlines()[0][:300]}")
    out_types = {o.name: dtype_name(o.type.tensor_type.elem_type) for o in model.graph.output}
    special = SPECIAL_REFERENCES.get(spec["op"])
    if special and special[0](spec):
        try:
            return special[1](spec), None
        except Exception as e:
            raise RuntimeError(f"reference for {spec['op']}: {str(e).splitlines()[0][:300]}")
    try:
        return ort_session(model).run(names[0], feeds), None
    except Exception as e:
        first = str(e)
    movement = MOVEMENT_FALLBACKS if spec["op"] in MOVEMENT_OPS else []
    for mapping in ORT_TYPE_FALLBACKS + movement:
        sub = substitute_types(spec, mapping, INDEX_INPUTS if mapping in movement else ())
        if sub is None:
            continue
        try:
            m2, f2, n2 = build_model([sub], values=[substituted_values(sub)])
            outs = ort_session(m2).run(n2[0], f2)
        except Exception:
            continue
        outs = [o.astype(np.dtype(out_types[n])) for o, n in zip(outs, names[0])]
        return outs, mapping
    raise RuntimeError(f"onnxruntime: {first.splitlines()[0][:300]}")


def _allowed(spec, message):
    for op_re, msg_re, _ in ALLOWED_ERRORS:
        if re.fullmatch(op_re, spec["op"]) and re.search(msg_re, message, re.IGNORECASE):
            return True
    return False


def _compare_case(spec, outs, refs, mapping):
    """mapping: the type substitution the reference ran with (None: the case's own types)."""
    problems = []
    for j, (a, b) in enumerate(zip(outs, refs)):
        name = str(b.dtype)
        tol = TOLERANCE[mapping[name]] if mapping and name in mapping and mapping[name] in TOLERANCE else None
        if spec.get("tol") and name in TOLERANCE:  # the generator knows the reference is less precise
            tol = TOLERANCE[spec["tol"]]
        err = compare(a, b, tol=tol)
        if err:
            problems.append(f"output {j}: {err}")
    note = f"reference through {mapping}" if mapping else ""
    if problems:
        return Result(spec, "mismatch", "; ".join(problems) + (f" ({note})" if note else ""))
    return Result(spec, "pass", note)


def _run_batch(kiln, workdir, items, threads):
    """items: [(index, spec, refs, note)]. Returns {index: Result}."""
    specs = [it[1] for it in items]
    model, feeds, names = build_model(specs, check=False)
    path = Path(workdir) / "batch.onnx"
    onnx.save(model, path)
    flat = [n for ns in names for n in ns]
    try:
        outs = kiln_run(kiln, workdir, feeds, flat, onnx=path, threads=threads)
    except KilnError as e:
        if len(items) == 1:
            spec = items[0][1]
            status = "unsupported" if _allowed(spec, e.message) else "kiln_error"
            if e.returncode < 0:
                status, e.message = "kiln_error", f"kiln crashed (signal {-e.returncode}): {e.message}"
            return {items[0][0]: Result(spec, status, e.message.replace("\n", " | ")[:600])}
        results = {}
        for it in items:
            results.update(_run_batch(kiln, workdir, [it], threads))
        return results
    return {idx: _compare_case(spec, [outs[n] for n in ns], refs, note)
            for (idx, spec, refs, note), ns in zip(items, names)}


def run_cases(specs, kiln=None, batch=24, threads=1, workdir=None, jobs=2):
    """Runs every spec (`jobs` kiln processes at a time, each with `threads` threads); returns the
    list of Results in spec order."""
    kiln = kiln or find_kiln()
    results = [None] * len(specs)
    runnable = []
    for i, spec in enumerate(specs):
        try:
            refs, note = reference(spec)
            runnable.append((i, spec, refs, note))
        except ValueError as e:
            results[i] = Result(spec, "invalid", str(e))
        except RuntimeError as e:
            results[i] = Result(spec, "no_reference", str(e))
    by_opset = {}
    for it in runnable:
        by_opset.setdefault(it[1].get("opset"), []).append(it)
    batches = [group[k:k + batch] for group in by_opset.values() for k in range(0, len(group), batch)]
    with tempfile.TemporaryDirectory(prefix="kiln_diff_", dir=workdir) as tmp:
        def one(numbered):
            n, items = numbered
            sub = Path(tmp) / f"batch{n}"
            sub.mkdir()
            return _run_batch(kiln, sub, items, threads)

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for done in pool.map(one, enumerate(batches)):
                for idx, res in done.items():
                    results[idx] = _known_issue(res)
    return results


def _known_issue(result):
    """Marks a failure that matches KNOWN_ISSUES (reported to the lead, kept in the regressions
    file) as known_issue, so the random suite stays green until the fix lands."""
    if result.status not in ("mismatch", "kiln_error"):
        return result
    for op, match, text in KNOWN_ISSUES:
        if result.spec["op"] == op and match(result.spec, result.detail):
            return Result(result.spec, "known_issue", f"{text}: {result.detail}")
    return result


def summarize(results):
    counts = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--ops", default="", help="comma-separated op names (default: all)")
    ap.add_argument("--spec", help="a JSON file with one spec or a list of specs (regression entries too)")
    ap.add_argument("--kiln", default=None)
    ap.add_argument("--batch", type=int, default=24)
    ap.add_argument("--jobs", type=int, default=2, help="kiln processes at a time")
    ap.add_argument("--show", action="store_true", help="print every spec as JSON")
    for name, default in (("dyn", 0.2), ("post", 0.2), ("large", 0.08)):
        ap.add_argument(f"--p-{name}", type=float, default=default, help=f"chance of p_{name} (default {default})")
    ap.add_argument("--save-failures", help="write failing specs to this JSON file")
    a = ap.parse_args()
    if a.spec:
        data = json.loads(Path(a.spec).read_text())
        data = data if isinstance(data, list) else [data]
        specs = [x.get("spec", x) for x in data]
    else:
        specs = generate(a.seed, a.count, [o for o in a.ops.split(",") if o] or None, p_dyn=a.p_dyn, p_post=a.p_post,
                         p_large=a.p_large)
    if a.show:
        for s in specs:
            print(json.dumps(s))
    t0 = time.time()
    results = run_cases(specs, a.kiln, a.batch, jobs=a.jobs)
    bad = [r for r in results if r.status not in ("pass", "unsupported")]
    for r in bad:
        print(r.line())
        print("   spec:", json.dumps(r.spec))
    print(f"{len(results)} cases in {time.time() - t0:.1f} s: {summarize(results)}")
    if a.save_failures:
        Path(a.save_failures).write_text(json.dumps([r.spec for r in bad], indent=1))
    return 1 if any(r.status in ("mismatch", "kiln_error", "invalid") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
