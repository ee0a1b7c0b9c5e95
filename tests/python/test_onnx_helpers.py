"""Tests of kiln's ONNX helpers (python/kiln/onnx.py): unsupported_nodes, replace and compare.

The pattern replacement needs only onnx and onnx_graphsurgeon: it is tested with or without kiln's compiled
module, on the installed package when `import kiln.onnx` works (PYTHONPATH=<build>/python) and otherwise on the
source file python/kiln/onnx.py loaded by path. Tests that run kiln skip, with a reason, when the module is not
built. Tests on the real models use $KILN_TEST_MODELS_DIR or ../shared/models next to the repository and skip
when a model is absent.

    PYTHONPATH=build-cpu/python python3 -m pytest tests/python/test_onnx_helpers.py -q
"""
import importlib.util
import os
import pathlib
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

gs = pytest.importorskip("onnx_graphsurgeon")

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = pathlib.Path(os.environ.get("KILN_TEST_MODELS_DIR") or ROOT.parent / "shared" / "models")


def _load_helpers():
    """kiln.onnx when it is this repository's file (a build folder links to it), else python/kiln/onnx.py by path.

    By path, the helpers still find kiln's compiled module through `import kiln` when one is importable; an
    installed copy of kiln.onnx (pip install) is never what gets tested."""
    source = ROOT / "python" / "kiln" / "onnx.py"
    try:
        import kiln.onnx as module

        if pathlib.Path(module.__file__).resolve() == source.resolve():
            return module
    except ImportError:
        pass
    name = "kiln_onnx_source"
    spec = importlib.util.spec_from_file_location(name, source)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


konnx = _load_helpers()


@pytest.fixture
def kiln():
    """The kiln package with its compiled module; skips the test when the module is not built."""
    pytest.importorskip("kiln._kiln", reason="kiln's compiled module is not built (PYTHONPATH=<build>/python)")
    import kiln as package

    return package


def model_path(name):
    path = MODELS / name / "model.onnx"
    if not path.is_file():
        pytest.skip(f"test model {path} is absent (set KILN_TEST_MODELS_DIR)")
    return path


# ---- small models -------------------------------------------------------------------------

