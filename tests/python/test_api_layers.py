"""Every layer helper and the remaining calls of the Python API on the CPU, each against numpy:
the helpers the tutorial test does not use (deconvolution, unary, matrix multiply, shuffle and its
dynamic form, concatenation, slice, gather, softmax, reduce, identity, cast, select, shape,
element-wise, the generic add_layer), network editing and inspection, user-managed context memory,
the context's controls and statistics, per-layer profiling, profiles and builder settings."""
import numpy as np
import pytest

import kiln

RNG = np.random.default_rng(11)


def run(net, inputs, profiles=(), **config_fields):
    config = kiln.BuilderConfig()
    for k, v in config_fields.items():
        setattr(config, k, v)
    for p in profiles:
        config.add_optimization_profile(p)
    engine = kiln.Runtime().deserialize(kiln.Builder().build_serialized_network(net, config))
    return kiln.Session(engine).run(inputs), engine


def out(net, tensor, name="y"):
    tensor.name = name
    net.mark_output(tensor)


def test_each_layer_helper_against_numpy():
    net = kiln.Network()
    a = net.add_input("a", kiln.float32, [2, 3, 4])
    b = net.add_input("b", kiln.float32, [2, 4, 5])
    idx = net.add_input("idx", kiln.int64, [2])
    av = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    bv = RNG.standard_normal((2, 4, 5)).astype(np.float32)
    iv = np.array([2, 0], np.int64)
    out(net, net.add_unary(a, kiln.UnaryOp.exp).get_output(0), "exp")
    out(net, net.add_matrix_multiply(a, False, b, False).get_output(0), "matmul")
    out(net, net.add_shuffle(a, first_transpose=[0, 2, 1], reshape=[2, 12]).get_output(0), "shuffle")
    shape_of_b = net.add_shape(b).get_output(0)
    out(net, net.add_shuffle_dynamic(net.add_identity(b).get_output(0), shape_of_b).get_output(0), "reshaped")
    out(net, net.add_concatenation([a, a], 1).get_output(0), "concat")
    out(net, net.add_slice(a, [0, 1], [2, 3], axes=[0, 1]).get_output(0), "slice")
    out(net, net.add_gather(a, idx, 2).get_output(0), "gather")
    out(net, net.add_softmax(a, 2).get_output(0), "softmax")
    out(net, net.add_reduce(a, kiln.ReduceOp.mean, [1], True).get_output(0), "mean")
    out(net, net.add_cast(a, kiln.int32).get_output(0), "cast")
    cond = net.add_elementwise(a, net.add_constant(np.zeros((1,), np.float32)).get_output(0), kiln.ElementWiseOp.greater)
    out(net, net.add_select(cond.get_output(0), a, net.add_unary(a, kiln.UnaryOp.neg).get_output(0)).get_output(0), "abs")
    out(net, net.add_elementwise(a, a, kiln.ElementWiseOp.sub).get_output(0), "zero")
    out(net, shape_of_b, "shape")
    generic = net.add_layer("Activation", [a], 1, {"kind": "leaky_relu", "alpha": 0.1}, "generic_leaky")
    out(net, generic.get_output(0), "leaky")
    net.validate()
    got, engine = run(net, {"a": av, "b": bv, "idx": iv})
    np.testing.assert_allclose(got["exp"], np.exp(av), rtol=1e-5)
    np.testing.assert_allclose(got["matmul"], av @ bv, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got["shuffle"], av.transpose(0, 2, 1).reshape(2, 12))
    np.testing.assert_array_equal(got["reshaped"], bv)
    np.testing.assert_array_equal(got["concat"], np.concatenate([av, av], 1))
    np.testing.assert_array_equal(got["slice"], av[0:2, 1:3])
    np.testing.assert_array_equal(got["gather"], av[:, :, iv])
    e = np.exp(av - av.max(2, keepdims=True))
    np.testing.assert_allclose(got["softmax"], e / e.sum(2, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(got["mean"], av.mean(1, keepdims=True), rtol=1e-5, atol=1e-6)
    assert got["cast"].dtype == np.int32
    np.testing.assert_array_equal(got["cast"], av.astype(np.int32))
    np.testing.assert_array_equal(got["abs"], np.abs(av))
    np.testing.assert_array_equal(got["zero"], np.zeros_like(av))
    np.testing.assert_array_equal(got["shape"], [2, 4, 5])
    np.testing.assert_allclose(got["leaky"], np.where(av > 0, av, 0.1 * av), rtol=1e-6)
    assert sorted(engine.output_names) == sorted(got)


def test_typed_helpers_of_the_other_layer_types():
    """The helpers added for every layer type of docs/layers.md: each builds the layer add_layer
    builds with the documented attributes, and a few run against numpy."""
    def pair(make_helper, layer_type, n_out, attrs, inputs):
        a, b = kiln.Network(), kiln.Network()
        la = make_helper(a, [a.add_input(name, dt, shape) for name, dt, shape in inputs])
        lb = b.add_layer(layer_type, [b.add_input(name, dt, shape) for name, dt, shape in inputs], n_out, attrs)
        assert la.type == lb.type == layer_type
        assert la.num_inputs == lb.num_inputs and la.num_outputs == lb.num_outputs == n_out
        assert la.attributes == lb.attributes, layer_type
        for i in range(la.num_outputs):
            a.mark_output(la.get_output(i))
        a.validate()

    x = [("x", kiln.float32, [2, 3, 4])]
    pair(lambda n, t: n.add_gemm(t[0], t[1], alpha=2.0, trans_b=True), "Gemm", 1,
         {"alpha": 2.0, "beta": 1.0, "trans_a": 0, "trans_b": 1}, [("a", kiln.float32, [2, 3]), ("b", kiln.float32, [4, 3])])
    pair(lambda n, t: n.add_split(t[0], 2, 2, [1, 3]), "Split", 2, {"axis": 2, "split": [1, 3]}, x)
    pair(lambda n, t: n.add_lrn(t[0], 3), "LRN", 1, {"size": 3, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}, x)
    pair(lambda n, t: n.add_arg_reduce(t[0], kiln.ArgReduceOp.max, axis=2), "ArgReduce", 1,
         {"op": "max", "axis": 2, "keep_dims": 1, "select_last_index": 0, "one_hot": 0}, x)
    pair(lambda n, t: n.add_trilu(t[0], upper=False), "Trilu", 1, {"upper": 0}, x)
    pair(lambda n, t: n.add_scatter(t[0], t[1], t[2], kiln.ScatterMode.nd, reduction=kiln.ScatterReductionKind.add),
         "Scatter", 1, {"mode": "nd", "axis": 0, "reduction": "add"},
         [("d", kiln.float32, [4]), ("i", kiln.int64, [2, 1]), ("u", kiln.float32, [2])])
    # Resize's inputs are x, scales, sizes: given scales, the layer has two.
    pair(lambda n, t: n.add_resize(t[0], scales=t[1], mode=kiln.InterpolationMode.linear), "Resize", 1,
         {"mode": "linear", "coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_floor",
          "cubic_coeff_a": -0.75, "exclude_outside": 0, "extrapolation_value": 0.0},
         [("x", kiln.float32, [1, 1, 2, 2]), ("s", kiln.float32, [4])])
    pair(lambda n, t: n.add_rnn([t[0], t[1], t[2], None], kiln.RNNCell.rnn, 5, ["tanh"]), "RNN", 2,
         {"cell": "rnn", "hidden_size": 5, "direction": "forward", "activations": ["tanh"], "clip": 0.0,
          "linear_before_reset": 0, "input_forget": 0, "layout": 0},
         [("X", kiln.float32, [3, 2, 4]), ("W", kiln.float32, [1, 5, 4]), ("R", kiln.float32, [1, 5, 5])])
    pair(lambda n, t: n.add_string_normalizer(t[0], kiln.CaseChangeAction.lower, stopwords=["a"]), "StringNormalizer", 2,
         {"case_change_action": "LOWER", "is_case_sensitive": 0, "stopwords": ["a"], "locale": ""},
         [("s", kiln.string, [3])])

    net = kiln.Network()
    a = net.add_input("a", kiln.float32, [2, 3, 4])
    m = net.add_input("m", kiln.float32, [4, 5])
    av = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    mv = RNG.standard_normal((4, 5)).astype(np.float32)
    out(net, net.add_trilu(a).get_output(0), "triu")
    out(net, net.add_arg_reduce(a, kiln.ArgReduceOp.max, axis=2, keep_dims=False).get_output(0), "argmax")
    parts = net.add_split(a, 2, 2, [1, 3])
    out(net, parts.get_output(0), "part0")
    out(net, parts.get_output(1), "part1")
    flat = net.add_shuffle(a, reshape=[6, 4]).get_output(0)
    out(net, net.add_gemm(flat, m, alpha=2.0).get_output(0), "gemm")
    got, _ = run(net, {"a": av, "m": mv})
    np.testing.assert_array_equal(got["triu"], np.triu(av))
    np.testing.assert_array_equal(got["argmax"], av.argmax(2))
    np.testing.assert_array_equal(got["part0"], av[:, :, :1])
    np.testing.assert_array_equal(got["part1"], av[:, :, 1:])
    np.testing.assert_allclose(got["gemm"], 2.0 * av.reshape(6, 4) @ mv, rtol=1e-5, atol=1e-5)


def test_deconvolution_against_numpy():
    net = kiln.Network()
    x = net.add_input("x", kiln.float32, [1, 2, 3, 3])
    w = RNG.standard_normal((2, 4, 2, 2)).astype(np.float32)
    out(net, net.add_deconvolution(x, 4, [2, 2], w, strides=[2, 2]).get_output(0))
    xv = RNG.standard_normal((1, 2, 3, 3)).astype(np.float32)
    y = run(net, {"x": xv})[0]["y"]
    expect = np.zeros((1, 4, 6, 6))
    for c in range(2):
        for i in range(3):
            for j in range(3):
                expect[0, :, 2 * i:2 * i + 2, 2 * j:2 * j + 2] += xv[0, c, i, j] * w[c]
    np.testing.assert_allclose(y, expect, rtol=1e-5, atol=1e-5)


def test_network_editing_and_inspection():
    net = kiln.Network()
    x = net.add_input("x", kiln.float32, [2, 2])
    r = net.add_activation(x, kiln.ActivationType.relu)
    t = net.add_activation(x, kiln.ActivationType.tanh)
    r.name = "the_relu"
    assert net.find_layer("the_relu").type == "Activation" and net.find_tensor("x").is_network_input
    assert r.get_input(0).name == "x" and r.num_inputs == 1 and r.num_outputs == 1
    assert [c.name for c in x.consumers] == ["the_relu", t.name]
    assert r.get_output(0).producer.name == "the_relu"
    r.set_attribute("kind", "sigmoid")
    assert r.attributes["kind"] == "sigmoid"
    net.mark_output(r.get_output(0))
    net.mark_output(t.get_output(0))
    net.unmark_output(t.get_output(0))
    net.remove_layer(t)
    assert net.num_layers == 1 and net.num_outputs == 1 and net.get_output(0).name == r.get_output(0).name
    assert "the_relu" in str(net)
    assert net.get_input(0).shape == (2, 2) and net.get_layer(0).name == "the_relu"
    y = run(net, {"x": np.array([[0.0, 1.0], [-1.0, 2.0]], np.float32)})[0][r.get_output(0).name]
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-np.array([[0.0, 1.0], [-1.0, 2.0]]))), rtol=1e-6)
    bad = kiln.Network()
    bx = bad.add_input("x", kiln.float32, [2])
    broken = bad.add_layer("Activation", [bx], 1, {"kind": "relu", "no_such_attribute": 1}, "broken")
    bad.mark_output(broken.get_output(0))
    with pytest.raises(kiln.Error, match="broken"):
        bad.validate()
    r.precision = kiln.float32
    assert r.precision == kiln.float32


