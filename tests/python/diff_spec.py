"""Case specs for the differential test: a JSON-able description of a one-node ONNX model.

A *spec* is a plain dict, so a failing case can be written into diff_regressions.json and rebuilt
exactly, whatever later happens to the random generators in diff_ops*.py:

    {"op": "Conv", "opset": 17, "attrs": {"strides": [2, 2], ...},
     "inputs": [{"name": "X", "dtype": "float32", "shape": [1, 3, 8, 8], "kind": "input",
                 "dist": {"kind": "normal"}, "dyn": [0]},          # dims 0 made symbolic
                {"name": "W", "dtype": "float32", "shape": [4, 3, 3, 3], "kind": "const",
                 "dist": {"kind": "normal", "scale": 0.5}},
                {"kind": "absent"}],                                 # an omitted optional input
     "outputs": 1, "seed": 1234}

`kind` is "input" (a graph input fed at run time), "const" (an initializer) or "absent".
Values come from `dist` (drawn from numpy's PCG64 seeded with spec["seed"], input by input) or
from an explicit `values` list. Attribute values are coerced to the type the operator's schema
declares (a float attribute written as 1 becomes 1.0), and the model is checked with the ONNX
checker and strict shape inference before use, so a generator bug shows as a clear error.

`build_model(specs)` puts several specs side by side in one model (names prefixed by "c<i>_"),
which lets one kiln process run a whole batch of cases.
"""
import copy

import numpy as np
import onnx
from onnx import helper, numpy_helper

DEFAULT_OPSET = 17

NP_TYPES = {
    "float32": np.float32, "float16": np.float16, "float64": np.float64, "int8": np.int8, "uint8": np.uint8,
    "int32": np.int32, "int64": np.int64, "bool": np.bool_,
}
FLOATS = ["float32", "float16", "float64"]
INTS = ["int8", "uint8", "int32", "int64"]
NUMERIC = FLOATS + INTS
ALL_TYPES = NUMERIC + ["bool"]


def onnx_type(dtype):
    return helper.np_dtype_to_tensor_dtype(np.dtype(NP_TYPES[dtype]))


def dtype_name(onnx_elem_type):
    np_type = helper.tensor_dtype_to_np_dtype(onnx_elem_type)
    for name, t in NP_TYPES.items():
        if np.dtype(t) == np_type:
            return name
    raise ValueError(f"element type {onnx_elem_type} has no kiln name")


def schema_of(spec):
    return onnx.defs.get_schema(spec["op"], spec.get("opset", DEFAULT_OPSET), spec.get("domain", ""))


def _coerce_attr(schema, name, value):
    """Makes the Python value match the attribute type the schema declares."""
    if name not in schema.attributes:
        raise ValueError(f"{spec_label_op(schema)}: the schema has no attribute '{name}'")
    kind = schema.attributes[name].type
    A = onnx.defs.OpSchema.AttrType
    if kind == A.FLOAT:
        return float(value)
    if kind == A.FLOATS:
        return [float(v) for v in value]
    if kind == A.INT:
        return int(value)
    if kind == A.INTS:
        return [int(v) for v in value]
    return value


def spec_label_op(schema):
    return f"{schema.name}-{schema.since_version}"


def draw(rng, dtype, shape, dist):
    """Random values of one input. Kinds: normal (scale, shift), uniform (low, high), int
    (low, high exclusive; for float types too: whole-valued floats), nonzero (|x| in [low, high]
    with a random sign), halves (multiples of 0.5: ties for rounding), special (normal with
    some NaN/+-Inf), bool (p), values (explicit list)."""
    np_type = NP_TYPES[dtype]
    kind = dist.get("kind", "normal")
    size = int(np.prod(shape)) if len(shape) else 1
    if kind == "values":
        return np.array(dist["values"], dtype=np_type).reshape(shape)
    if kind == "bool":
        return (rng.random(size) < dist.get("p", 0.5)).reshape(shape)
    if kind == "normal":
        x = rng.standard_normal(size) * dist.get("scale", 1.0) + dist.get("shift", 0.0)
    elif kind == "uniform":
        x = rng.uniform(dist.get("low", -1.0), dist.get("high", 1.0), size)
    elif kind == "int":
        x = rng.integers(dist.get("low", -10), dist.get("high", 10), size)
    elif kind == "nonzero":
        mag = rng.uniform(dist.get("low", 0.5), dist.get("high", 2.0), size)
        if dtype in INTS:
            mag = rng.integers(max(1, int(dist.get("low", 1))), int(dist.get("high", 5)) + 1, size)
        sign = np.where(rng.random(size) < 0.5, -1, 1) if dist.get("signed", True) else 1
        x = mag * sign
    elif kind == "halves":
        x = rng.integers(-12, 12, size) * 0.5
    elif kind == "special":
        x = rng.standard_normal(size)
        pick = rng.random(size)
        x[pick < 0.1] = np.nan
        x[(pick >= 0.1) & (pick < 0.2)] = np.inf
        x[(pick >= 0.2) & (pick < 0.3)] = -np.inf
    else:
        raise ValueError(f"unknown value distribution '{kind}'")
    return np.asarray(x).astype(np_type).reshape(shape)


