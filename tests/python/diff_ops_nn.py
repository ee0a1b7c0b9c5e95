"""Differential-test generators for neural-network operators: Conv, ConvTranspose, pooling,
normalization (BatchNormalization, InstanceNormalization, LayerNormalization, GroupNormalization,
LpNormalization, MeanVarianceNormalization, LRN), Resize, GridSample, DepthToSpace/SpaceToDepth.

Window operators draw the kernel, strides, dilations and pads first and then an input size that
leaves at least one output position, so every case is valid; auto_pad SAME with strides > 1 and
ConvTranspose's output_shape keep static spatial dims (kiln documents both as needing them).
"""
import numpy as np

from diff_spec import FLOATS, Draw, make_spec, register


def _window(d, n_sp, kmax=3, smax=3, dmax=2, pad_lt_kernel=False):
    """kernel, strides, dilations, pads (begin..., end...) for n_sp spatial axes."""
    k = [d.int(1, kmax) for _ in range(n_sp)]
    s = [d.int(1, smax) if d.chance(0.6) else 1 for _ in range(n_sp)]
    dil = [d.int(1, dmax) if d.chance(0.3) else 1 for _ in range(n_sp)]
    eff = [(kk - 1) * dd + 1 for kk, dd in zip(k, dil)]
    limit = k if pad_lt_kernel else eff
    pads = [d.int(0, lim - 1) if d.chance(0.6) else 0 for lim in limit] + \
           [d.int(0, lim - 1) if d.chance(0.6) else 0 for lim in limit]
    return k, s, dil, eff, pads


def _spatial(d, eff, pads, n_sp, extra=7):
    return [max(1, eff[i] - pads[i] - pads[i + n_sp]) + d.int(0, extra) for i in range(n_sp)]


def _auto_pad(d, attrs, pads, strides, eff, p=0.25):
    """Sets auto_pad (and drops pads) now and then; returns whether spatial dims must stay static.
    Not with dilations, nor with a window shorter than the stride (a negative total padding):
    onnxruntime rejects the first in Conv, gets AveragePool's output size wrong (ceil(in / stride)
    per the ONNX spec) and fails MaxPool on the second."""
    if d.chance(p) and all(v == 1 for v in attrs.get("dilations", [1])) and all(e >= s for e, s in zip(eff, strides)):
        attrs["auto_pad"] = d.pick(["SAME_UPPER", "SAME_LOWER", "VALID"])
        return attrs["auto_pad"] != "VALID" and max(strides) > 1
    if any(pads) or d.chance(0.3):
        attrs["pads"] = pads
    return False


@register("Conv", FLOATS, opsets=(11,))
def gen_conv(d, types, opset):
    t = d.dtype(types, p_f32=0.75)
    n_sp = d.pick([1, 2, 2, 2, 3])
    k, s, dil, eff, pads = _window(d, n_sp, kmax=5 if n_sp == 1 else 3)
    group = d.pick([1, 1, 1, 2, 3, "dw"])
    if group == "dw":
        group = d.int(1, 6)
        cin_g, cout_g = 1, d.int(1, 2)
    else:
        cin_g, cout_g = d.size(1, 4, 24), d.size(1, 4, 24)
    c, m = group * cin_g, group * cout_g
    attrs = {"group": group} if group > 1 or d.chance(0.2) else {}
    if d.chance(0.7):
        attrs["kernel_shape"] = k
    if any(v > 1 for v in s) or d.chance(0.3):
        attrs["strides"] = s
    if any(v > 1 for v in dil) or d.chance(0.2):
        attrs["dilations"] = dil
    static = _auto_pad(d, attrs, pads, s, eff)
    if attrs.get("auto_pad") in ("SAME_UPPER", "SAME_LOWER", "VALID"):
        pads = [0] * (2 * n_sp)
    x = [d.int(1, 2), c] + _spatial(d, eff, pads, n_sp, extra=(9 if n_sp < 3 else 4) * (3 if d.large else 1))
    w_dist = {"kind": "normal", "scale": 0.5}
    inputs = [d.inp("X", t, x, dyn=[0] if static else True),
              d.tensor("W", t, [m, cin_g] + k, w_dist, p_const=0.8, dyn=False)]
    if d.chance(0.6):
        inputs.append(d.tensor("B", t, [m], p_const=0.8, dyn=False))
    return make_spec("Conv", opset, inputs, attrs)