def test_user_managed_memory_controls_stats_and_profiling():
    net = kiln.Network()
    x = net.add_input("x", kiln.float32, [-1, 8])
    h = net.add_activation(x, kiln.ActivationType.relu).get_output(0)
    out(net, net.add_activation(h, kiln.ActivationType.tanh).get_output(0))
    p = kiln.OptimizationProfile()
    p.set_shape("x", [1, 8], [2, 8], [4, 8])
    assert p.get_shape("x") == ((1, 8), (2, 8), (4, 8)) and p.to_dict()["x"]["max"] == (4, 8)
    config = kiln.BuilderConfig()
    config.add_optimization_profile(p)
    builder = kiln.Builder()
    engine = kiln.Runtime().deserialize(builder.build_serialized_network(net, config))
    assert builder.last_report.layers_after >= 1 and builder.last_report.build_seconds >= 0
    assert engine.num_optimization_profiles == 1 and engine.get_profile(0).get_shape("x")[2] == (4, 8)
    assert engine.activation_peak_bytes(0) >= 0  # relu and tanh fuse: no intermediate tensor
    size = engine.device_memory_size(0)
    ctx = engine.create_execution_context(user_managed_memory=True)
    memory = np.zeros(size + 256, np.uint8)
    aligned = (memory.ctypes.data + 255) // 256 * 256
    ctx.set_device_memory(aligned, size)
    ctx.shape_cache_size = 4
    ctx.graph_cache_size = 2
    ctx.num_threads = 1
    ctx.concat_elision = False
    ctx.profiling = True
    ctx.thread_adaptation = False
    assert (ctx.shape_cache_size, ctx.graph_cache_size, ctx.num_threads, ctx.concat_elision) == (4, 2, 1, False)
    assert ctx.thread_adaptation is False
    assert ctx.optimization_profile == 0
    for batch in (1, 3, 1, 3):
        xv = RNG.standard_normal((batch, 8)).astype(np.float32)
        y = np.empty((batch, 8), np.float32)
        ctx.set_tensor("x", xv)
        ctx.set_tensor("y", y)
        ctx.execute()
        np.testing.assert_allclose(y, np.tanh(np.maximum(xv, 0)), rtol=1e-6)
    stats = ctx.stats
    assert stats["inferences"] == 4 and stats["shape_plans_built"] == 2 and stats["shape_plan_hits"] >= 2
    assert stats["thread_reductions"] == 0 and stats["thread_restorations"] == 0
    assert "Activation" in ctx.profile_report() and ctx.layer_profile()[0]["runs"] >= 4
    ctx.reset_stats()
    assert ctx.stats["inferences"] == 0
    with pytest.raises(kiln.Error):
        ctx.set_device_memory(aligned, 16)  # too small


