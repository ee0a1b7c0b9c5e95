"""Differential-test generators for data-movement operators: Transpose, Reshape, Flatten,
Squeeze/Unsqueeze, Slice, Gather family, Concat, Split, Pad, Tile, Expand, Trilu, OneHot, Compress,
ReverseSequence, Scatter family, EyeLike, Shape/Size, Quantize/DequantizeLinear.

Shape-like inputs (Reshape's shape, Slice's starts, Pad's pads, Tile's repeats, ...) are
initializers, as kiln needs their values when it infers shapes (docs/onnx-support.md); indices for
the scatter ops are unique so the result does not depend on the order of the writes.
"""
import numpy as np

from diff_spec import ALL_TYPES, FLOATS, INTS, Draw, make_spec, register

DATA_TYPES = ALL_TYPES


def _data(d, types, rmin=1, rmax=4, lo=1, hi=5):
    t = d.dtype(types, p_f32=0.5)
    return t, d.shape(rmin, rmax, lo, hi)


@register("Transpose", DATA_TYPES, opsets=(13,))
def gen_transpose(d, types, opset):
    t, x = _data(d, types, 0, 5, 1, 4)
    attrs = {"perm": d.shuffled(range(len(x)))} if x and d.chance(0.85) else {}
    return make_spec("Transpose", opset, [d.inp("X", t, x)], attrs)


@register("Reshape", DATA_TYPES, opsets=(14, 13))
def gen_reshape(d, types, opset):
    t, x = _data(d, types, 0, 4)
    total = int(np.prod(x))
    # A target shape: split the element count into factors, then use 0 (copy) and -1 (infer).
    target = []
    rest = total
    for _ in range(d.int(0, 3)):
        f = d.pick([v for v in range(1, rest + 1) if rest % v == 0])
        target.append(f)
        rest //= f
    target.append(rest)
    target = d.shuffled(target)
    if d.chance(0.3):
        target = [v for v in target if v != 1] or [1]
    shape = list(target)
    for i in range(min(len(shape), len(x))):
        if shape[i] == x[i] and d.chance(0.4):
            shape[i] = 0
    free = [i for i, v in enumerate(shape) if v > 0]
    if free and d.chance(0.5):
        shape[d.pick(free)] = -1
    return make_spec("Reshape", opset, [d.inp("data", t, x), d.const("shape", "int64", values=shape)])


@register("Flatten", DATA_TYPES, opsets=(13,))
def gen_flatten(d, types, opset):
    t, x = _data(d, types, 1, 4)
    attrs = {"axis": d.int(-len(x), len(x))} if d.chance(0.8) else {}
    return make_spec("Flatten", opset, [d.inp("X", t, x)], attrs)


@register("Squeeze", DATA_TYPES, opsets=(13, 11))
def gen_squeeze(d, types, opset):
    t = d.dtype(types, p_f32=0.5)
    x = [1 if d.chance(0.4) else d.int(1, 5) for _ in range(d.int(1, 5))]
    ones = [i for i, v in enumerate(x) if v == 1]
    axes = None
    if ones and d.chance(0.8):
        axes = [a - len(x) if d.chance(0.3) else a for a in d.sample(ones, d.int(1, len(ones)))]
    inputs = [d.inp("data", t, x, dyn=[i for i, v in enumerate(x) if v != 1])]
    if opset >= 13:
        if axes is not None:
            inputs.append(d.const("axes", "int64", values=axes))
        return make_spec("Squeeze", opset, inputs)
    return make_spec("Squeeze", opset, inputs, {"axes": axes} if axes is not None else {})


@register("Unsqueeze", DATA_TYPES, opsets=(13, 11))
def gen_unsqueeze(d, types, opset):
    t, x = _data(d, types, 0, 3)
    out_rank = len(x) + d.int(1, 2)
    axes = [a - out_rank if d.chance(0.3) else a for a in d.sample(range(out_rank), out_rank - len(x))]
    if opset >= 13:
        return make_spec("Unsqueeze", opset, [d.inp("data", t, x), d.const("axes", "int64", values=axes)])
    return make_spec("Unsqueeze", opset, [d.inp("data", t, x)], {"axes": axes})