def input_values(spec):
    """Arrays for every non-absent input of the spec, in order (consts included)."""
    rng = np.random.default_rng(spec.get("seed", 0))
    out = []
    for inp in spec["inputs"]:
        if inp["kind"] == "absent":
            out.append(None)
            continue
        dist = inp.get("dist", {"kind": "values", "values": inp["values"]} if "values" in inp else {"kind": "normal"})
        out.append(draw(rng, inp["dtype"], inp["shape"], dist))
    return out


def post_values(spec):
    """Constant operands of spec["post"] (the element-wise ops chained after output 0), drawn
    from their own stream so the inputs stay those of the spec without the chain."""
    rng = np.random.default_rng(spec.get("seed", 0) + 1)
    out = []
    for step in spec.get("post", []):
        vals = []
        for operand in step.get("operands", []):
            orig = operand.get("orig_dtype", operand["dtype"])
            vals.append(draw(rng, orig, operand["shape"], operand["dist"]).astype(NP_TYPES[operand["dtype"]]))
        out.append(vals)
    return out


def _graph_parts(spec, prefix, values):
    """Nodes, initializers, graph inputs, output names and feeds of one spec, names prefixed."""
    schema = schema_of(spec)
    attrs = {k: _coerce_attr(schema, k, v) for k, v in spec.get("attrs", {}).items()}
    node_inputs, inits, graph_inputs, feeds = [], [], [], {}
    for i, (inp, val) in enumerate(zip(spec["inputs"], values)):
        if inp["kind"] == "absent":
            node_inputs.append("")
            continue
        name = f"{prefix}{inp.get('name', 'in%d' % i)}"
        node_inputs.append(name)
        if inp["kind"] == "const":
            inits.append(numpy_helper.from_array(np.array(val, order="C"), name))
        else:
            dims = list(inp["shape"])
            for d in inp.get("dyn", []):
                dims[d] = f"{prefix}{inp.get('name', 'in%d' % i)}_d{d}"
            graph_inputs.append(helper.make_tensor_value_info(name, onnx_type(inp["dtype"]), dims))
            feeds[name] = val
    while node_inputs and node_inputs[-1] == "":
        node_inputs.pop()
    outputs = [f"{prefix}out{j}" for j in range(spec.get("outputs", 1))]
    post = spec.get("post", [])
    node_outputs = [f"{prefix}main0" if post else outputs[0]] + outputs[1:]
    nodes = [helper.make_node(spec["op"], node_inputs, node_outputs, name=f"{prefix}{spec['op']}",
                              domain=spec.get("domain", ""), **attrs)]
    current = node_outputs[0]
    for k, (step, vals) in enumerate(zip(post, post_values(spec))):
        step_inputs = [current]
        for j, val in enumerate(vals):
            name = f"{prefix}post{k}_{j}"
            inits.append(numpy_helper.from_array(np.array(val, order="C"), name))
            step_inputs.append(name)
        step_schema = onnx.defs.get_schema(step["op"], spec.get("opset", DEFAULT_OPSET), "")
        step_attrs = {a: _coerce_attr(step_schema, a, v) for a, v in step.get("attrs", {}).items()}
        current = outputs[0] if k == len(post) - 1 else f"{prefix}post{k}"
        nodes.append(helper.make_node(step["op"], step_inputs, [current], name=f"{prefix}post{k}_{step['op']}",
                                      **step_attrs))
    return nodes, inits, graph_inputs, outputs, feeds


def build_model(specs, check=True, values=None):
    """One model holding every spec side by side (all must share one opset). Returns
    (model, feeds, output_names) where output_names[i] lists the outputs of specs[i].
    `values` (one list per spec) replaces the drawn input values."""
    opsets = {s.get("opset", DEFAULT_OPSET) for s in specs}
    if len(opsets) != 1:
        raise ValueError(f"specs of one model must share an opset, got {sorted(opsets)}")
    opset = opsets.pop()
    nodes, inits, inputs, outputs, feeds, out_names = [], [], [], [], {}, []
    for i, spec in enumerate(specs):
        prefix = f"c{i}_" if len(specs) > 1 else ""
        vals = values[i] if values is not None else input_values(spec)
        node_list, ini, gin, outs, fd = _graph_parts(spec, prefix, vals)
        nodes += node_list
        inits += ini
        inputs += gin
        outputs += [helper.make_tensor_value_info(o, 0, None) for o in outs]
        feeds.update(fd)
        out_names.append(outs)
    graph = helper.make_graph(nodes, "kiln_diff", inputs, outputs, initializer=inits)
    opset_ids = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opset_ids, producer_name="kiln-difftest")
    model.ir_version = max(8, helper.find_min_ir_version_for(opset_ids))
    if check:
        model = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
        checked = copy.deepcopy(model)  # outputs whose shape inference left no shape get an unknown-rank one
        for o in checked.graph.output:
            if not o.type.tensor_type.HasField("shape"):
                o.type.tensor_type.shape.dim.add().dim_param = "unknown"
        onnx.checker.check_model(checked, full_check=False)
    else:
        model = onnx.shape_inference.infer_shapes(model)
    return model, feeds, out_names