@register("ConvTranspose", FLOATS, opsets=(11,))
def gen_conv_transpose(d, types, opset):
    t = d.dtype(types, p_f32=0.75)
    n_sp = d.pick([1, 2, 2, 3])
    k, s, dil, eff, pads = _window(d, n_sp, kmax=4 if n_sp < 3 else 3)
    group = d.pick([1, 1, 2, 3])
    cin_g, cout_g = d.size(1, 3, 16), d.size(1, 3, 16)
    c, m = group * cin_g, group * cout_g
    attrs = {"group": group} if group > 1 else {}
    if d.chance(0.7):
        attrs["kernel_shape"] = k
    if any(v > 1 for v in s) or d.chance(0.3):
        attrs["strides"] = s
    if any(v > 1 for v in dil) or d.chance(0.2):
        attrs["dilations"] = dil
    x_sp = [d.int(1, 6) for _ in range(n_sp)]
    static = False
    mode = d.pick(["pads", "pads", "pads", "output_shape", "auto_pad"])
    if mode == "auto_pad" and any(e < si for e, si in zip(eff, s)):
        mode = "pads"  # SAME with a kernel shorter than the stride: onnxruntime's output is not in*stride
    if mode == "output_shape":
        # A total padding in [0, eff-1] per axis; kiln needs static spatial dims here.
        attrs["output_shape"] = [s[i] * (x_sp[i] - 1) + eff[i] - d.int(0, eff[i] - 1) for i in range(n_sp)]
        static = True
    elif mode == "auto_pad":
        attrs["auto_pad"] = d.pick(["SAME_UPPER", "SAME_LOWER", "VALID"])
        static = attrs["auto_pad"] != "VALID"
    else:
        out_pad = [d.int(0, si - 1) if d.chance(0.4) else 0 for si in s]  # onnxruntime: < stride
        # The output must keep at least one element per axis after the pads are removed.
        for i in range(n_sp):
            room = s[i] * (x_sp[i] - 1) + eff[i] - 1
            pads[i] = min(pads[i], room // 2)
            pads[i + n_sp] = min(pads[i + n_sp], room - pads[i])
        if any(pads) or d.chance(0.3):
            attrs["pads"] = pads
        if any(out_pad):
            attrs["output_padding"] = out_pad
    inputs = [d.inp("X", t, [d.int(1, 2), c] + x_sp, dyn=[0] if static else True),
              d.tensor("W", t, [c, cout_g] + k, {"kind": "normal", "scale": 0.5}, p_const=0.8, dyn=False)]
    if d.chance(0.6):
        inputs.append(d.tensor("B", t, [m], p_const=0.8, dyn=False))
    return make_spec("ConvTranspose", opset, inputs, attrs)


def _pool(name):
    def gen(d, types, opset):
        t = d.dtype(types, p_f32=0.7)
        n_sp = d.pick([1, 2, 2, 3])
        with_dil = name == "MaxPool" or (name in ("AveragePool", "LpPool") and opset >= 18 + (name == "AveragePool"))
        k, s, dil, eff, pads = _window(d, n_sp, dmax=2 if with_dil else 1, pad_lt_kernel=True)
        attrs = {"kernel_shape": k}
        if any(v > 1 for v in s) or d.chance(0.3):
            attrs["strides"] = s
        if with_dil and (any(v > 1 for v in dil) or d.chance(0.2)):
            attrs["dilations"] = dil
        static = _auto_pad(d, attrs, pads, s, eff, p=0.2)
        if "auto_pad" in attrs:
            pads = [0] * (2 * n_sp)
        if (name != "LpPool" or opset >= 18) and d.chance(0.3) and "auto_pad" not in attrs:
            attrs["ceil_mode"] = 1
        if name == "AveragePool" and d.chance(0.5):
            attrs["count_include_pad"] = d.int(0, 1)
        if name == "LpPool":
            attrs["p"] = d.pick([1, 2, 3])
        extra = (8 if n_sp < 3 else 4) * (3 if d.large else 1)
        x = [d.int(1, 2), d.size(1, 4, 24)] + _spatial(d, eff, pads, n_sp, extra=extra)
        dist = d.int_dist(t) if t in ("int8", "uint8") else None
        return make_spec(name, opset, [d.inp("X", t, x, dist, dyn=[0] if static else True)], attrs)

    return gen


register("MaxPool", FLOATS + ["int8", "uint8"], opsets=(12,))(_pool("MaxPool"))
register("AveragePool", FLOATS, opsets=(11, 19))(_pool("AveragePool"))
register("LpPool", ["float32"], opsets=(11, 18))(_pool("LpPool"))


def _global_pool(name):
    def gen(d, types, opset):
        t = d.dtype(types)
        dist = d.int_dist(t) if t in ("int8", "uint8") else None
        return make_spec(name, opset, [d.inp("X", t, d.shape(3, 5, 1, 6), dist)])

    return gen


register("GlobalAveragePool", FLOATS, opsets=(1,))(_global_pool("GlobalAveragePool"))
register("GlobalMaxPool", FLOATS + ["int8", "uint8"], opsets=(1,))(_global_pool("GlobalMaxPool"))


# --- normalization -----------------------------------------------------------------------------

def _at_least_two(d, rank, hi):
    """Dims with two or more elements in all: normalizing one element divides rounding noise by
    sqrt(epsilon), which no two implementations agree on."""
    while True:
        dims = d.dims(rank, 1, hi)
        if int(np.prod(dims)) >= 2:
            return dims


def _eps(d, attrs):
    if d.chance(0.4):
        attrs["epsilon"] = d.pick([1e-5, 1e-3, 0.1])


@register("BatchNormalization", FLOATS, opsets=(15, 9))
def gen_batch_norm(d, types, opset):
    t = d.dtype(types)
    x = [d.int(1, 3), d.int(1, 6)] + d.dims(d.int(0, 2), 1, 6)
    c = x[1]
    attrs = {}
    _eps(d, attrs)
    inputs = [d.inp("X", t, x), d.const("scale", t, shape=[c]), d.const("B", t, shape=[c]),
              d.const("mean", t, shape=[c]),
              d.const("var", t, shape=[c], dist={"kind": "uniform", "low": 0.2, "high": 2.0})]
    return make_spec("BatchNormalization", opset, inputs, attrs)


@register("InstanceNormalization", FLOATS, opsets=(6,))
def gen_instance_norm(d, types, opset):
    t = d.dtype(types)
    x = [d.int(1, 3), d.int(1, 5)] + _at_least_two(d, d.int(1, 2), 7)
    attrs = {}
    _eps(d, attrs)
    return make_spec("InstanceNormalization", opset,
                     [d.inp("X", t, x, {"kind": "normal", "scale": 2, "shift": 1}), d.tensor("scale", t, [x[1]]),
                      d.tensor("B", t, [x[1]])], attrs)


@register("LayerNormalization", FLOATS, opsets=(17,))
def gen_layer_norm(d, types, opset):
    t = d.dtype(types)
    while True:
        x = d.shape(1, 4, 1, 7)
        axis = d.int(-len(x), len(x) - 1)
        if int(np.prod(x[axis:])) >= 2:
            break
    attrs = {"axis": axis} if axis != -1 or d.chance(0.3) else {}
    _eps(d, attrs)
    inner = x[axis:] if axis >= 0 else x[len(x) + axis:]
    # The scale/bias may broadcast over the normalized dims.
    sc = [1 if d.chance(0.15) else v for v in inner]
    inputs = [d.inp("X", t, x, {"kind": "normal", "scale": 3, "shift": 1}), d.tensor("Scale", t, sc, p_const=0.6)]
    if d.chance(0.7):
        inputs.append(d.tensor("B", t, sc, p_const=0.6))
    outputs = 3 if t == "float32" and d.chance(0.2) else 1
    return make_spec("LayerNormalization", opset, inputs, attrs, outputs=outputs)


@register("GroupNormalization", FLOATS, opsets=(21,))
def gen_group_norm(d, types, opset):
    t = d.dtype(types)
    groups = d.int(1, 3)
    x = [d.int(1, 2), groups * d.int(1, 3)] + _at_least_two(d, d.int(1, 2), 6)
    attrs = {"num_groups": groups}
    _eps(d, attrs)
    # onnxruntime runs the opset-21 function body, which normalizes in float32 (stash_type 1).
    extra = {"tol": "float32"} if t == "float64" else {}
    return make_spec("GroupNormalization", opset,
                     [d.inp("X", t, x, {"kind": "normal", "scale": 2}), d.tensor("scale", t, [x[1]]),
                      d.tensor("bias", t, [x[1]])], attrs, **extra)


@register("LpNormalization", FLOATS, opsets=(1,))
def gen_lp_norm(d, types, opset):
    t = d.dtype(types)
    x = d.shape(1, 4)
    return make_spec("LpNormalization", opset, [d.inp("X", t, x)],
                     {"axis": d.int(-len(x), len(x) - 1), "p": d.pick([1, 2])})


# float16/float64 left out: ONNX's function body of the op fails shape inference for them.
@register("MeanVarianceNormalization", ["float32"], opsets=(13,))
def gen_mvn(d, types, opset):
    t = d.dtype(types)
    x = [d.int(1, 3), d.int(2, 4)] + d.dims(2, 2, 6)
    # Always explicit axes: ONNX's function body for the default fails its own shape inference.
    attrs = {"axes": d.pick([[0, 2, 3], [2, 3], [1], [0, 1, 2, 3], [1, 3]])}
    return make_spec("MeanVarianceNormalization", opset, [d.inp("X", t, x, {"kind": "normal", "scale": 2})], attrs)


@register("LRN", FLOATS, opsets=(13,))
def gen_lrn(d, types, opset):
    t = d.dtype(types)
    x = [d.int(1, 2), d.int(1, 8), d.int(1, 5), d.int(1, 5)]
    attrs = {"size": d.pick([1, 3, 5])}  # onnxruntime takes odd sizes only
    for key, vals in (("alpha", [1e-4, 0.01, 0.5]), ("beta", [0.75, 0.5, 1.0]), ("bias", [1.0, 2.0, 0.5])):
        if d.chance(0.6):
            attrs[key] = d.pick(vals)
    return make_spec("LRN", opset, [d.inp("X", t, x, {"kind": "normal", "scale": 2})], attrs)


# --- Resize, GridSample, DepthToSpace -----------------------------------------------------------

SCALES = [0.5, 0.6, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0]


@register("Resize", ["float32", "float16", "float64", "int32", "int64", "uint8", "int8"], opsets=(13, 19))
def gen_resize(d, types, opset):
    t = d.dtype(types, p_f32=0.7)
    mode = "nearest" if t not in FLOATS else d.pick(["nearest", "linear", "cubic"])
    if mode == "nearest":
        x = d.shape(1, 4, 1, 6)
        scaled_axes = [i for i in range(len(x)) if d.chance(0.6)] if len(x) < 3 else \
            list(range(len(x) - 2, len(x))) + [i for i in range(len(x) - 2) if d.chance(0.2)]
    else:
        x = [d.int(1, 2), d.int(1, 3), d.size(1, 7, 30), d.size(1, 7, 30)]
        scaled_axes = [2, 3]
    ctms = ["half_pixel", "asymmetric", "pytorch_half_pixel", "align_corners"]
    if opset >= 19:
        ctms.append("half_pixel_symmetric")
    attrs = {"mode": mode}
    if d.chance(0.85):
        attrs["coordinate_transformation_mode"] = d.pick(ctms)
    if mode == "nearest" and d.chance(0.85):
        attrs["nearest_mode"] = d.pick(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
    if mode == "cubic":
        if d.chance(0.5):
            attrs["cubic_coeff_a"] = d.pick([-0.75, -0.5])
        if d.chance(0.4):
            attrs["exclude_outside"] = d.int(0, 1)
    inputs = [d.inp("X", t, x, d.int_dist(t) if t not in FLOATS else None, dyn=[0, 1])]
    # Modes that read the output length: onnxruntime takes the floored length, ONNX's reference
    # (and kiln) length * scale unrounded, so keep length * scale whole for them.
    whole = attrs.get("coordinate_transformation_mode") in ("align_corners", "pytorch_half_pixel",
                                                              "half_pixel_symmetric")
    if d.chance(0.5):
        scales = [1.0] * len(x)
        for a in scaled_axes:
            choices = [sv for sv in SCALES if int(x[a] * sv) >= 1 and (not whole or float(x[a] * sv).is_integer())]
            scales[a] = d.pick(choices)
        inputs += [Draw.absent(), d.const("scales", "float32", values=scales)]
    else:
        sizes = list(x)
        for a in scaled_axes:
            sizes[a] = d.int(1, 2 * x[a] + 1)
        inputs += [Draw.absent(), Draw.absent(), d.const("sizes", "int64", values=sizes)]
    return make_spec("Resize", opset, inputs, attrs)


@register("GridSample", FLOATS, opsets=(16,))
def gen_grid_sample(d, types, opset):
    t = d.dtype(types)
    n, c = d.int(1, 2), d.int(1, 3)
    h, w, ho, wo = d.int(1, 6), d.int(1, 6), d.int(1, 5), d.int(1, 5)
    attrs = {}
    if d.chance(0.8):
        attrs["mode"] = d.pick(["bilinear", "nearest", "bicubic"])
    if d.chance(0.8):
        attrs["padding_mode"] = d.pick(["zeros", "border", "reflection"])
    if d.chance(0.6):
        attrs["align_corners"] = d.int(0, 1)
    return make_spec("GridSample", opset, [d.inp("X", t, [n, c, h, w]),
                                           d.inp("grid", t, [n, ho, wo, 2], {"kind": "uniform", "low": -1.2,
                                                                               "high": 1.2})], attrs)


@register("DepthToSpace", ["float32", "float16", "float64", "int32", "int64", "uint8", "bool"], opsets=(13,))
def gen_depth_to_space(d, types, opset):
    t = d.dtype(types)
    b = d.int(1, 3)
    x = [d.int(1, 2), b * b * d.int(1, 3), d.int(1, 4), d.int(1, 4)]
    attrs = {"blocksize": b}
    if d.chance(0.7):
        attrs["mode"] = d.pick(["DCR", "CRD"])
    return make_spec("DepthToSpace", opset, [d.inp("X", t, x)], attrs)


@register("SpaceToDepth", ["float32", "float16", "float64", "int32", "int64", "uint8", "bool"], opsets=(13,))
def gen_space_to_depth(d, types, opset):
    t = d.dtype(types)
    b = d.int(1, 3)
    x = [d.int(1, 2), d.int(1, 3), b * d.int(1, 3), b * d.int(1, 3)]
    return make_spec("SpaceToDepth", opset, [d.inp("X", t, x)], {"blocksize": b})


# --- recurrent ---------------------------------------------------------------------------------

RNN_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _recurrent(name):
    def gen(d, types, opset):
        t = d.dtype(types, p_f32=0.7)
        gates = RNN_GATES[name]
        seq, batch, size, hidden = d.int(1, 5), d.int(1, 3), d.int(1, 5), d.int(1, 5)
        direction = d.pick(["forward", "reverse", "bidirectional"])
        dirs = 2 if direction == "bidirectional" else 1
        # layout 1 only in float32: its reference runs onnxruntime in layout 0, which has no
        # float64 LSTM (the type fallbacks do not apply there).
        layout = 1 if opset >= 14 and t == "float32" and d.chance(0.3) else 0
        attrs = {"hidden_size": hidden}
        if direction != "forward" or d.chance(0.3):
            attrs["direction"] = direction
        if layout:
            attrs["layout"] = layout
        if name == "GRU" and d.chance(0.5):
            attrs["linear_before_reset"] = d.int(0, 1)
        if d.chance(0.15):
            attrs["clip"] = d.pick([0.5, 2.0])
        x = [batch, seq, size] if layout else [seq, batch, size]
        w = {"kind": "normal", "scale": 0.5}
        inputs = [d.inp("X", t, x, dyn=[0, 1]),
                  d.tensor("W", t, [dirs, gates * hidden, size], w, p_const=0.8, dyn=False),
                  d.tensor("R", t, [dirs, gates * hidden, hidden], w, p_const=0.8, dyn=False)]
        optional = []
        if d.chance(0.6):
            optional.append(("B", d.const("B", t, shape=[dirs, 2 * gates * hidden], dist=w)))
        if d.chance(0.3):
            lens = [d.int(1, seq) for _ in range(batch)]
            optional.append(("sequence_lens", d.const("sequence_lens", "int32", values=lens)))
        state = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
        if d.chance(0.4):
            optional.append(("initial_h", d.tensor("initial_h", t, state, p_const=0.5, dyn=False)))
        if name == "LSTM":
            if d.chance(0.3):
                optional.append(("initial_c", d.tensor("initial_c", t, state, p_const=0.5, dyn=False)))
            if d.chance(0.2):
                optional.append(("P", d.const("P", t, shape=[dirs, 3 * hidden], dist=w)))
        order = ["B", "sequence_lens", "initial_h", "initial_c", "P"]
        present = dict(optional)
        last = max([order.index(k) for k in present], default=-1)
        inputs += [present.get(k, Draw.absent()) for k in order[:last + 1]]
        outputs = d.int(1, 3 if name == "LSTM" else 2)
        return make_spec(name, opset, inputs, attrs, outputs=outputs)

    return gen


for _op in RNN_GATES:
    register(_op, FLOATS, opsets=(14, 7))(_recurrent(_op))


# --- integer convolution, RoiAlign ----------------------------------------------------------------

@register("ConvInteger", ["uint8", "int8"], opsets=(10,))
def gen_conv_integer(d, types, opset):
    tx, tw = d.pick(types), d.pick(["uint8", "int8"])
    n_sp = d.pick([1, 2, 2])
    k, s, dil, eff, pads = _window(d, n_sp)
    group = d.pick([1, 1, 2])
    cin_g, cout_g = d.int(1, 3), d.int(1, 3)
    attrs = {"kernel_shape": k, "strides": s, "dilations": dil, "pads": pads}
    if group > 1:
        attrs["group"] = group
    full = {"uint8": {"kind": "int", "low": 0, "high": 256}, "int8": {"kind": "int", "low": -128, "high": 128}}
    x = [d.int(1, 2), group * cin_g] + _spatial(d, eff, pads, n_sp)
    inputs = [d.inp("x", tx, x, full[tx]), d.const("w", tw, shape=[group * cout_g, cin_g] + k, dist=full[tw])]
    if d.chance(0.6):
        inputs.append(d.const("x_zero_point", tx, values=d.int(0, 255) if tx == "uint8" else d.int(-128, 127)))
        if d.chance(0.5):
            inputs.append(d.const("w_zero_point", tw, values=d.int(0, 255) if tw == "uint8" else d.int(-128, 127)))
    return make_spec("ConvInteger", opset, inputs, attrs)


@register("RoiAlign", FLOATS, opsets=(16, 10))
def gen_roi_align(d, types, opset):
    t = d.dtype(types)
    n, c, h, w = d.int(1, 2), d.int(1, 3), d.int(2, 8), d.int(2, 8)
    scale = d.pick([1.0, 0.5, 0.25])
    r = d.int(1, 4)
    rng = np.random.default_rng(d.int(0, 2 ** 31))
    x1 = rng.uniform(-1, w / scale * 0.8, r)
    y1 = rng.uniform(-1, h / scale * 0.8, r)
    rois = np.stack([x1, y1, x1 + rng.uniform(0.5, w / scale, r), y1 + rng.uniform(0.5, h / scale, r)], axis=1)
    attrs = {"output_height": d.int(1, 4), "output_width": d.int(1, 4), "sampling_ratio": d.int(0, 2),
             "spatial_scale": scale}
    if opset >= 16 and d.chance(0.6):
        attrs["coordinate_transformation_mode"] = d.pick(["half_pixel", "output_half_pixel"])
    # mode 'max' left out: onnxruntime warns that its max-mode summation is incorrect, and ONNX's
    # reference evaluator disagrees with it (kiln follows onnxruntime there).
    return make_spec("RoiAlign", opset, [d.inp("X", t, [n, c, h, w]),
                                         d.const("rois", t, values=np.round(rois, 3)),
                                         d.const("batch_indices", "int64", values=rng.integers(0, n, r))], attrs)