def make_model(nodes, inputs, outputs, initializers=(), domains=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    opsets = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def vinfo(name, shape=("N", 8), elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, list(shape))


def three_swishes():
    """x -> TSwish(t=0.5) -> y1 -> TSwish(t=2, every Mul swapped, t from a Constant node) -> y2 -> a third one whose
    Sigmoid output s3 is also read by an Add outside the pattern (must stay) -> out."""
    nodes = [
        helper.make_node("Mul", ["x", "t1"], ["a1"], name="mul_in_1"),
        helper.make_node("Sigmoid", ["a1"], ["s1"], name="sig_1"),
        helper.make_node("Mul", ["x", "s1"], ["y1"], name="swish_1"),
        helper.make_node("Constant", [], ["t2"], name="const_t2",
                         value=numpy_helper.from_array(np.array(2.0, np.float32))),
        helper.make_node("Mul", ["t2", "y1"], ["a2"], name="mul_in_2"),
        helper.make_node("Sigmoid", ["a2"], ["s2"], name="sig_2"),
        helper.make_node("Mul", ["s2", "y1"], ["y2"], name="swish_2"),
        helper.make_node("Mul", ["y2", "t3"], ["a3"], name="mul_in_3"),
        helper.make_node("Sigmoid", ["a3"], ["s3"], name="sig_3"),
        helper.make_node("Mul", ["y2", "s3"], ["y3"], name="swish_3"),
        helper.make_node("Add", ["y3", "s3"], ["out"], name="add_out"),
    ]
    inits = [numpy_helper.from_array(np.array(0.5, np.float32), "t1"),
             numpy_helper.from_array(np.array([1.5], np.float32), "t3")]
    return make_model(nodes, [vinfo("x")], [vinfo("out")], inits)


TSWISH = "Mul(x, Sigmoid(Mul(x, t:scalar)))"


def tswish_ref(x, temperature):
    return x / (1.0 + np.exp(-temperature * x))


def run_reference(model, feeds):
    """Runs a model with onnx's reference evaluator, which also knows custom::TemperatureSwish."""
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.op_run import OpRun

    class TemperatureSwish(OpRun):
        op_domain = "custom"

        def _run(self, x, temperature=None):
            return (tswish_ref(x, np.float32(temperature)).astype(x.dtype),)

    return ReferenceEvaluator(model, new_ops=[TemperatureSwish]).run(None, feeds)


def nodes_by_name(model):
    return {n.name: n for n in model.graph.node}


def attr(node, name):
    return helper.get_attribute_value(next(a for a in node.attribute if a.name == name))


# ---- replace ------------------------------------------------------------------------------

def test_replace_temperature_swish_matches_both_orders_and_skips_the_reused_one():
    model = three_swishes()
    before = onnx.ModelProto()
    before.CopyFrom(model)
    new, count = konnx.replace(model, TSWISH, "TemperatureSwish", {"temperature": konnx.const("t")},
                               domain="custom", return_count=True)
    assert count == 2
    assert model == before  # the input proto is not modified
    ops = sorted(n.op_type for n in new.graph.node)
    assert ops == ["Add", "Mul", "Mul", "Sigmoid", "TemperatureSwish", "TemperatureSwish"]
    by_name = nodes_by_name(new)
    # Names taken from the root nodes, the output tensor names kept, inputs = the non-constant variables.
    assert list(by_name["swish_1"].input) == ["x"] and list(by_name["swish_1"].output) == ["y1"]
    assert list(by_name["swish_2"].input) == ["y1"] and list(by_name["swish_2"].output) == ["y2"]
    assert by_name["swish_1"].domain == "custom" and by_name["swish_1"].op_type == "TemperatureSwish"
    assert attr(by_name["swish_1"], "temperature") == pytest.approx(0.5)
    assert attr(by_name["swish_2"], "temperature") == pytest.approx(2.0)
    # The third pattern stays whole: its Sigmoid output is read by the Add.
    assert {"mul_in_3", "sig_3", "swish_3", "add_out"} <= set(by_name)
    # Dead nodes and initializers are gone, the custom domain is imported.
    assert "const_t2" not in by_name and "mul_in_1" not in by_name
    assert [t.name for t in new.graph.initializer] == ["t3"]
    assert {(o.domain, o.version) for o in new.opset_import} == {("", 17), ("custom", 1)}
    # Same numbers as the original.
    x = np.linspace(-4, 4, 24, dtype=np.float32).reshape(3, 8)
    expected = run_reference(model, {"x": x})[0]
    got = run_reference(new, {"x": x})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    y2 = tswish_ref(tswish_ref(x, 0.5), 2.0)
    s3 = 1 / (1 + np.exp(-1.5 * y2))
    np.testing.assert_allclose(got, y2 * s3 + s3, rtol=1e-5)


def test_replace_result_is_topologically_sorted_and_valid():
    new = konnx.replace(three_swishes(), TSWISH, "TemperatureSwish", {"temperature": konnx.const("t")},
                        domain="custom")
    onnx.checker.check_model(new)
    seen = {"x"} | {t.name for t in new.graph.initializer}
    for node in new.graph.node:
        assert all(i in seen for i in node.input), f"node {node.name} reads a value before it is made"
        seen.update(node.output)


def test_replace_without_match_returns_the_model_unchanged():
    model = three_swishes()
    new, count = konnx.replace(model, "Mul(x, Tanh(x))", "Mish", return_count=True)
    assert count == 0 and new == model and new is not model
    assert konnx.replace(model, "Mul(x, Tanh(x))", "Mish") == model


def test_replace_requires_the_same_tensor_for_a_repeated_variable():
    nodes = [helper.make_node("Mul", ["w", "t"], ["a"]), helper.make_node("Sigmoid", ["a"], ["s"]),
             helper.make_node("Mul", ["x", "s"], ["y"])]
    model = make_model(nodes, [vinfo("x"), vinfo("w")], [vinfo("y")],
                       [numpy_helper.from_array(np.array(1.0, np.float32), "t")])
    _, count = konnx.replace(model, TSWISH, "TemperatureSwish", return_count=True)
    assert count == 0
    # With two variables the same graph matches, and the inputs follow the order of first appearance.
    new, count = konnx.replace(model, "Mul(x, Sigmoid(Mul(w, t:scalar)))", "Gate", return_count=True)
    assert count == 1 and list(new.graph.node[0].input) == ["x", "w"]


def test_replace_constant_variables_need_constants():
    nodes = [helper.make_node("Mul", ["t", "x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["s"]),
             helper.make_node("Mul", ["x", "s"], ["y"])]
    model = make_model(nodes, [vinfo("x"), vinfo("t", shape=[])], [vinfo("y")])
    assert konnx.replace(model, TSWISH, "TemperatureSwish", return_count=True)[1] == 0  # t is an input here
    # Without ':scalar', t is an ordinary input: it becomes the custom node's second input (x appears first).
    new, count = konnx.replace(model, "Mul(x, Sigmoid(Mul(x, t)))", "TSwish2", return_count=True)
    assert count == 1 and list(new.graph.node[0].input) == ["x", "t"]


def test_replace_scalar_versus_const_and_list_values():
    nodes = [helper.make_node("Mul", ["x", "t"], ["a"]), helper.make_node("Sigmoid", ["a"], ["s"]),
             helper.make_node("Mul", ["x", "s"], ["y"])]
    t = np.array([0.25, 0.5, 1.0, 2.0, 0.25, 0.5, 1.0, 2.0], np.float32)
    model = make_model(nodes, [vinfo("x")], [vinfo("y")], [numpy_helper.from_array(t, "t")])
    assert konnx.replace(model, TSWISH, "TemperatureSwish", return_count=True)[1] == 0  # 8 elements, not a scalar
    new = konnx.replace(model, "Mul(x, Sigmoid(Mul(x, t:const)))", "ChannelSwish", {"t": konnx.const("t")})
    assert attr(new.graph.node[0], "t") == pytest.approx(t.tolist())


def test_replace_attrs_callables_constants_and_where():
    model = three_swishes()
    seen = []

    def temperature(m):
        seen.append((m.root.name, [n.name for n in m.nodes], sorted(m.tensors)))
        return float(m.value("t")) * 10

    new, count = konnx.replace(model, TSWISH, "TemperatureSwish",
                               {"temperature": temperature, "plugin_version": "1", "tag": 7},
                               domain="custom", name_prefix="ts", where=lambda m: m.value("t") > 1,
                               return_count=True)
    assert count == 1  # where() keeps only the t = 2 match
    assert seen == [("swish_2", ["swish_2", "sig_2", "mul_in_2"], ["t", "x"])]
    node = nodes_by_name(new)["ts_0"]
    assert attr(node, "temperature") == pytest.approx(20.0)
    assert attr(node, "plugin_version") == b"1" and attr(node, "tag") == 7
    assert "swish_1" in nodes_by_name(new)


def test_replace_skips_matches_whose_intermediates_escape():
    # The Sigmoid output is also a graph output: replacing would drop it.
    nodes = [helper.make_node("Mul", ["x", "t"], ["a"]), helper.make_node("Sigmoid", ["a"], ["s"]),
             helper.make_node("Mul", ["x", "s"], ["y"])]
    init = [numpy_helper.from_array(np.array(1.0, np.float32), "t")]
    model = make_model(nodes, [vinfo("x")], [vinfo("y"), vinfo("s")], init)
    assert konnx.replace(model, TSWISH, "TemperatureSwish", return_count=True)[1] == 0
    # The Sigmoid output is read inside an If branch (by name, from the outer scope).
    branch = helper.make_graph([helper.make_node("Identity", ["s"], ["o"])], "then", [], [vinfo("o")])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["o2"])], "else", [], [vinfo("o2")])
    nodes_if = nodes + [helper.make_node("If", ["c"], ["z"], then_branch=branch, else_branch=other)]
    model = make_model(nodes_if, [vinfo("x"), vinfo("c", [], TensorProto.BOOL)], [vinfo("y"), vinfo("z")], init)
    assert konnx.replace(model, TSWISH, "TemperatureSwish", return_count=True)[1] == 0


