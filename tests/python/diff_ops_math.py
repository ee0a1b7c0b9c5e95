"""Differential-test generators for math operators: element-wise (with broadcasting), unary math,
activations, Softmax family, reductions, ArgMax/TopK/CumSum, MatMul/Gemm/Einsum, Cast and Clip.

Each generator draws one valid node (attributes, shapes, types and value ranges) for the opset
it is given; value ranges keep integer results inside their type and float inputs inside each
function's domain, so kiln and ONNX Runtime are compared where both are defined.
"""
from diff_spec import (ALL_TYPES, FLOATS, INTS, NUMERIC, Draw, bcast_shapes, make_spec, onnx_type,
                       register)


# --- element-wise binary and variadic ---------------------------------------------------------

def _arith_dists(d, op, t):
    if t in FLOATS:
        if op == "Div":
            return {"kind": "normal"}, {"kind": "nonzero", "low": 0.25, "high": 3.0}
        return {"kind": "normal"}, {"kind": "normal"}
    lo, hi = {"int8": (-10, 10), "uint8": (0, 15), "int32": (-1000, 1000), "int64": (-1000, 1000)}[t]
    if op == "Sub" and t == "uint8":
        return {"kind": "int", "low": 20, "high": 40}, {"kind": "int", "low": 0, "high": 20}
    if op == "Div":
        return {"kind": "int", "low": lo * 5 if t != "uint8" else 0, "high": hi * 5 if t != "int8" else 100}, \
            {"kind": "nonzero", "low": 1, "high": 9, "signed": t != "uint8"}
    return {"kind": "int", "low": lo, "high": hi}, {"kind": "int", "low": lo, "high": hi}


def _binary(name):
    def gen(d, types, opset):
        t = d.dtype(types)
        sa, sb = bcast_shapes(d, 2)
        da, db = _arith_dists(d, name, t)
        return make_spec(name, opset, [d.tensor("A", t, sa, da, p_const=0.15), d.tensor("B", t, sb, db)])

    return gen


for _op in ("Add", "Sub", "Mul", "Div"):
    register(_op, NUMERIC, opsets=(14, 13, 7))(_binary(_op))


@register("Pow", ["float32", "float16", "float64", "int32", "int64"], opsets=(15, 13))
def gen_pow(d, types, opset):
    t = d.dtype(types)
    sa, sb = bcast_shapes(d, 2)
    if t in FLOATS:
        te = d.pick([t, t, "float32", "int32", "int64"])
        base = {"kind": "uniform", "low": 0.2, "high": 3.0}
        if d.chance(0.3):  # negative bases with whole exponents are defined too
            base, te = {"kind": "normal", "scale": 2.0}, d.pick(["int32", "int64", t])
            expo = {"kind": "int", "low": -3, "high": 4}
        else:
            expo = {"kind": "normal"} if te in FLOATS else {"kind": "int", "low": -2, "high": 4}
    else:
        te = d.pick(["int32", "int64"])
        base, expo = {"kind": "int", "low": -6, "high": 7}, {"kind": "int", "low": 0, "high": 5}
    return make_spec("Pow", opset, [d.tensor("X", t, sa, base, p_const=0.1), d.tensor("Y", te, sb, expo)])


def _variadic(name):
    def gen(d, types, opset):
        t = d.dtype(types)
        n = d.int(1, 4)
        shapes = bcast_shapes(d, n)
        dist = d.int_dist(t, -30, 30) if t in INTS else {"kind": "normal"}
        return make_spec(name, opset, [d.tensor(f"X{i}", t, s, dist, p_const=0.1) for i, s in enumerate(shapes)])

    return gen


register("Max", NUMERIC, opsets=(13, 12))(_variadic("Max"))
register("Min", NUMERIC, opsets=(13, 12))(_variadic("Min"))
register("Sum", ["float32", "float16", "float64", "int32", "int64"], opsets=(13,))(_variadic("Sum"))
register("Mean", FLOATS, opsets=(13,))(_variadic("Mean"))


