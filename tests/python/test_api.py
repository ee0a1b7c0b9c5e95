"""The Python package's API on the CPU (docs/python.md): a network built by hand against a numpy
reference, ONNX import with one-pass unsupported-node reports, the plugin workflow of the
TensorRT tutorials (library, creator, typed fields, add_plugin, build, save, load, run), plugins
written in Python (in networks, the ONNX fallback, check_plugin, engines loaded with and without
the trust flag), arrays bound in place, errors with the C++ messages, the logger routed to
Python's logging, threads running in parallel with the GIL released, and no leaks over 10,000
calls. Run by ctest (python_api) with PYTHONPATH=<build>/python."""
import gc
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import kiln
import kiln.plugin as kp

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(7)


def build(net, profiles=(), device=kiln.DeviceType.cpu):
    config = kiln.BuilderConfig()
    config.device = device
    for p in profiles:
        config.add_optimization_profile(p)
    return kiln.Builder().build_serialized_network(net, config)


def conv2d(x, w, b, pad):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((n, o, h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1), np.float64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i:i + out.shape[2], j:j + out.shape[3]]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out + b[None, :, None, None]


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# ---- the tutorial network, built by hand --------------------------------------------------

def tutorial_network(with_plugin=None):
    """Conv -> Scale (a folded BatchNorm) -> ReLU -> max pool -> [plugin] -> fully connected."""
    w = RNG.standard_normal((6, 3, 3, 3)).astype(np.float32) * 0.3
    b = RNG.standard_normal(6).astype(np.float32) * 0.1
    gamma, beta = RNG.uniform(0.5, 1.5, 6), RNG.standard_normal(6) * 0.1
    mean, var = RNG.standard_normal(6) * 0.1, RNG.uniform(0.5, 2.0, 6)
    scale = (gamma / np.sqrt(var + 1e-5)).astype(np.float32)
    shift = (beta - mean * scale).astype(np.float32)
    fc_w = RNG.standard_normal((5, 6 * 4 * 4)).astype(np.float32) * 0.1
    fc_b = RNG.standard_normal(5).astype(np.float32)
    net = kiln.Network()
    x = net.add_input("x", kiln.float32, [-1, 3, 8, 8])
    conv = net.add_convolution(x, 6, [3, 3], w, bias=b, padding=[1, 1])
    bn = net.add_scale(conv.get_output(0), kiln.ScaleMode.channel, shift=shift, scale=scale)
    relu = net.add_activation(bn.get_output(0), kiln.ActivationType.relu)
    pool = net.add_pooling(relu.get_output(0), kiln.PoolingType.max, window_size=[2, 2], strides=[2, 2])
    t = pool.get_output(0)
    if with_plugin is not None:
        t = net.add_plugin([t], with_plugin, "tswish").get_output(0)
    fc = net.add_fully_connected(t, 5, fc_w, bias=fc_b)
    fc.get_output(0).name = "y"
    net.mark_output(fc.get_output(0))

    def reference(xv, temperature=None):
        h = conv2d(xv.astype(np.float64), w, b, 1)
        h = h * scale[None, :, None, None] + shift[None, :, None, None]
        h = np.maximum(h, 0)
        n = h.shape[0]
        h = h.reshape(n, 6, 4, 2, 4, 2).max(axis=(3, 5))
        if temperature is not None:
            h = h * sigmoid(temperature * h)
        return h.reshape(n, -1) @ fc_w.T.astype(np.float64) + fc_b

    return net, reference


def batch_profile(lo=1, opt=2, hi=4):
    p = kiln.OptimizationProfile()
    p.set_shape("x", [lo, 3, 8, 8], [opt, 3, 8, 8], [hi, 3, 8, 8])
    return p


def test_hand_built_network_matches_numpy_at_two_batches(tmp_path):
    net, ref = tutorial_network()
    assert [layer.type for layer in net.layers][-1] == "Gemm" or net.num_layers >= 5
    data = build(net, [batch_profile()])
    path = tmp_path / "tutorial.kiln"
    path.write_bytes(data)
    engine = kiln.Runtime().load(str(path))
    assert engine.input_names == ["x"] and engine.output_names == ["y"]
    assert engine.get_tensor_info("x").shape == (-1, 3, 8, 8)
    ctx = engine.create_execution_context()
    for batch in (3, 1):
        xv = RNG.standard_normal((batch, 3, 8, 8)).astype(np.float32)
        ctx.set_tensor("x", xv)
        assert ctx.get_tensor_shape("y") == (batch, 5)
        y = np.full((batch, 5), np.nan, np.float32)
        ctx.set_tensor("y", y)
        ctx.execute()
        np.testing.assert_allclose(y, ref(xv), rtol=1e-4, atol=1e-4)