def test_replace_commutativity_is_only_for_commutative_ops():
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Sub", ["s", "x"], ["y"])]
    model = make_model(nodes, [vinfo("x")], [vinfo("y")])
    assert konnx.replace(model, "Sub(x, Sigmoid(x))", "A", return_count=True)[1] == 0
    assert konnx.replace(model, "Sub(Sigmoid(x), x)", "A", return_count=True)[1] == 1
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Add", ["s", "x"], ["y"])]
    model = make_model(nodes, [vinfo("x")], [vinfo("y")])
    assert konnx.replace(model, "Add(x, Sigmoid(x))", "A", return_count=True)[1] == 1


def test_replace_overlapping_matches_take_the_first_in_graph_order():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r1"), helper.make_node("Relu", ["a"], ["b"], name="r2"),
             helper.make_node("Relu", ["b"], ["c"], name="r3")]
    model = make_model(nodes, [vinfo("x")], [vinfo("c")])
    new, count = konnx.replace(model, "Relu(Relu(x))", "DoubleRelu", domain="custom", return_count=True)
    assert count == 1
    assert [(n.op_type, list(n.input), list(n.output)) for n in new.graph.node] == [
        ("DoubleRelu", ["x"], ["b"]), ("Relu", ["b"], ["c"])]


def test_replace_domain_qualified_ops_in_patterns():
    nodes = [helper.make_node("TemperatureSwish", ["x"], ["a"], domain="custom", temperature=1.0),
             helper.make_node("Neg", ["a"], ["y"])]
    model = make_model(nodes, [vinfo("x")], [vinfo("y")], domains=["custom"])
    assert konnx.replace(model, "Neg(TemperatureSwish(x))", "A", return_count=True)[1] == 0  # default domain
    new, count = konnx.replace(model, "Neg(custom::TemperatureSwish(x))", "NegSwish", domain="custom",
                               return_count=True)
    assert count == 1 and [n.op_type for n in new.graph.node] == ["NegSwish"]