@register("Mod", NUMERIC, opsets=(13,))
def gen_mod(d, types, opset):
    t = d.dtype(types)
    fmod = 1 if t in FLOATS else d.int(0, 1)  # fmod=0 on floats is invalid
    sa, sb = bcast_shapes(d, 2)
    if t in FLOATS:
        da = d.pick([{"kind": "normal", "scale": 5.0}, {"kind": "int", "low": -20, "high": 20}])
        db = d.pick([{"kind": "nonzero", "low": 0.5, "high": 3.0}, {"kind": "nonzero", "low": 1, "high": 5}])
    else:
        da = d.int_dist(t)
        db = {"kind": "nonzero", "low": 1, "high": 7, "signed": t != "uint8"}
    return make_spec("Mod", opset, [d.inp("A", t, sa, da), d.tensor("B", t, sb, db)], {"fmod": fmod})


@register("PRelu", FLOATS, opsets=(16, 9))
def gen_prelu(d, types, opset):
    t = d.dtype(types)
    x = d.shape(1, 4)
    r = d.int(0, len(x))
    slope = [1 if d.chance(0.4) else v for v in x[len(x) - r:]]
    return make_spec("PRelu", opset, [d.inp("X", t, x), d.tensor("slope", t, slope, {"kind": "normal"}, p_const=0.6)])


def _logical(name):
    def gen(d, types, opset):
        sa, sb = bcast_shapes(d, 2)
        return make_spec(name, opset, [d.inp("A", "bool", sa), d.tensor("B", "bool", sb)])

    return gen


for _op in ("And", "Or", "Xor"):
    register(_op, ["bool"], opsets=(7,))(_logical(_op))


@register("Not", ["bool"], opsets=(1,))
def gen_not(d, types, opset):
    return make_spec("Not", opset, [d.inp("X", "bool", d.shape())])


def _compare(name):
    def gen(d, types, opset):
        t = d.dtype(types, p_f32=0.4)
        sa, sb = bcast_shapes(d, 2)
        if t == "bool":
            dist = {"kind": "bool"}
        elif t in INTS:
            dist = d.int_dist(t, -4, 4)  # small ranges: plenty of equal pairs
        else:
            dist = d.pick([{"kind": "normal"}, {"kind": "int", "low": -3, "high": 3}])
        return make_spec(name, opset, [d.inp("A", t, sa, dist), d.tensor("B", t, sb, dist)])

    return gen


register("Equal", ALL_TYPES, opsets=(13, 11))(_compare("Equal"))
for _op in ("Greater", "Less"):
    register(_op, NUMERIC, opsets=(13, 9))(_compare(_op))
for _op in ("GreaterOrEqual", "LessOrEqual"):
    register(_op, NUMERIC, opsets=(16, 12))(_compare(_op))


@register("BitShift", ["uint8"], opsets=(11,))
def gen_bitshift(d, types, opset):
    sa, sb = bcast_shapes(d, 2)
    return make_spec("BitShift", opset,
                     [d.inp("X", "uint8", sa, {"kind": "int", "low": 0, "high": 256}),
                      d.tensor("Y", "uint8", sb, {"kind": "int", "low": 0, "high": 8})],
                     {"direction": d.pick(["LEFT", "RIGHT"])})


# No bool X/Y: onnxruntime has no such kernel.
@register("Where", NUMERIC, opsets=(16, 9), type_input=1)
def gen_where(d, types, opset):
    t = d.dtype(types)
    sc, sx, sy = bcast_shapes(d, 3)
    return make_spec("Where", opset, [d.tensor("C", "bool", sc, p_const=0.2), d.tensor("X", t, sx, p_const=0.2),
                                      d.tensor("Y", t, sy, p_const=0.2)])


# --- unary math and activations --------------------------------------------------------------