def test_engine_inspect_and_describe():
    net, _ = tutorial_network()
    engine = kiln.Runtime().deserialize(build(net, [batch_profile()]))
    info = engine.inspect()
    assert info["device"] == "cpu"
    assert info["inputs"][0] == {"name": "x", "dtype": "float32", "shape": (-1, 3, 8, 8), "format": "linear"}
    assert info["profiles"][0]["x"] == {"min": (1, 3, 8, 8), "opt": (2, 3, 8, 8), "max": (4, 3, 8, 8)}
    types = [layer["type"] for layer in info["layers"]]
    assert "Convolution" in types and "Pooling" in types
    assert all(layer["kernel"] for layer in info["layers"] if layer["type"] == "Convolution")
    assert "Convolution" in engine.describe()


def test_compiled_plan_settings_and_the_runtime_opt_in():
    config = kiln.BuilderConfig()
    assert config.embed_compiled_plans is True and config.compiled_plans_every_batch is False
    config.compiled_plans_every_batch = True
    assert config.compiled_plans_every_batch is True
    assert kiln.Runtime().allow_compiled_plans is False
    runtime = kiln.Runtime(allow_compiled_plans=True)
    assert runtime.allow_compiled_plans is True
    runtime.allow_compiled_plans = False
    assert runtime.allow_compiled_plans is False
    # A CPU engine carries no compiled plans: the build says so and either runtime runs it.
    net, _ = tutorial_network()
    builder = kiln.Builder()
    config.add_optimization_profile(batch_profile())
    data = builder.build_serialized_network(net, config)
    assert builder.last_report.compiled_plans == 0 and builder.last_report.compiled_plan_bytes == 0
    assert kiln.Runtime(allow_compiled_plans=True).deserialize(data).inspect()["device"] == "cpu"


# ---- the plugin workflow: registry, creator, typed fields --------------------------------

def test_plugin_workflow_with_the_registry(tmp_path):
    registry = kiln.plugin_registry()
    names = [c.name for c in registry.plugin_creator_list]
    assert "TemperatureSwish" in names
    creator = registry.get_creator("TemperatureSwish", "1", "")
    assert creator is not None and registry.get_creator("NoSuchPlugin") is None
    schema = {f.name: f for f in creator.field_names}
    assert schema["temperature"].type == kiln.PluginFieldType.float32
    fields = kiln.PluginFieldCollection([kiln.PluginField("temperature", np.array([0.75], np.float32))])
    plugin = creator.create_plugin("tswish", fields)
    assert plugin.type == "TemperatureSwish" and plugin.fields["temperature"] == pytest.approx(0.75)
    net, ref = tutorial_network(with_plugin=plugin)
    data = build(net, [batch_profile()])
    (tmp_path / "e.kiln").write_bytes(data)
    sess = kiln.Session(str(tmp_path / "e.kiln"))
    xv = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(sess.run({"x": xv})["y"], ref(xv, temperature=0.75), rtol=1e-4, atol=1e-4)


def test_plugin_fields_are_checked_against_the_schema():
    creator = kiln.plugin_registry().get_creator("TemperatureSwish")
    with pytest.raises(kiln.Error, match="bogus"):
        creator.create("t", {"bogus": 1.0})
    with pytest.raises(kiln.Error, match="temperature"):
        creator.create("t", {"temperature": "hot"})
    # int64 and float64 values convert to the schema's float32.
    assert creator.create("t", {"temperature": 2}).fields["temperature"] == pytest.approx(2.0)


def test_load_plugin_library_reports_missing_files():
    with pytest.raises(kiln.Error, match="no_such_lib.so"):
        kiln.load_plugin_library("/nonexistent/no_such_lib.so")


# ---- ONNX ------------------------------------------------------------------------------------

def swish_model(op="TemperatureSwish", domain="custom", t=1.5):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    relu = helper.make_node("Relu", ["x"], ["r"], name="relu")
    sw = helper.make_node(op, ["r"], ["y"], name="act", domain=domain, temperature=t)
    graph = helper.make_graph([relu, sw], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)])