def substitute_types(spec, mapping, keep=()):
    """A copy of the spec with input types replaced (say float16 -> float32) for a reference
    engine that lacks the original type; values are drawn as before and then converted, so they
    are the same numbers. Inputs named in `keep` keep their type. Returns None when nothing
    changes."""
    new = copy.deepcopy(spec)
    changed = False
    for inp in new["inputs"]:
        if inp["kind"] != "absent" and inp["dtype"] in mapping and inp.get("name") not in keep:
            inp["orig_dtype"] = inp["dtype"]
            inp["dtype"] = mapping[inp["dtype"]]
            changed = True
    for step in new.get("post", []):
        for operand in step.get("operands", []):
            if operand["dtype"] in mapping:
                operand["orig_dtype"] = operand["dtype"]
                operand["dtype"] = mapping[operand["dtype"]]
    for key, val in list(new.get("attrs", {}).items()):
        if key in ("to", "dtype", "output_dtype") and isinstance(val, int):
            name = dtype_name(val)
            if name in mapping:
                new["attrs"][key] = onnx_type(mapping[name])
                changed = True
    return new if changed else None


def substituted_values(spec_sub):
    """input_values() for a spec from substitute_types(): draws in the original types, converts."""
    orig = copy.deepcopy(spec_sub)
    for inp in orig["inputs"]:
        if "orig_dtype" in inp:
            inp["dtype"] = inp.pop("orig_dtype")
    vals = input_values(orig)
    return [None if v is None else v.astype(NP_TYPES[inp["dtype"]]) for v, inp in zip(vals, spec_sub["inputs"])]


def describe(spec):
    """One line naming the op, attributes and input shapes/types, for reports."""
    ins = []
    for inp in spec["inputs"]:
        if inp["kind"] == "absent":
            ins.append("-")
            continue
        tag = "" if inp["kind"] == "input" else "const "
        dyn = f" dyn{inp['dyn']}" if inp.get("dyn") else ""
        vals = ""
        dist = inp.get("dist", {})
        if inp["kind"] == "const" and dist.get("kind") == "values" and len(dist["values"]) <= 8:
            vals = f"={dist['values']}"
        ins.append(f"{tag}{inp['dtype']}{list(inp['shape'])}{dyn}{vals}")
    chain = "".join(f" -> {p['op']}{p.get('attrs') or ''}" + "".join(f"(const {o['dtype']}{o['shape']})"
                                                                      for o in p.get("operands", []))
                    for p in spec.get("post", []))
    return (f"{spec['op']}-{spec.get('opset', DEFAULT_OPSET)} attrs={spec.get('attrs', {})} inputs=[{', '.join(ins)}]"
            f"{chain} seed={spec.get('seed', 0)}")


# --- Drawing specs: the helpers every per-operator generator uses --------------------------------

ONNX_TYPE_STR = {"float32": "tensor(float)", "float16": "tensor(float16)", "float64": "tensor(double)",
                 "int8": "tensor(int8)", "uint8": "tensor(uint8)", "int32": "tensor(int32)", "int64": "tensor(int64)",
                 "bool": "tensor(bool)"}
INT_RANGE = {"int8": (-10, 10), "uint8": (0, 20), "int32": (-100, 100), "int64": (-100, 100)}