UNARY_DOMAINS = {
    "Exp": {"kind": "uniform", "low": -6, "high": 6}, "Log": {"kind": "uniform", "low": 0.01, "high": 20},
    "Sqrt": {"kind": "uniform", "low": 0.0, "high": 20}, "Reciprocal": {"kind": "nonzero", "low": 0.1, "high": 4},
    "Sin": {"kind": "uniform", "low": -8, "high": 8}, "Cos": {"kind": "uniform", "low": -8, "high": 8},
    "Tan": {"kind": "uniform", "low": -1.4, "high": 1.4}, "Asin": {"kind": "uniform", "low": -0.99, "high": 0.99},
    "Acos": {"kind": "uniform", "low": -0.99, "high": 0.99}, "Atan": {"kind": "normal", "scale": 3},
    "Sinh": {"kind": "uniform", "low": -5, "high": 5}, "Cosh": {"kind": "uniform", "low": -5, "high": 5},
    "Asinh": {"kind": "normal", "scale": 5}, "Acosh": {"kind": "uniform", "low": 1.0, "high": 20},
    "Atanh": {"kind": "uniform", "low": -0.95, "high": 0.95}, "Erf": {"kind": "normal", "scale": 2},
    "Ceil": {"kind": "normal", "scale": 5}, "Floor": {"kind": "normal", "scale": 5},
    "Round": {"kind": "halves"}, "Sigmoid": {"kind": "normal", "scale": 4}, "Tanh": {"kind": "normal", "scale": 3},
    "Softplus": {"kind": "normal", "scale": 5}, "Softsign": {"kind": "normal", "scale": 3},
    "Relu": {"kind": "normal"}, "HardSwish": {"kind": "normal", "scale": 4}, "Mish": {"kind": "normal", "scale": 3},
    "Abs": {"kind": "normal"}, "Neg": {"kind": "normal"}, "Sign": {"kind": "normal"},
}
UNARY_OPSETS = {"HardSwish": (14,), "Mish": (18,), "Relu": (14, 13), "Round": (11,), "Acosh": (9,), "Asinh": (9,),
                "Atanh": (9,), "Sinh": (9,), "Cosh": (9,), "Erf": (13,), "Sign": (13,)}
INT_UNARY = {"Abs": NUMERIC, "Neg": ["float32", "float16", "float64", "int8", "int32", "int64"],
             "Sign": NUMERIC}


def _unary(name):
    def gen(d, types, opset):
        t = d.dtype(types)
        dist = UNARY_DOMAINS[name]
        if t in INTS:
            dist = d.int_dist(t, -50, 50)
        elif name in ("Sign", "Abs") and d.chance(0.3):
            dist = {"kind": "int", "low": -2, "high": 3}  # zeros
        return make_spec(name, opset, [d.inp("X", t, d.shape(), dist)], **_fp64_tol(name, t))

    return gen


for _op in UNARY_DOMAINS:
    register(_op, INT_UNARY.get(_op, FLOATS), opsets=UNARY_OPSETS.get(_op, (13,)))(_unary(_op))


@register("IsNaN", FLOATS, opsets=(13,))
def gen_isnan(d, types, opset):
    return make_spec("IsNaN", opset, [d.inp("X", d.dtype(types), d.shape(), {"kind": "special"})])


@register("IsInf", FLOATS, opsets=(10,))
def gen_isinf(d, types, opset):
    attrs = {k: d.int(0, 1) for k in ("detect_negative", "detect_positive") if d.chance(0.5)}
    return make_spec("IsInf", opset, [d.inp("X", d.dtype(types), d.shape(), {"kind": "special"})], attrs)


ACTIVATION_ATTRS = {
    "LeakyRelu": lambda d: {"alpha": d.pick([0.01, 0.2, 1.5])},
    "Elu": lambda d: {"alpha": d.pick([1.0, 0.5, 2.0])},
    "Selu": lambda d: {"alpha": d.pick([1.67326, 1.2]), "gamma": d.pick([1.0507, 2.0])},
    "Celu": lambda d: {"alpha": d.pick([1.0, 0.5, 2.0])},
    "HardSigmoid": lambda d: {"alpha": d.pick([0.2, 0.5]), "beta": d.pick([0.5, 0.3])},
    "ThresholdedRelu": lambda d: {"alpha": d.pick([1.0, 0.3, -0.5])},
    "Shrink": lambda d: {"bias": d.pick([0.0, 0.5]), "lambd": d.pick([0.5, 1.0, 0.0])},
    "Gelu": lambda d: {"approximate": d.pick(["none", "tanh"])},
}
ACTIVATION_OPSETS = {"LeakyRelu": (16, 6), "Elu": (6,), "Selu": (6,), "Celu": (12,), "HardSigmoid": (6,),
                     "ThresholdedRelu": (10,), "Shrink": (9,), "Gelu": (20,)}