def test_replace_accepts_paths_and_bytes(tmp_path):
    model = three_swishes()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    a = konnx.replace(str(path), TSWISH, "TemperatureSwish", {"temperature": konnx.const("t")}, domain="custom")
    b = konnx.replace(model.SerializeToString(), TSWISH, "TemperatureSwish", {"temperature": konnx.const("t")},
                      domain="custom")
    assert a == b and sum(n.op_type == "TemperatureSwish" for n in a.graph.node) == 2


@pytest.mark.parametrize("pattern, position, words", [
    ("Mul(x, Sigmoid(Mul(x, t))", 25, "expected ',' or ')' closing 'Mul(' opened at position 3"),
    ("Mul(x, Sigmoid(Mul(x t)))", 21, "expected ',' or ')'"),
    ("Mul(x, sigmoid(x))", 7, "op names start with an uppercase letter"),
    ("Mul(x, Sigmoid)", 14, "needs its inputs in parentheses"),
    ("Mul(x, t:constant)", 9, "unknown variable kind"),
    ("Mul(x, t:const, t:scalar)", 16, "declared 'const'"),
    ("Mul(x, 2)", 7, "expected an op"),
    ("Mul(x) + y", 7, "unexpected '+'"),
    ("x", 0, "root must be an op"),
    ("", 0, "empty"),
    ("Mul(t:const, t)", 0, "no input variable"),
])
def test_replace_rejects_malformed_patterns(pattern, position, words):
    with pytest.raises(ValueError) as err:
        konnx.replace(three_swishes(), pattern, "X")
    message = str(err.value)
    assert f"position {position}:" in message and words in message
    assert message.splitlines()[-1] == "  " + " " * position + "^"


def test_replace_attribute_values():
    table = np.arange(6, dtype=np.float32).reshape(2, 3)
    new = konnx.replace(three_swishes(), TSWISH, "T", {"s": np.float32(0.25), "v": np.array([1, 2]), "m": table})
    node = new.graph.node[0]
    assert attr(node, "s") == 0.25 and attr(node, "v") == [1, 2]
    np.testing.assert_array_equal(numpy_helper.to_array(attr(node, "m")), table)
    with pytest.raises(ValueError, match=r"attrs\['bad'\] for node 'swish_1' is \[1, 'a'\], which is not an ONNX"):
        konnx.replace(three_swishes(), TSWISH, "T", {"bad": [1, "a"]})


def test_replace_rejects_const_of_a_non_constant_variable():
    with pytest.raises(ValueError, match=r"attrs\['temperature'\] = const\('x'\).*not declared constant"):
        konnx.replace(three_swishes(), TSWISH, "TemperatureSwish", {"temperature": konnx.const("x")})
    with pytest.raises(ValueError, match="'u' is not a variable of the pattern"):
        konnx.replace(three_swishes(), TSWISH, "TemperatureSwish", {"temperature": konnx.const("u")})