def test_onnx_parser_reports_every_unsupported_node(tmp_path):
    model = swish_model(op="NoKernelOp")
    model.graph.node.append(helper.make_node("AlsoUnknown", ["y"], ["z"], name="second", domain="custom"))
    model.graph.output[0].name = "z"
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    found = kiln.OnnxParser.check_file(str(path))
    assert [(u.op_type, u.domain, u.node_name) for u in found] == [("NoKernelOp", "custom", "act"), ("AlsoUnknown", "custom", "second")]
    with pytest.raises(kiln.ParseError, match="NoKernelOp") as e:
        kiln.OnnxParser(kiln.Network()).parse_from_file(str(path))
    assert "AlsoUnknown" in str(e.value)


def test_session_from_onnx_bytes_with_a_builtin_plugin_and_a_dynamic_batch():
    sess = kiln.Session(swish_model().SerializeToString())
    for n in (1, 5):
        xv = RNG.standard_normal((n, 4)).astype(np.float32)
        r = np.maximum(xv, 0)
        np.testing.assert_allclose(sess.run({"x": xv})["y"], r * sigmoid(1.5 * r), rtol=1e-5, atol=1e-6)
    with pytest.raises(kiln.Error, match="missing input"):
        sess.run({})
    with pytest.raises(kiln.Error, match="unknown input"):
        sess.run({"x": np.zeros((1, 4), np.float32), "q": 1})


# ---- plugins written in Python --------------------------------------------------------------

@kp.register("PyScaledGate", dtypes=("float32",))
def scaled_gate(a, b, *, alpha: float = 1.0, mode: int = 0):
    """y = a * sigmoid(b) * alpha (mode 0) or a * sigmoid(b) (mode 1), a and b broadcast."""
    return kp.broadcast(a, b)


@scaled_gate.impl("cpu")
def _scaled_gate_cpu(a, b, y, *, alpha, mode):
    g = a * (1.0 / (1.0 + np.exp(-b)))
    y[...] = g * alpha if mode == 0 else g


@kp.register("PyPairRows", dtypes=("float32",), num_outputs=2, output_dtypes=lambda types: [types[0], kiln.int64])
def pair_rows(x):
    """Two outputs: x with rows doubled (2N x C), and x's row count as int64 (shape [1])."""
    return [x[0] * 2, x[1]], [1]


@pair_rows.impl("cpu")
def _pair_rows_cpu(x, y, n):
    y[...] = np.concatenate([x, x])
    n[0] = x.shape[0]


def gate_network(alpha=2.0, mode=0):
    net = kiln.Network()
    a = net.add_input("a", kiln.float32, [-1, 4])
    b = net.add_input("b", kiln.float32, [1, 4])
    layer = net.add_plugin([a, b], scaled_gate.create("gate", alpha=alpha, mode=mode), "gate")
    layer.get_output(0).name = "y"
    net.mark_output(layer.get_output(0))
    p = kiln.OptimizationProfile()
    p.set_shape("a", [1, 4], [2, 4], [8, 4])
    return net, p


def test_python_plugin_in_a_network_at_two_batches():
    net, p = gate_network(alpha=2.0)
    sess = kiln.Session(kiln.Runtime().deserialize(build(net, [p])))
    bv = RNG.standard_normal((1, 4)).astype(np.float32)
    for n in (3, 6):
        av = RNG.standard_normal((n, 4)).astype(np.float32)
        y = sess.run({"a": av, "b": bv})["y"]
        assert y.shape == (n, 4)
        np.testing.assert_allclose(y, av * sigmoid(bv) * 2.0, rtol=1e-6)


def test_python_plugin_shape_function_sees_constants_and_symbols():
    seen = {}

    @kp.register("PyShapeProbe", dtypes=("float32",), replace=True)
    def probe(x):
        seen["dims"] = [d if isinstance(d, int) else repr(d) for d in x]
        return [x[0], x[1] * 2]

    @probe.impl("cpu")
    def _(x, y):
        y[...] = np.concatenate([x, x], axis=1)

    net = kiln.Network()
    x = net.add_input("x", kiln.float32, [-1, 3])
    layer = net.add_plugin([x], probe.create(), "probe")
    net.mark_output(layer.get_output(0))
    p = kiln.OptimizationProfile()
    p.set_shape("x", [1, 3], [2, 3], [4, 3])
    engine = kiln.Runtime().deserialize(build(net, [p]))
    assert seen["dims"][1] == 3 and isinstance(seen["dims"][0], str), seen
    out = kiln.Session(engine).run({"x": np.ones((2, 3), np.float32)})
    assert list(out.values())[0].shape == (2, 6)