class Draw:
    """Random choices for one case. `p_dyn` is the chance that a run-time input gets some of its
    dims written as symbolic (dim_param) in the model."""

    def __init__(self, rng, p_dyn=0.2, large=False):
        self.rng = rng
        self.p_dyn = p_dyn
        self.large = large  # some cases get bigger dims, to reach the vectorized and oneDNN paths

    def int(self, lo, hi):  # inclusive
        return int(self.rng.integers(lo, hi + 1))

    def size(self, lo, hi, big):
        """An extent in [lo, hi], or in [lo, big] in a large case."""
        return self.int(lo, big if self.large else hi)

    def chance(self, p):
        return bool(self.rng.random() < p)

    def pick(self, seq):
        seq = list(seq)
        return seq[self.int(0, len(seq) - 1)]

    def sample(self, seq, k):
        seq = list(seq)
        idx = sorted(self.rng.choice(len(seq), size=k, replace=False).tolist())
        return [seq[i] for i in idx]

    def shuffled(self, seq):
        seq = list(seq)
        return [seq[i] for i in self.rng.permutation(len(seq)).tolist()]

    def dims(self, rank, lo=1, hi=5, max_elems=3000):
        """`rank` extents in [lo, hi], now and then an awkward 7 or 13, total kept small."""
        if self.large and 0 < rank <= 3:
            hi, max_elems = max(hi, 40), 30000
        while True:
            d = [self.int(lo, hi) for _ in range(rank)]
            if rank and self.chance(0.1):
                d[self.int(0, rank - 1)] = self.pick([7, 13])
            if int(np.prod(d)) <= max_elems:
                return d

    def shape(self, rmin=0, rmax=4, lo=1, hi=5):
        return self.dims(self.int(rmin, rmax), lo, hi)

    def dtype(self, types, p_f32=0.6):
        if "float32" in types and self.chance(p_f32):
            return "float32"
        return self.pick(types)

    def int_dist(self, dtype, lo=None, hi=None):
        dlo, dhi = INT_RANGE.get(dtype, (-10, 10))
        return {"kind": "int", "low": dlo if lo is None else max(lo, dlo), "high": dhi if hi is None else min(hi, dhi)}

    def default_dist(self, dtype):
        if dtype == "bool":
            return {"kind": "bool"}
        if dtype in INTS:
            return self.int_dist(dtype)
        return {"kind": "normal"}

    def inp(self, name, dtype, shape, dist=None, dyn=True):
        """A graph input; `dyn` (True, False or a list of dim indices) says which dims may be
        written as symbolic."""
        entry = {"name": name, "dtype": dtype, "shape": list(shape), "kind": "input",
                 "dist": dist or self.default_dist(dtype)}
        allowed = list(range(len(shape))) if dyn is True else [i for i in (dyn or []) if i < len(shape)]
        if allowed and self.chance(self.p_dyn):
            entry["dyn"] = [i for i in allowed if self.chance(0.5)] or [allowed[0]]
        return entry

    def const(self, name, dtype, values=None, shape=None, dist=None):
        if values is not None:
            arr = np.asarray(values)
            return {"name": name, "dtype": dtype, "shape": list(arr.shape) if shape is None else list(shape),
                    "kind": "const", "dist": {"kind": "values", "values": arr.reshape(-1).tolist()}}
        return {"name": name, "dtype": dtype, "shape": list(shape), "kind": "const",
                "dist": dist or self.default_dist(dtype)}

    def tensor(self, name, dtype, shape, dist=None, p_const=0.3, dyn=True):
        """A data input that is sometimes an initializer instead of a graph input."""
        if self.chance(p_const):
            return self.const(name, dtype, shape=shape, dist=dist or self.default_dist(dtype))
        return self.inp(name, dtype, shape, dist, dyn)

    @staticmethod
    def absent():
        return {"kind": "absent"}


def bcast_shapes(d, n, rmin=0, rmax=4, hi=5):
    """n shapes that broadcast together (numpy rules): suffixes of one shape, some dims set to 1."""
    full = d.shape(rmin, rmax, 1, hi)
    shapes = []
    for _ in range(n):
        r = d.int(0, len(full)) if d.chance(0.35) else len(full)
        shapes.append([1 if d.chance(0.2) else x for x in full[len(full) - r:]])
    return shapes


class OpEntry:
    """How to draw cases of one operator: `fn(d, types, opset)` returns a spec without seed;
    `types` are kiln's types for the op's main input (docs/onnx-support.md) that the schema of
    the drawn opset also allows."""

    def __init__(self, name, fn, types, opsets, type_input):
        self.name, self.fn, self.types, self.opsets, self.type_input = name, fn, types, opsets, type_input

    def allowed_types(self, opset):
        schema = onnx.defs.get_schema(self.name, opset, "")
        type_str = schema.inputs[self.type_input].type_str
        allowed = None
        for c in schema.type_constraints:
            if c.type_param_str == type_str:
                allowed = set(c.allowed_type_strs)
        if allowed is None:
            allowed = {type_str}
        return [t for t in self.types if ONNX_TYPE_STR[t] in allowed]


OP_TABLE = {}


def register(name, types, opsets=(DEFAULT_OPSET,), type_input=0):
    """Decorator: adds a generator to OP_TABLE under the ONNX op name."""

    def wrap(fn):
        OP_TABLE[name] = OpEntry(name, fn, types, tuple(opsets), type_input)
        return fn

    return wrap


def make_spec(op, opset, inputs, attrs=None, outputs=1, **extra):
    spec = {"op": op, "opset": opset, "attrs": attrs or {}, "inputs": inputs, "outputs": outputs}
    spec.update(extra)
    return spec