def test_replace_silu_in_tinyyolo():
    model = onnx.load(model_path("tinyyolo_silu"))
    new, count = konnx.replace(model, "Mul(x, Sigmoid(x))", "TemperatureSwish", {"temperature": 1.0},
                               domain="custom", return_count=True)
    assert count == 57  # every activation; the decode head's 3 Sigmoids are not SiLUs
    ops = [n.op_type for n in new.graph.node]
    assert ops.count("TemperatureSwish") == 57 and ops.count("Sigmoid") == 3
    assert [o.name for o in new.graph.output] == [o.name for o in model.graph.output]


def test_replace_round_trip_on_tinyyolo_tswish():
    """Expands the 57 TemperatureSwish nodes into Mul/Sigmoid/Mul and folds them back with replace()."""
    model = onnx.load(model_path("tinyyolo_tswish"))
    graph = gs.import_onnx(model)
    for i, node in enumerate([n for n in graph.nodes if n.op == "TemperatureSwish"]):
        x, y = node.inputs[0], node.outputs[0]
        t = gs.Constant(f"temp_{i}", np.array(node.attrs["temperature"], np.float32))
        a, s = gs.Variable(f"a_{i}"), gs.Variable(f"s_{i}")
        node.inputs.clear()
        node.outputs.clear()
        graph.nodes += [gs.Node("Mul", inputs=[t, x], outputs=[a]), gs.Node("Sigmoid", inputs=[a], outputs=[s]),
                        gs.Node("Mul", inputs=[s, x], outputs=[y])]
    graph.cleanup().toposort()
    expanded = gs.export_onnx(graph)
    assert not any(n.op_type == "TemperatureSwish" for n in expanded.graph.node)
    folded, count = konnx.replace(expanded, TSWISH, "TemperatureSwish", {"temperature": konnx.const("t")},
                                  domain="custom", return_count=True)
    assert count == 57
    original = {n.output[0]: (list(n.input), attr(n, "temperature")) for n in model.graph.node
                if n.op_type == "TemperatureSwish"}
    again = {n.output[0]: (list(n.input), attr(n, "temperature")) for n in folded.graph.node
             if n.op_type == "TemperatureSwish"}
    assert again == original


# ---- compare's pure parts -----------------------------------------------------------------

def test_compare_statistics_of_one_tensor():
    out = np.array([1.0, 2.0, 0.0, np.nan], np.float32)
    ref = np.array([1.0, 2.002, 1e-6, np.nan], np.float32)
    t = konnx._compare_tensor("y", out, ref, atol=1e-5, rtol=1e-4, floor=1e-3)
    assert t.status == "FAIL" and not t.passed and t.note == "1 of 4 elements"
    assert t.max_abs == pytest.approx(0.002, rel=1e-3)
    assert t.max_rel == pytest.approx(1e-3, rel=1e-3)  # 1e-6 / floor 1e-3 beats 0.002 / 2.002
    assert t.mean_rel == pytest.approx((0.002 / 2.002 + 1e-3) / 4, rel=1e-3)
    assert t.frac_rel_above_1e5 == 0.5
    assert konnx._compare_tensor("y", out, ref, atol=1e-5, rtol=2e-3, floor=1e-3).passed
    nan = konnx._compare_tensor("y", np.array([np.nan, 1.0]), np.array([1.0, 1.0]), atol=1, rtol=1, floor=1e-3)
    assert nan.status == "FAIL" and "NaN" in nan.note
    shape = konnx._compare_tensor("y", np.zeros((2, 3)), np.zeros((3, 2)), atol=1, rtol=1, floor=1e-3)
    assert shape.status == "FAIL" and "shape" in shape.note
    scalar = konnx._compare_tensor("y", np.array(2.0), np.array(1.0), atol=1e-5, rtol=1e-4, floor=1e-3)
    assert scalar.status == "FAIL" and scalar.shape == () and scalar.max_abs == 1.0 and scalar.max_rel == 1.0
    inf = konnx._compare_tensor("y", np.array([np.inf, 5.0]), np.array([np.inf, np.inf]), atol=1, rtol=1, floor=1)
    assert inf.status == "FAIL" and inf.note == "1 of 2 elements"