@register("Slice", DATA_TYPES, opsets=(13, 9))
def gen_slice(d, types, opset):
    t, x = _data(d, types, 1, 4, 1, 7)
    axes = d.sample(range(len(x)), d.int(1, len(x)))
    starts, ends, steps = [], [], []
    for a in axes:
        n = x[a]
        step = 1 if opset < 10 or d.chance(0.5) else d.pick([2, 3, -1, -2])
        s = d.int(-n - 2, n + 1)
        e = d.int(-n - 2, n + 2)
        if d.chance(0.15):
            e = d.pick([2 ** 31 - 1, -(2 ** 31)]) if step > 0 else -(2 ** 31)
        starts.append(s)
        ends.append(e)
        steps.append(step)
    axes = [a - len(x) if d.chance(0.3) else a for a in axes]
    if opset < 10:
        return make_spec("Slice", opset, [d.inp("data", t, x)], {"starts": starts, "ends": ends, "axes": axes})
    it = d.pick(["int64", "int32"])
    inputs = [d.inp("data", t, x), d.const("starts", it, values=starts), d.const("ends", it, values=ends)]
    if d.chance(0.8) or any(v != 1 for v in steps):
        inputs.append(d.const("axes", it, values=axes))
        if d.chance(0.7) or any(v != 1 for v in steps):
            inputs.append(d.const("steps", it, values=steps))
    elif sorted(axes) != list(range(len(axes))):
        inputs.append(d.const("axes", it, values=axes))
    return make_spec("Slice", opset, inputs)


@register("Gather", DATA_TYPES, opsets=(13, 11))
def gen_gather(d, types, opset):
    t, x = _data(d, types, 1, 4)
    axis = d.int(-len(x), len(x) - 1)
    n = x[axis]
    it = d.pick(["int64", "int32"])
    idx_shape = d.shape(0, 2, 1, 4)
    idx = d.tensor("indices", it, idx_shape, {"kind": "int", "low": -n, "high": n}, p_const=0.4)
    attrs = {"axis": axis} if axis or d.chance(0.3) else {}
    return make_spec("Gather", opset, [d.inp("data", t, x, dyn=[i for i in range(len(x)) if i != axis % len(x)]),
                                       idx], attrs)


@register("GatherElements", DATA_TYPES, opsets=(13, 11))
def gen_gather_elements(d, types, opset):
    t, x = _data(d, types, 1, 4)
    axis = d.int(-len(x), len(x) - 1)
    n = x[axis]
    idx_shape = [d.int(1, v) for v in x]
    idx_shape[axis] = d.int(1, 6)
    it = d.pick(["int64", "int32"])
    return make_spec("GatherElements", opset,
                     [d.inp("data", t, x), d.tensor("indices", it, idx_shape, {"kind": "int", "low": -n, "high": n})],
                     {"axis": axis})


@register("GatherND", DATA_TYPES, opsets=(13, 12))
def gen_gather_nd(d, types, opset):
    t, x = _data(d, types, 1, 4)
    b = d.int(0, min(1, len(x) - 1))
    last = d.int(1, len(x) - b)
    idx_shape = x[:b] + d.dims(d.int(0, 2), 1, 3) + [last]
    rng = np.random.default_rng(d.int(0, 2 ** 31))
    cols = [rng.integers(-x[b + j], x[b + j], int(np.prod(idx_shape[:-1]))) for j in range(last)]
    values = np.stack(cols, axis=-1).reshape(idx_shape) if cols else np.zeros(idx_shape, np.int64)
    attrs = {"batch_dims": b} if b or d.chance(0.2) else {}
    return make_spec("GatherND", opset, [d.inp("data", t, x), d.const("indices", "int64", values=values)], attrs)


@register("Concat", DATA_TYPES, opsets=(13, 11))
def gen_concat(d, types, opset):
    t, x = _data(d, types, 1, 4)
    axis = d.int(-len(x), len(x) - 1)
    inputs = []
    for i in range(d.int(1, 4)):
        s = list(x)
        s[axis] = d.int(1, 4)
        inputs.append(d.tensor(f"X{i}", t, s, p_const=0.2, dyn=[axis % len(x)]))
    return make_spec("Concat", opset, inputs, {"axis": axis})