ACTIVATION_TYPES = {"Celu": ["float32"], "Shrink": ["float32"]}


# kiln computes activations in float32 for every float type (src/core/activation_math.h), so a
# float64 case meets float32's tolerance (Gelu's tanh form loses ~2e-6 where 1 + tanh cancels).
ACTIVATION_KINDS = set(ACTIVATION_ATTRS) | {"Sigmoid", "Tanh", "Softplus", "Softsign", "Relu", "HardSwish", "Mish"}


def _fp64_tol(name, t):
    return {"tol": "float32"} if t == "float64" and name in ACTIVATION_KINDS else {}


def _activation(name):
    def gen(d, types, opset):
        t = d.dtype(types)
        attrs = {k: v for k, v in ACTIVATION_ATTRS[name](d).items() if d.chance(0.8)}
        return make_spec(name, opset, [d.inp("X", t, d.shape(), {"kind": "normal", "scale": 3})], attrs,
                         **_fp64_tol(name, t))

    return gen


for _op in ACTIVATION_ATTRS:
    register(_op, ACTIVATION_TYPES.get(_op, FLOATS), opsets=ACTIVATION_OPSETS[_op])(_activation(_op))


@register("Clip", NUMERIC, opsets=(13, 11, 6))
def gen_clip(d, types, opset):
    t = d.dtype(types) if opset >= 12 else d.dtype(FLOATS)
    shape = d.shape()
    lo, hi = sorted([d.int(-3, 3), d.int(-3, 3)]) if t in INTS else sorted(
        [round(float(d.rng.uniform(-2, 2)), 3), round(float(d.rng.uniform(-2, 2)), 3)])
    if t == "uint8":
        lo, hi = d.int(0, 5), d.int(6, 15)
    x_dist = d.int_dist(t) if t in INTS else {"kind": "normal", "scale": 2}
    use_lo, use_hi = d.chance(0.8), d.chance(0.8)
    if opset < 11:
        attrs = {}
        if use_lo:
            attrs["min"] = lo
        if use_hi:
            attrs["max"] = hi
        return make_spec("Clip", opset, [d.inp("X", t, shape, x_dist)], attrs)
    inputs = [d.inp("X", t, shape, x_dist),
              d.const("min", t, values=lo) if use_lo else Draw.absent(),
              d.const("max", t, values=hi) if use_hi else Draw.absent()]
    return make_spec("Clip", opset, inputs)


# --- Softmax family ----------------------------------------------------------------------------

def _softmax(name):
    def gen(d, types, opset):
        t = d.dtype(types)
        shape = d.shape(1, 4)
        attrs = {"axis": d.int(-len(shape), len(shape) - 1)} if d.chance(0.85) or len(shape) < 2 else {}
        dist = {"kind": "normal", "scale": 3}
        if name == "Hardmax" and t == "float16":
            dist = {"kind": "normal", "scale": 30}  # few ties after rounding to fp16
        return make_spec(name, opset, [d.inp("X", t, shape, dist)], attrs)

    return gen


for _op in ("Softmax", "LogSoftmax", "Hardmax"):
    register(_op, FLOATS, opsets=(13, 11))(_softmax(_op))


# --- reductions ----------------------------------------------------------------------------------

REDUCE_TYPES = {
    "ReduceSum": ["float32", "float16", "float64", "int32", "int64"],
    "ReduceMean": ["float32", "float16", "float64", "int32", "int64"],
    "ReduceMax": NUMERIC, "ReduceMin": NUMERIC,
    "ReduceProd": ["float32", "float16", "float64", "int32", "int64"],
    "ReduceSumSquare": ["float32", "float16", "float64", "int32", "int64"],
    "ReduceL1": ["float32", "float16", "float64", "int32", "int64"],
    "ReduceL2": FLOATS, "ReduceLogSum": FLOATS, "ReduceLogSumExp": FLOATS,
}