def test_compare_generated_inputs():
    model = make_model([helper.make_node("Identity", ["ids"], ["o"]), helper.make_node("Identity", ["x"], ["p"])],
                       [vinfo("ids", ["N", "S"], TensorProto.INT64), vinfo("x", ["N", 3, None])],
                       [vinfo("o", ["N", "S"], TensorProto.INT64), vinfo("p", ["N", 3, None])])
    feed = konnx._make_inputs(model, None, {"S": 5}, seed=3)
    assert feed["ids"].shape == (1, 5) and feed["ids"].dtype == np.int64 and set(np.unique(feed["ids"])) <= {0, 1}
    assert feed["x"].shape == (1, 3, 1) and feed["x"].dtype == np.float32
    again = konnx._make_inputs(model, {"x": np.ones((2, 3, 4), np.float32)}, {"S": 5}, seed=3)
    np.testing.assert_array_equal(again["ids"], feed["ids"])  # same seed, same values
    assert again["x"].shape == (2, 3, 4)
    with pytest.raises(ValueError, match="'y', which is not an input of the model; its inputs are"):
        konnx._make_inputs(model, {"y": np.ones(1)}, None, 0)
    with pytest.raises(ValueError, match="'B', which is not a symbolic dim"):
        konnx._make_inputs(model, None, {"B": 2}, 0)


def test_report_table():
    rows = [konnx.TensorComparison("a", "pass", (2,), 1e-7, 2e-6, 1e-6, 0.0, node="'n1' (Conv)"),
            konnx.TensorComparison("b", "FAIL", (2,), 0.5, 0.25, 0.1, 1.0, node="'n2' (Relu)", note="2 of 2 elements"),
            konnx.TensorComparison("c", "skip", node="'n3' (Add)", note="not returned by the reference")]
    report = konnx.CompareReport(rows, 1e-5, 1e-4, 1e-3, "kiln (cpu, fp32)", "onnxruntime", True, {}, {}, {})
    text = str(report)
    assert not report.passed and report.first_failure.name == "b" and report["c"].status == "skip"
    assert text.splitlines()[0] == "kiln (cpu, fp32) vs onnxruntime: 3 tensor(s), FAILED (1 of 3 above tolerance)"
    assert "FAIL (2 of 2 elements)" in text and "0.25" in text
    assert text.splitlines()[-1] == "first tensor above tolerance: 'b', from node 'n2' (Relu)"
    report.tensors.pop(1)
    assert report.passed and report.first_failure is None and "PASSED" in str(report)


# ---- with kiln ----------------------------------------------------------------------------

def small_model_with(op, domain):
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node(op, ["r"], ["y"], name="custom_node", domain=domain, temperature=0.5)]
    return make_model(nodes, [vinfo("x")], [vinfo("y")], domains=[domain])


def test_unsupported_nodes_lists_unknown_custom_ops(kiln, tmp_path):
    model = small_model_with("NoSuchOp", "mydomain")
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    for source in (model, model.SerializeToString(), str(path), path):
        nodes = konnx.unsupported_nodes(source)
        assert [(n.op_type, n.domain, n.node_name, n.opset) for n in nodes] == [
            ("NoSuchOp", "mydomain", "custom_node", 1)]
        assert "no registered plugin" in nodes[0].reason


def test_unsupported_nodes_knows_the_builtin_temperature_swish(kiln):
    assert konnx.unsupported_nodes(small_model_with("TemperatureSwish", "custom")) == []
    assert konnx.unsupported_nodes(three_swishes()) == []


def test_unsupported_nodes_on_tinyyolo_tswish(kiln):
    # TemperatureSwish is one of kiln's built-in plugins (plugins/temperature_swish), so every node imports.
    assert konnx.unsupported_nodes(model_path("tinyyolo_tswish")) == []


def test_unsupported_nodes_rejects_protos_with_external_data(kiln, tmp_path):
    model = three_swishes()
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              size_threshold=0, location="m.data")
    with pytest.raises(ValueError, match="external data file.*pass the model's path"):
        konnx.unsupported_nodes(onnx.load(tmp_path / "m.onnx", load_external_data=False))
    assert konnx.unsupported_nodes(tmp_path / "m.onnx") == []  # a path keeps its external data


def test_compare_small_model_passes_and_reports_every_layer(kiln):
    report = konnx.compare(three_swishes(), dims={"N": 3})
    assert report.passed, str(report)
    assert [t.name for t in report.tensors] == ["out"] and report.inputs["x"].shape == (3, 8)
    assert report["out"].max_rel < 1e-4
    layers = konnx.compare(three_swishes(), per_layer=True)
    assert layers.passed, str(layers)
    assert [t.name for t in layers.tensors] == ["a1", "s1", "y1", "a2", "s2", "y2", "a3", "s3", "y3", "out"]
    assert layers["s2"].node == "'sig_2' (Sigmoid)"