def test_builder_settings_and_errors():
    assert "fold_constants" in " ".join(kiln.builder_pass_names()) or len(kiln.builder_pass_names()) >= 5
    config = kiln.BuilderConfig()
    config.fp16, config.memory_limit, config.num_threads, config.verbose = False, 1 << 30, 2, False
    config.time_tactics, config.disable_optimizations = False, False
    config.disabled_passes = ["nosuch_pass"]
    net = kiln.Network()
    x = net.add_input("x", kiln.float32, [2])
    out(net, net.add_identity(x).get_output(0))
    with pytest.raises(kiln.Error, match="nosuch_pass"):
        kiln.Builder().build_serialized_network(net, config)
    config.disabled_passes = []
    config.memory_limit = 1
    big = kiln.Network()
    bx = big.add_input("x", kiln.float32, [64, 64])
    w = big.add_constant(np.ones((64, 64), np.float32)).get_output(0)
    h = big.add_matrix_multiply(bx, False, w, False).get_output(0)  # an intermediate of 16 KiB
    out(big, big.add_matrix_multiply(h, False, w, False).get_output(0))
    with pytest.raises(kiln.Error, match="memory"):
        kiln.Builder().build_serialized_network(big, config)
    kiln.set_log_severity(kiln.Severity.error)
    kiln.set_log_severity(kiln.Severity.warning)
    assert kiln.data_type_size(kiln.float16) == 2