@register("Split", DATA_TYPES, opsets=(13, 18, 11))
def gen_split(d, types, opset):
    t, x = _data(d, types, 1, 4, 1, 7)
    axis = d.int(-len(x), len(x) - 1)
    n = x[axis]
    attrs = {"axis": axis} if axis or d.chance(0.3) else {}
    inputs = [d.inp("input", t, x, dyn=[i for i in range(len(x)) if i != axis % len(x)])]
    parts = d.int(1, min(4, n))
    if d.chance(0.5):  # explicit sizes
        cuts = sorted(d.sample(range(1, n), parts - 1)) if parts > 1 else []
        split = [b - a for a, b in zip([0] + cuts, cuts + [n])]
        if opset >= 13:
            inputs.append(d.const("split", "int64", values=split))
        else:
            attrs["split"] = split
    elif opset >= 18 and -(-n // parts) * (parts - 1) < n:
        attrs["num_outputs"] = parts  # uneven split: the last part is smaller
    else:
        parts = d.pick([p for p in range(1, min(4, n) + 1) if n % p == 0])
        if opset >= 18:
            attrs["num_outputs"] = parts
    return make_spec("Split", opset, inputs, attrs, outputs=parts)


@register("Pad", DATA_TYPES, opsets=(13, 18, 19, 11))
def gen_pad(d, types, opset):
    t, x = _data(d, types, 1, 4)
    modes = ["constant", "reflect", "edge"] + (["wrap"] if opset >= 19 else [])
    mode = d.pick(modes) if t != "bool" else "constant"
    axes = list(range(len(x)))
    if opset >= 18 and d.chance(0.3):
        axes = d.sample(range(len(x)), d.int(1, len(x)))
    pads = []
    for side in range(2):
        for a in axes:
            if mode == "reflect":
                pads.append(d.int(0, x[a] - 1))
            elif mode == "constant" and d.chance(0.15):
                pads.append(-d.int(0, (x[a] - 1) // 2))  # negative pads crop
            else:
                pads.append(d.int(0, 3) if d.chance(0.7) else 0)
    inputs = [d.inp("data", t, x), d.const("pads", "int64", values=pads)]
    attrs = {"mode": mode} if mode != "constant" or d.chance(0.3) else {}
    if mode == "constant" and d.chance(0.5):
        value = True if t == "bool" else (d.int(0, 9) if t in INTS else 1.5)
        inputs.append(d.const("constant_value", t, values=value))
    elif len(axes) != len(x) or d.chance(0.2):
        inputs.append(Draw.absent())
    if len(axes) != len(x):
        inputs.append(d.const("axes", "int64", values=[a - len(x) if d.chance(0.3) else a for a in axes]))
    return make_spec("Pad", opset, inputs, attrs)


@register("Tile", DATA_TYPES, opsets=(13,))
def gen_tile(d, types, opset):
    t, x = _data(d, types, 1, 4, 1, 4)
    reps = [d.int(1, 3) if d.chance(0.6) else 1 for _ in x]
    return make_spec("Tile", opset, [d.inp("input", t, x), d.const("repeats", "int64", values=reps)])


@register("Expand", DATA_TYPES, opsets=(13,))
def gen_expand(d, types, opset):
    t = d.dtype(types, p_f32=0.5)
    full = d.shape(1, 4, 1, 5)
    x = [1 if d.chance(0.5) else v for v in full[len(full) - d.int(0, len(full)):]]
    shape = [1 if d.chance(0.2) else v for v in full]  # target dims of 1 keep the input's extent
    return make_spec("Expand", opset, [d.inp("input", t, x), d.const("shape", "int64", values=shape)])


@register("Trilu", DATA_TYPES, opsets=(14,))
def gen_trilu(d, types, opset):
    t = d.dtype(types, p_f32=0.5)
    x = d.dims(d.int(0, 2), 1, 3) + [d.int(1, 6), d.int(1, 6)]
    inputs = [d.inp("input", t, x)]
    if d.chance(0.6):
        inputs.append(d.const("k", "int64", values=d.int(-4, 4)))
    attrs = {"upper": d.int(0, 1)} if d.chance(0.8) else {}
    return make_spec("Trilu", opset, inputs, attrs)


@register("OneHot", ["int64", "int32"], opsets=(11,))
def gen_one_hot(d, types, opset):
    it = d.pick(types)
    depth = d.int(1, 6)
    vt = d.pick(["float32", "int64", "int32", "float16"])
    x = d.shape(1, 3, 1, 4)
    attrs = {"axis": d.int(-len(x) - 1, len(x))} if d.chance(0.6) else {}
    dist = {"kind": "int", "low": -depth - 1, "high": depth + 1}  # out of range gives all off values
    return make_spec("OneHot", opset, [d.inp("indices", it, x, dist), d.const("depth", "int64", values=[depth]),
                                       d.const("values", vt, values=[d.int(-3, 0), d.int(1, 5)])], attrs)


@register("Compress", DATA_TYPES, opsets=(11,))
def gen_compress(d, types, opset):
    t, x = _data(d, types, 1, 3)
    if d.chance(0.7):
        axis = d.int(-len(x), len(x) - 1)
        n, attrs = x[axis], {"axis": axis}
    else:
        n, attrs = int(np.prod(x)), {}
    cond = [bool(d.chance(0.6)) for _ in range(d.int(1, n))]
    return make_spec("Compress", opset, [d.inp("input", t, x), d.const("condition", "bool", values=cond)], attrs)


@register("ReverseSequence", DATA_TYPES, opsets=(10,))
def gen_reverse_sequence(d, types, opset):
    t = d.dtype(types, p_f32=0.5)
    batch_axis = d.int(0, 1)
    time_axis = 1 - batch_axis
    b, s = d.int(1, 4), d.int(1, 6)
    x = [0, 0] + d.dims(d.int(0, 2), 1, 3)
    x[batch_axis], x[time_axis] = b, s
    lens = [d.int(1, s) for _ in range(b)]
    return make_spec("ReverseSequence", opset,
                     [d.inp("input", t, x), d.tensor("sequence_lens", "int64", [b],
                                                     {"kind": "values", "values": lens})],
                     {"batch_axis": batch_axis, "time_axis": time_axis})


def _scatter_reduction(d, t, opset):
    if opset < 16 or t == "bool" or d.chance(0.5):
        return {}
    options = ["none", "add", "mul"] + (["max", "min"] if opset >= 18 else [])
    return {"reduction": d.pick(options)}


@register("ScatterElements", DATA_TYPES, opsets=(13, 16, 18))
def gen_scatter_elements(d, types, opset):
    t, x = _data(d, types, 1, 3)
    axis = d.int(-len(x), len(x) - 1)
    ax = axis % len(x)
    upd = [d.int(1, v) for v in x]
    upd[ax] = d.int(1, x[ax])
    # Unique targets: along the axis, each updates row writes a distinct permutation prefix.
    rng = np.random.default_rng(d.int(0, 2 ** 31))
    moved = int(np.prod(upd)) // upd[ax]
    idx = np.stack([rng.permutation(x[ax])[:upd[ax]] for _ in range(moved)], axis=-1)
    order = [ax] + [i for i in range(len(x)) if i != ax]
    idx = idx.reshape([upd[i] for i in order]).transpose(np.argsort(order))
    idx = np.where(rng.random(idx.shape) < 0.3, idx - x[ax], idx)  # negative indices
    attrs = dict(_scatter_reduction(d, t, opset), axis=axis)
    dist = d.int_dist(t, -5, 5) if t in INTS else None
    return make_spec("ScatterElements", opset, [d.inp("data", t, x, dist), d.const("indices", "int64", values=idx),
                                                d.tensor("updates", t, upd, dist)], attrs)


@register("ScatterND", DATA_TYPES, opsets=(13, 16, 18))
def gen_scatter_nd(d, types, opset):
    t, x = _data(d, types, 1, 3)
    last = d.int(1, len(x))
    rng = np.random.default_rng(d.int(0, 2 ** 31))
    space = int(np.prod(x[:last]))
    count = d.int(1, min(space, 6))
    flat = rng.permutation(space)[:count]
    idx = np.stack(np.unravel_index(flat, x[:last]), axis=-1).astype(np.int64)
    upd = [count] + x[last:]
    attrs = _scatter_reduction(d, t, opset)
    dist = d.int_dist(t, -5, 5) if t in INTS else None
    return make_spec("ScatterND", opset, [d.inp("data", t, x, dist), d.const("indices", "int64", values=idx),
                                          d.tensor("updates", t, upd, dist)], attrs)


@register("EyeLike", ["float32", "float64", "int32", "int64", "uint8", "int8", "bool"], opsets=(9,))
def gen_eye_like(d, types, opset):
    t = d.dtype(types)
    attrs = {"k": d.int(-3, 3)} if d.chance(0.6) else {}
    return make_spec("EyeLike", opset, [d.inp("input", t, [d.int(1, 6), d.int(1, 6)])], attrs)


@register("Shape", DATA_TYPES, opsets=(15, 13))
def gen_shape(d, types, opset):
    t, x = _data(d, types, 0, 4)
    attrs = {}
    if opset >= 15 and d.chance(0.5):
        attrs["start"] = d.int(-len(x) - 1, len(x))
        if d.chance(0.6):
            attrs["end"] = d.int(-len(x) - 1, len(x) + 1)
    return make_spec("Shape", opset, [d.inp("data", t, x)], attrs)


@register("Size", DATA_TYPES, opsets=(13,))
def gen_size(d, types, opset):
    t, x = _data(d, types, 0, 4)
    return make_spec("Size", opset, [d.inp("data", t, x)])


@register("QuantizeLinear", FLOATS, opsets=(13, 19))
def gen_quantize(d, types, opset):
    t = d.dtype(types, p_f32=0.7) if opset >= 19 else "float32"
    x = d.shape(1, 4)
    qt = d.pick(["uint8", "int8"])
    per_axis = d.chance(0.4)
    axis = d.int(-len(x), len(x) - 1)
    n = x[axis] if per_axis else 1
    scale = [round(float(v), 4) for v in np.random.default_rng(d.int(0, 99999)).uniform(0.02, 0.2, n)]
    zp = [d.int(0, 255) if qt == "uint8" else d.int(-128, 127) for _ in range(n)]
    shape = [n] if per_axis else []
    inputs = [d.inp("x", t, x, {"kind": "normal", "scale": 10}),
              d.const("y_scale", t, values=scale if per_axis else scale[0], shape=shape),
              d.const("y_zero_point", qt, values=zp if per_axis else zp[0], shape=shape)]
    return make_spec("QuantizeLinear", opset, inputs, {"axis": axis} if per_axis else {})


@register("DequantizeLinear", ["int8", "uint8", "int32"], opsets=(13, 19))
def gen_dequantize(d, types, opset):
    qt = d.pick(types)
    x = d.shape(1, 4)
    per_axis = d.chance(0.4)
    axis = d.int(-len(x), len(x) - 1)
    n = x[axis] if per_axis else 1
    st = d.pick(["float32", "float16"]) if opset >= 19 else "float32"
    scale = [round(float(v), 4) for v in np.random.default_rng(d.int(0, 99999)).uniform(0.02, 0.2, n)]
    shape = [n] if per_axis else []
    inputs = [d.inp("x", qt, x, {"kind": "int", "low": -128 if qt != "uint8" else 0, "high": 128}),
              d.const("x_scale", st, values=scale if per_axis else scale[0], shape=shape)]
    if qt != "int32" or d.chance(0.5):
        zp = [d.int(0, 255) if qt == "uint8" else d.int(-128, 127) for _ in range(n)] if qt != "int32" else [0] * n
        inputs.append(d.const("x_zero_point", qt, values=zp if per_axis else zp[0], shape=shape))
    return make_spec("DequantizeLinear", opset, inputs, {"axis": axis} if per_axis else {})


@register("Identity", DATA_TYPES, opsets=(16,))
def gen_identity(d, types, opset):
    t, x = _data(d, types, 0, 4)
    return make_spec("Identity", opset, [d.inp("input", t, x)])


@register("Dropout", FLOATS, opsets=(13,))
def gen_dropout(d, types, opset):
    t, x = _data(d, types, 1, 4)
    inputs = [d.inp("data", t, x)]
    if d.chance(0.5):
        inputs.append(d.const("ratio", d.pick(FLOATS), values=d.pick([0.0, 0.5])))
    return make_spec("Dropout", opset, inputs, outputs=d.int(1, 2))


@register("MatMulInteger", ["uint8", "int8"], opsets=(10,))
def gen_matmul_integer(d, types, opset):
    ta, tb = d.pick(types), d.pick(["uint8", "int8"])
    m, k, n = d.int(1, 6), d.int(1, 9), d.int(1, 6)
    batch = d.dims(d.int(0, 1), 1, 3)
    full = {"uint8": {"kind": "int", "low": 0, "high": 256}, "int8": {"kind": "int", "low": -128, "high": 128}}
    inputs = [d.inp("A", ta, batch + [m, k], full[ta]), d.tensor("B", tb, [k, n], full[tb], p_const=0.5)]
    if d.chance(0.6):
        inputs.append(d.const("a_zero_point", ta, values=d.int(0, 255) if ta == "uint8" else d.int(-128, 127)))
        if d.chance(0.5):
            inputs.append(d.const("b_zero_point", tb, values=d.int(0, 255) if tb == "uint8" else d.int(-128, 127)))
    return make_spec("MatMulInteger", opset, inputs)


@register("DynamicQuantizeLinear", ["float32"], opsets=(11,))
def gen_dynamic_quantize(d, types, opset):
    return make_spec("DynamicQuantizeLinear", opset,
                     [d.inp("x", "float32", d.shape(1, 4), {"kind": "normal", "scale": d.pick([1, 10])})], outputs=3)