def test_python_plugin_with_two_outputs_and_its_own_output_types():
    net = kiln.Network()
    x = net.add_input("x", kiln.float32, [-1, 3])
    layer = net.add_plugin([x], pair_rows.create(), "pairs")
    layer.get_output(0).name = "rows"
    layer.get_output(1).name = "count"
    net.mark_output(layer.get_output(0))
    net.mark_output(layer.get_output(1))
    p = kiln.OptimizationProfile()
    p.set_shape("x", [1, 3], [2, 3], [4, 3])
    sess = kiln.Session(kiln.Runtime().deserialize(build(net, [p])))
    xv = RNG.standard_normal((3, 3)).astype(np.float32)
    out = sess.run({"x": xv})
    np.testing.assert_array_equal(out["rows"], np.concatenate([xv, xv]))
    assert out["count"].dtype == np.int64 and out["count"].tolist() == [3]


def test_python_plugin_through_the_onnx_fallback_and_plugin_check():
    sess = kiln.Session(_gate_onnx_model().SerializeToString())
    av = RNG.standard_normal((2, 4)).astype(np.float32)
    bv = RNG.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(sess.run({"a": av, "b": bv})["y"], av * sigmoid(bv) * 0.5, rtol=1e-6)
    report = kp.check("PyScaledGate", fields={"alpha": 0.5})
    assert report["passed"], [c for c in report["checks"] if c["status"] == "FAIL"]
    assert report["num_inputs"] == 2 and len(report["checks"]) > 5


def _gate_onnx_model():
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 4])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    node = helper.make_node("PyScaledGate", ["a", "b"], ["y"], name="gate", domain="custom", alpha=0.5, mode=0)
    return helper.make_model(helper.make_graph([node], "g", [a, b], [y]),
                             opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)])


def test_a_failing_python_kernel_names_the_layer_and_the_python_error():
    @kp.register("PyBroken", dtypes=("float32",), replace=True)
    def broken(x):
        return x

    @broken.impl("cpu")
    def _(x, y):
        raise ValueError("indices must be sorted")

    net = kiln.Network()
    x = net.add_input("x", kiln.float32, [2, 2])
    layer = net.add_plugin([x], broken.create(), "broken_layer")
    net.mark_output(layer.get_output(0))
    sess = kiln.Session(kiln.Runtime().deserialize(build(net)))
    with pytest.raises(kiln.Error, match="broken_layer") as e:
        sess.run({"x": np.zeros((2, 2), np.float32)})
    assert "indices must be sorted" in str(e.value)
    sess.context.set_tensor("x", np.zeros((2, 2), np.float32))  # the context stays usable


def test_python_plugin_fields_must_be_annotated():
    with pytest.raises(TypeError, match="annotate"):
        @kp.register("PyBadField")
        def bad(x, *, weird: dict = None):
            return x


PLUGIN_MODULE = '''
import numpy as np
import kiln.plugin as kp

@kp.register("PyAddOne", dtypes=("float32",))
def add_one(x):
    return x

@add_one.impl("cpu")
def _(x, y):
    y[...] = x + 1
'''


def test_engines_with_python_plugins_import_their_module_only_when_trusted(tmp_path):
    (tmp_path / "my_plugins.py").write_text(PLUGIN_MODULE)
    script = f'''
import sys, numpy as np, kiln
sys.path.insert(0, {str(tmp_path)!r})
mode = sys.argv[1]
if mode == "build":
    import my_plugins
    net = kiln.Network()
    x = net.add_input("x", kiln.float32, [2, 3])
    l = net.add_plugin([x], my_plugins.add_one.create(), "add_one")
    l.get_output(0).name = "y"
    net.mark_output(l.get_output(0))
    open({str(tmp_path / "e.kiln")!r}, "wb").write(kiln.Builder().build_serialized_network(net, kiln.BuilderConfig()))
elif mode == "untrusted":
    try:
        kiln.Runtime().load({str(tmp_path / "e.kiln")!r})
    except kiln.Error as e:
        print("ERROR:", e)
else:
    s = kiln.Session({str(tmp_path / "e.kiln")!r}, allow_python_plugins=True)
    print("Y:", s.run({{"x": np.zeros((2, 3), np.float32)}})["y"].tolist())
'''
    env = dict(os.environ)
    run = lambda mode: subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True, env=env, timeout=120)
    r = run("build")
    assert r.returncode == 0, r.stderr
    r = run("untrusted")
    assert "ERROR:" in r.stdout and "my_plugins" in r.stdout and "allow_python_plugins" in r.stdout, r.stdout + r.stderr
    r = run("trusted")
    assert "Y: [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]" in r.stdout, r.stdout + r.stderr