def _reduce(name):
    def gen(d, types, opset):
        t = d.dtype(types)
        shape = d.shape(1, 4)
        rank = len(shape)
        axes = None if d.chance(0.15) else [a - rank if d.chance(0.3) else a
                                            for a in d.sample(range(rank), d.int(1, rank))]
        attrs = {"keepdims": d.int(0, 1)} if d.chance(0.8) else {}
        if t in INTS:
            dist = d.int_dist(t, -3, 4) if name == "ReduceProd" else d.int_dist(t, -20, 20)
        elif name == "ReduceProd":
            dist = {"kind": "uniform", "low": 0.5, "high": 1.5}
        elif name == "ReduceLogSum":
            dist = {"kind": "uniform", "low": 0.1, "high": 2.0}
        else:
            dist = {"kind": "normal", "scale": 2}
        if name == "ReduceSum" and t == "float16" or (name == "ReduceSumSquare" and t == "float16"):
            dist = {"kind": "uniform", "low": -1, "high": 1}
        inputs = [d.inp("X", t, shape, dist)]
        axes_as_input = opset >= 18 or (name == "ReduceSum" and opset >= 13)
        if axes_as_input:
            if axes is not None:
                inputs.append(d.const("axes", "int64", values=axes))
            elif opset >= 18 and d.chance(0.3):
                attrs["noop_with_empty_axes"] = d.int(0, 1)
        elif axes is not None:
            attrs["axes"] = axes
        return make_spec(name, opset, inputs, attrs)

    return gen


for _op, _types in REDUCE_TYPES.items():
    register(_op, _types, opsets=(13, 18) if _op != "ReduceSum" else (13, 11))(_reduce(_op))


def _arg(name):
    def gen(d, types, opset):
        t = d.dtype(types)
        shape = d.shape(1, 4)
        attrs = {"axis": d.int(-len(shape), len(shape) - 1), "keepdims": d.int(0, 1)}
        if opset >= 12:
            attrs["select_last_index"] = d.int(0, 1)
        ties = {"kind": "int", "low": -2, "high": 2}
        dist = d.int_dist(t, -3, 3) if t in INTS else d.pick([{"kind": "normal"}, ties])
        return make_spec(name, opset, [d.inp("X", t, shape, dist)], attrs)

    return gen


register("ArgMax", NUMERIC, opsets=(13, 11))(_arg("ArgMax"))
register("ArgMin", NUMERIC, opsets=(13, 11))(_arg("ArgMin"))


@register("TopK", NUMERIC, opsets=(11,))
def gen_topk(d, types, opset):
    t = d.dtype(types)
    shape = d.shape(1, 4)
    axis = d.int(-len(shape), len(shape) - 1)
    k = d.int(1, shape[axis])
    dist = d.int_dist(t, -5, 5) if t in INTS else d.pick([{"kind": "normal"}, {"kind": "int", "low": -3, "high": 3}])
    attrs = {"axis": axis, "largest": d.int(0, 1), "sorted": 1}
    return make_spec("TopK", opset, [d.inp("X", t, shape, dist), d.const("K", "int64", values=[k])], attrs,
                     outputs=2)


@register("CumSum", ["float32", "float16", "float64", "int32", "int64"], opsets=(14, 11))
def gen_cumsum(d, types, opset):
    t = d.dtype(types)
    shape = d.shape(1, 4)
    axis = d.int(-len(shape), len(shape) - 1)
    attrs = {k: d.int(0, 1) for k in ("exclusive", "reverse") if d.chance(0.6)}
    return make_spec("CumSum", opset, [d.inp("X", t, shape, d.int_dist(t) if t in INTS else None),
                                       d.const("axis", d.pick(["int32", "int64"]), values=axis)], attrs)


# --- MatMul, Gemm, Einsum ----------------------------------------------------------------------

@register("MatMul", ["float32", "float16", "float64", "int32", "int64"], opsets=(13,))
def gen_matmul(d, types, opset):
    t = d.dtype(types)
    m, k, n = d.size(1, 9, 70), d.size(1, 17, 150), d.size(1, 9, 70)
    batch = bcast_shapes(d, 2, 0, 2, 4)
    a = [k] if d.chance(0.1) else batch[0] + [m, k]
    b = [k] if d.chance(0.1) else batch[1] + [k, n]
    dist = d.int_dist(t, -5, 5) if t in INTS else None
    return make_spec("MatMul", opset, [d.inp("A", t, a, dist), d.tensor("B", t, b, dist, p_const=0.5)])