def test_builder_optimization_level_and_workspace_limit():
    config = kiln.BuilderConfig()
    assert config.optimization_level == 3 and config.workspace_limit == 0
    net = kiln.Network()
    x = net.add_input("x", kiln.float32, [2])
    out(net, net.add_identity(x).get_output(0))
    builder = kiln.Builder()
    config.optimization_level, config.workspace_limit = 0, 1 << 20
    assert len(builder.build_serialized_network(net, config)) > 0
    report = builder.last_report
    assert report.optimization_level == 0 and report.tactics_timed == 0 and report.workspace_bytes == 0
    assert report.layers_reused == 0 and report.tactics_stopped_early == 0 and report.tactics_over_workspace == 0
    assert report.level5_layers_differing == -1 and not report.level3_kernels_kept  # the check is level 5's
    # Level 5 checks the whole engine against level 3's kernels; an identity has nothing to choose.
    config.optimization_level = 5
    assert len(builder.build_serialized_network(net, config)) > 0
    report = builder.last_report
    assert report.level5_layers_differing == 0 and report.level5_engine_ms == 0.0 and report.level3_engine_ms == 0.0
    assert report.level5_check_seconds >= 0.0
    config.optimization_level = 6
    with pytest.raises(kiln.Error, match="0..5"):
        builder.build_serialized_network(net, config)