# ---- arrays, errors, logging --------------------------------------------------------------

def test_set_tensor_binds_in_place_and_checks_what_it_gets():
    net, p = gate_network()
    engine = kiln.Runtime().deserialize(build(net, [p]))
    ctx = engine.create_execution_context()
    a = np.ones((2, 4), np.float32)
    ctx.set_tensor("a", a)
    assert ctx.get_tensor_address("a") == a.ctypes.data  # no copy
    with pytest.raises(kiln.Error, match="element type float64"):
        ctx.set_tensor("a", np.ones((2, 4)))
    with pytest.raises(kiln.Error, match="not contiguous"):
        ctx.set_tensor("a", np.ones((4, 8), np.float32)[:, ::2])
    with pytest.raises(kiln.Error, match=r"\[1, 8\]|1x4|8x4|profile"):
        ctx.set_tensor("a", np.ones((9, 4), np.float32))
    with pytest.raises(kiln.Error, match="'nope'"):
        ctx.set_tensor("nope", a)
    with pytest.raises(kiln.Error, match="shape"):
        ctx.set_tensor("y", np.ones((3, 4), np.float32))
    ro = np.ones((2, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(kiln.Error, match="read-only"):
        ctx.set_tensor("y", ro)
    with pytest.raises(kiln.Error, match="must be an array"):
        ctx.set_tensor("a", "text")


def test_engine_format_errors_arrive_as_python_exceptions():
    with pytest.raises(kiln.EngineFormatError, match="not a kiln engine"):
        kiln.Runtime().deserialize(b"garbage" * 20)
    assert issubclass(kiln.EngineFormatError, kiln.Error) and issubclass(kiln.Error, RuntimeError)


def test_logging_routes_to_python(caplog):
    logger = kiln.route_logging_to_python("kiln.test")
    try:
        with caplog.at_level(logging.INFO, logger="kiln.test"):
            kiln._kiln._log(kiln.Severity.warning, "a warning from C++")
            kiln._kiln._log(kiln.Severity.verbose, "too detailed")
        messages = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "kiln.test"]
        assert (logging.WARNING, "a warning from C++") in messages
        assert all(m != "too detailed" for _, m in messages)
        assert logger.name == "kiln.test"
    finally:
        kiln.set_log_callback(None)


# ---- threads, leaks -------------------------------------------------------------------------

def heavy_network():
    net = kiln.Network()
    x = net.add_input("x", kiln.float32, [1, 16, 32, 32])
    t = x
    for i in range(6):
        w = RNG.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.1
        t = net.add_convolution(t, 16, [3, 3], w, padding=[1, 1]).get_output(0)
        t = net.add_activation(t, kiln.ActivationType.tanh).get_output(0)
    t.name = "y"
    net.mark_output(t)
    config = kiln.BuilderConfig()
    config.num_threads = 1
    return kiln.Runtime().deserialize(kiln.Builder().build_serialized_network(net, config))


def test_threads_run_in_parallel_with_identical_results():
    engine = heavy_network()
    xv = RNG.standard_normal((1, 16, 32, 32)).astype(np.float32)
    expect = kiln.Session(engine).run({"x": xv})["y"]
    results, errors = {}, []

    def worker(i):
        try:
            s = kiln.Session(engine, threads=1)
            for _ in range(20):
                out = s.run({"x": xv})["y"]
            results[i] = out
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for out in results.values():
        np.testing.assert_array_equal(out, expect)
    # The GIL is released inside execute: another thread's Python code runs meanwhile.
    ctx = engine.create_execution_context()
    ctx.set_tensor("x", xv)
    ctx.set_tensor("y", np.empty_like(expect))
    ticks = [0]
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks[0] += 1

    th = threading.Thread(target=ticker)
    th.start()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.3:
        ctx.execute()
    stop.set()
    th.join()
    assert ticks[0] > 1000, f"only {ticks[0]} ticks: execute() held the GIL"


def test_no_leaks_over_10000_calls():
    net, p = gate_network()
    sess = kiln.Session(kiln.Runtime().deserialize(build(net, [p])))
    av, bv = np.ones((2, 4), np.float32), np.ones((1, 4), np.float32)
    for _ in range(200):
        sess.run({"a": av, "b": bv})
    gc.collect()
    objects_before = len(gc.get_objects())
    rss_before = _rss_kib()
    for _ in range(10000):
        sess.run({"a": av, "b": bv})
    gc.collect()
    grown = len(gc.get_objects()) - objects_before
    assert grown < 100, f"{grown} Python objects more after 10,000 calls"
    assert _rss_kib() - rss_before < 8 * 1024, "resident memory grew by more than 8 MiB over 10,000 calls"
    assert sys.getrefcount(av) < 10


def _rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_version_and_dtype_helpers():
    assert kiln.__version__ == kiln.version() and kiln.version().count(".") == 2
    assert kiln.dtype("float16") == kiln.float16 and kiln.dtype(np.dtype("int64")) == kiln.int64
    with pytest.raises(kiln.Error, match="complex"):
        kiln.dtype("complex64")
    assert kiln.parse_dims("1x3x224x224") == (1, 3, 224, 224)


def test_docs_python_md():
    """Every ```python block of docs/python.md runs, in order, in one namespace (```py blocks are illustrations)."""
    import re
    text = (Path(__file__).resolve().parents[2] / "docs" / "python.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    assert len(blocks) >= 3
    namespace = {}
    for i, code in enumerate(blocks):
        try:
            exec(compile(code, f"docs/python.md block {i}", "exec"), namespace)  # noqa: S102
        finally:
            kiln.set_log_callback(None)


def test_python_plugin_in_place_output_shares_its_inputs_memory():
    seen = []

    @kp.register("PyDoubleInPlace", dtypes=("float32",), in_place={0: 0}, replace=True)
    def double(x):
        return x

    @double.impl("cpu")
    def _(x, y):
        seen.append(x.ctypes.data == y.ctypes.data)
        np.multiply(x, 2, out=y)

    net = kiln.Network()
    x = net.add_input("x", kiln.float32, [4, 8])
    a = net.add_activation(x, kiln.ActivationType.relu).get_output(0)
    b = net.add_plugin([a], double.create(), "double").get_output(0)
    y = net.add_activation(b, kiln.ActivationType.tanh).get_output(0)
    y.name = "y"
    net.mark_output(y)
    xv = RNG.standard_normal((4, 8)).astype(np.float32)
    out = kiln.Session(kiln.Runtime().deserialize(build(net))).run({"x": xv})["y"]
    np.testing.assert_allclose(out, np.tanh(2 * np.maximum(xv, 0)), rtol=1e-6)
    assert seen == [True]


def test_every_public_function_and_class_has_a_docstring():
    import inspect
    missing = []
    for name in dir(kiln._kiln):
        if name.startswith("_"):
            continue
        obj = getattr(kiln._kiln, name)
        if inspect.isclass(obj):
            if not (obj.__doc__ or "").strip():
                missing.append(name)
            for attr, value in vars(obj).items():
                if attr.startswith("_") or isinstance(value, (int, property)) or not callable(value):
                    continue
                lines = [line for line in (value.__doc__ or "").splitlines() if line.strip()]
                if len(lines) <= 1:  # nanobind's first line is the signature
                    missing.append(f"{name}.{attr}")
        elif callable(obj):
            if len([line for line in (obj.__doc__ or "").splitlines() if line.strip()]) <= 1:
                missing.append(name)
    assert not missing, f"without a docstring: {missing}"


def test_tensorrt_style_logger_subclass():
    got = []

    class Collect(kiln.Logger):
        def log(self, severity, message):
            got.append((severity, message))

    kiln.set_logger(Collect(kiln.Severity.info))
    try:
        kiln._kiln._log(kiln.Severity.info, "built")
        kiln._kiln._log(kiln.Severity.verbose, "detail")
        kiln._kiln._log(kiln.Severity.error, "bad")
    finally:
        kiln.set_logger(None)
    assert got == [(kiln.Severity.info, "built"), (kiln.Severity.error, "bad")]