@register("Gemm", FLOATS, opsets=(13, 11))
def gen_gemm(d, types, opset):
    t = d.dtype(types)
    m, k, n = d.size(1, 9, 70), d.size(1, 17, 150), d.size(1, 9, 70)
    attrs = {}
    ta, tb = d.int(0, 1), d.int(0, 1)
    if ta or d.chance(0.2):
        attrs["transA"] = ta
    if tb or d.chance(0.2):
        attrs["transB"] = tb
    if d.chance(0.4):
        attrs["alpha"] = d.pick([0.5, 2.0, -1.0])
    if d.chance(0.4):
        attrs["beta"] = d.pick([0.5, 2.0, 0.0])
    inputs = [d.inp("A", t, [k, m] if ta else [m, k]), d.tensor("B", t, [n, k] if tb else [k, n], p_const=0.6)]
    if d.chance(0.75):
        inputs.append(d.tensor("C", t, d.pick([[], [n], [1, n], [m, 1], [m, n], [1]]), p_const=0.6))
    return make_spec("Gemm", opset, inputs, attrs)


EINSUM_EQUATIONS = [
    ("ij,jk->ik", "ij", "jk"), ("bij,bjk->bik", "bij", "bjk"), ("ij->ji", "ij"), ("ii->i", "ii"),
    ("i,i->", "i", "i"), ("ij->", "ij"), ("bhqd,bhkd->bhqk", "bhqd", "bhkd"), ("i,j->ij", "i", "j"),
    ("ijk->kji", "ijk"), ("ij,jk", "ij", "jk"), ("ij,ij->ij", "ij", "ij"), ("bij,jk->bik", "bij", "jk"),
    ("...ij,...jk->...ik", "...ij", "...jk"), ("ijk,ikl->jl", "ijk", "ikl"), ("i,ij->j", "i", "ij"),
    ("ii", "ii"), ("ij->i", "ij"),
]


@register("Einsum", ["float32", "float16", "float64", "int32", "int64"], opsets=(12,))
def gen_einsum(d, types, opset):
    t = d.dtype(types)
    eq, *terms = d.pick(EINSUM_EQUATIONS)
    letters = {c: d.int(1, 5) for c in "bhijklqd"}
    ell = d.dims(d.int(0, 2), 1, 3)
    inputs = []
    for i, term in enumerate(terms):
        shape = (ell if term.startswith("...") else []) + [letters[c] for c in term.replace("...", "")]
        inputs.append(d.inp(f"X{i}", t, shape, d.int_dist(t, -5, 5) if t in INTS else None))
    return make_spec("Einsum", opset, inputs, {"equation": eq})


# --- Cast --------------------------------------------------------------------------------------

@register("Cast", ALL_TYPES, opsets=(13, 19))
def gen_cast(d, types, opset):
    src = d.pick(types)
    dst = d.pick([x for x in ALL_TYPES if x != src] or ALL_TYPES)
    # Values every target type holds (out-of-range float->int casts are undefined behaviour).
    if src == "bool":
        dist = {"kind": "bool"}
    elif src in FLOATS:
        lo = 0 if dst == "uint8" else -100
        dist = {"kind": "uniform", "low": lo, "high": 100} if dst in INTS else {"kind": "normal", "scale": 50}
        if dst == "bool" and d.chance(0.5):
            dist = {"kind": "int", "low": -1, "high": 2}
    else:
        lo, hi = {"int8": (-100, 100), "uint8": (0, 200), "int32": (-30000, 30000), "int64": (-30000, 30000)}[src]
        if dst == "uint8":
            lo, hi = max(lo, 0), min(hi, 255)
        if dst == "int8":
            lo, hi = max(lo, -128), min(hi, 127)
        if dst == "float16":
            lo, hi = max(lo, -2048), min(hi, 2048)
        dist = {"kind": "int", "low": lo, "high": hi}
        if dst == "bool":
            dist = {"kind": "int", "low": max(lo, -2), "high": min(hi, 3)}
    return make_spec("Cast", opset, [d.inp("X", src, d.shape(), dist)], {"to": onnx_type(dst)})