def test_compare_detects_a_wrong_reference(kiln):
    import onnxruntime as ort

    model = three_swishes()
    names = ["a1", "s1", "y1", "a2", "s2", "y2", "a3", "s3", "y3", "out"]
    marked, _ = konnx._mark_all(model, names)
    session = ort.InferenceSession(marked.SerializeToString(), providers=["CPUExecutionProvider"])

    def off_at_y1(inputs):
        values = dict(zip(names, session.run(names, inputs)))
        for name in names[names.index("y1"):]:
            values[name] = values[name] * np.float32(1.001)  # as if an error began at y1
        return values

    report = konnx.compare(model, reference=off_at_y1, per_layer=True)
    assert not report.passed and report.first_failure.name == "y1"
    assert report["s1"].passed and report["y1"].max_rel > 5e-4
    assert "first tensor above tolerance: 'y1', from node 'swish_1' (Mul)" in str(report)
    # Only the graph output with per_layer=False; the intermediates a reference leaves out are skipped.
    assert not konnx.compare(model, reference=off_at_y1).passed
    outputs_only = konnx.compare(model, reference=lambda i: {"out": session.run(["out"], i)[0]}, per_layer=True)
    assert outputs_only.passed and outputs_only["a1"].status == "skip" and outputs_only["out"].status == "pass"


def test_compare_custom_ops_need_another_reference(kiln):
    original = three_swishes()
    replaced = konnx.replace(original, TSWISH, "TemperatureSwish", {"temperature": konnx.const("t")},
                             domain="custom")
    with pytest.raises(ValueError, match=r"cannot run the custom-op node 'swish_1' \(custom::TemperatureSwish\) "
                                         r"\(and 1 more\); compare the model before kiln.onnx.replace"):
        konnx.compare(replaced)
    import onnxruntime as ort

    session = ort.InferenceSession(original.SerializeToString(), providers=["CPUExecutionProvider"])
    report = konnx.compare(replaced, reference=lambda inputs: {"out": session.run(["out"], inputs)[0]},
                           dims={"N": 4})
    assert report.passed, str(report)
    assert report.reference == "<lambda>"


def test_compare_rejects_bad_arguments(kiln):
    with pytest.raises(ValueError, match="'nope', which is not an input"):
        konnx.compare(three_swishes(), inputs={"nope": np.zeros(1)})
    with pytest.raises(ValueError, match="reference must be 'onnxruntime' or a callable"):
        konnx.compare(three_swishes(), reference="tensorrt")
    with pytest.raises(ValueError, match="returned no 'out'"):
        konnx.compare(three_swishes(), reference=lambda inputs: {"y": inputs["x"]})


def test_compare_squeezenet(kiln):
    path = model_path("squeezenet1_1")
    report = konnx.compare(path)
    assert report.passed, str(report)
    assert [t.name for t in report.tensors] == ["logits"] and report["logits"].shape == (1, 1000)


def test_compare_squeezenet_per_layer(kiln):
    report = konnx.compare(model_path("squeezenet1_1"), per_layer=True)
    assert report.passed, str(report)
    assert report.tensors[-1].name == "logits" and len(report.tensors) > 50


def test_compare_tinyyolo_with_the_replaced_activations(kiln):
    import onnxruntime as ort

    path = model_path("tinyyolo_silu")
    replaced = konnx.replace(str(path), "Mul(x, Sigmoid(x))", "TemperatureSwish", {"temperature": 1.0},
                             domain="custom")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    report = konnx.compare(replaced, reference=lambda inputs: dict(zip(["detections"], session.run(None, inputs))),
                           rtol=1e-3)
    assert report.passed, str(report)


def test_compare_bert_with_dynamic_sequence_length(kiln):
    # S is dynamic beyond the batch: compare() builds the engine for the shapes it runs.
    ids = np.random.default_rng(5).integers(0, 1000, size=(2, 7))
    report = konnx.compare(model_path("bert_tiny"), inputs={"input_ids": ids}, dims={"N": 2, "S": 7})
    assert report.passed, str(report)
    assert report.inputs["attention_mask"].shape == (2, 7) and report["last_hidden_state"].shape == (2, 7, 128)
