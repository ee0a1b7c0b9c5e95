"""ONNX helpers of kiln: find what kiln cannot import, rewrite subgraphs into custom ops, compare with ONNX Runtime.

Three tools for bringing an ONNX model to kiln (docs/python.md, "ONNX helpers"):

* :func:`unsupported_nodes` lists the nodes kiln's ONNX importer cannot import, without building anything;
* :func:`replace` replaces every match of a small subgraph pattern such as ``Mul(x, Sigmoid(Mul(x, t:scalar)))``
  by one custom node (a kiln plugin), with onnx-graphsurgeon;
* :func:`compare` runs kiln and a reference (ONNX Runtime, or your own function) on the same inputs and reports
  the errors per output, or per tensor with ``per_layer=True``, as Polygraphy does.

Only :func:`unsupported_nodes` and :func:`compare` need kiln's compiled module; it is imported when they are
called, so :func:`replace` works with just ``onnx`` and ``onnx_graphsurgeon`` installed. ``onnx_graphsurgeon``
and ``onnxruntime`` are imported only by the functions that use them.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import re
import tempfile
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import onnx

__all__ = [
    "unsupported_nodes",
    "replace",
    "const",
    "Match",
    "compare",
    "CompareReport",
    "TensorComparison",
]

ModelLike = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, onnx.ModelProto]


# ---- shared helpers -------------------------------------------------------------------------


def _kiln(what: str):
    """The kiln package with its compiled module, or an ImportError saying how to get it."""
    try:
        import kiln  # the package this file belongs to

        kiln.Session  # noqa: B018  (fails when the compiled module is missing)
    except (ImportError, AttributeError) as e:
        raise ImportError(
            f"kiln.onnx.{what} needs kiln's compiled module (kiln._kiln), which could not be imported ({e}); "
            "build the Python package (docs/python.md) or put <build>/python on PYTHONPATH"
        ) from e
    return kiln


def _is_path(model: Any) -> bool:
    return isinstance(model, (str, os.PathLike))


def _load(model: ModelLike, what: str, load_external_data: bool = True) -> onnx.ModelProto:
    """A ModelProto from a path, serialized bytes or a ModelProto (returned as is, never modified)."""
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        try:
            return onnx.load_from_string(bytes(model))
        except Exception as e:  # protobuf's DecodeError and friends
            raise ValueError(f"{what}: the bytes given are not a serialized ONNX model ({e})") from e
    if _is_path(model):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{what}: no ONNX model at '{path}'")
        return onnx.load(path, load_external_data=load_external_data)
    raise TypeError(f"{what}: model must be a path, ONNX bytes or an onnx.ModelProto, not {type(model).__name__}")


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """The graph and every subgraph (If/Loop/Scan bodies), recursively."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _graphs(g)


def _external_tensor_names(model: onnx.ModelProto) -> List[str]:
    names = []
    for g in _graphs(model.graph):
        tensors = list(g.initializer)
        for node in g.node:
            tensors += [a.t for a in node.attribute if a.type == onnx.AttributeProto.TENSOR]
        names += [t.name for t in tensors if t.data_location == onnx.TensorProto.EXTERNAL]
    return names


def _node_label(node: onnx.NodeProto) -> str:
    domain = f"{node.domain}::" if node.domain not in ("", "ai.onnx") else ""
    return f"'{node.name}' ({domain}{node.op_type})" if node.name else f"<unnamed> ({domain}{node.op_type})"


# ---- unsupported_nodes ----------------------------------------------------------------------


def unsupported_nodes(model: ModelLike) -> list:
    """Lists the nodes of an ONNX model that kiln's importer cannot import, without building a network.

    Args:
        model: a path to an ``.onnx`` file (passed to kiln unchanged, so external data files next to it are
            found), serialized model bytes, or an ``onnx.ModelProto``. Bytes and protos are written to a
            temporary file first; a proto whose tensors still refer to external data files cannot be checked
            that way: load it with its data (``onnx.load(path)``, the default) or pass the path.

    Returns:
        ``list[kiln.UnsupportedNode]``, one per node kiln cannot import, in graph order, each with ``op_type``,
        ``domain`` (``""`` for the default domain), ``node_name``, ``opset`` (the opset of the node's domain)
        and ``reason``. Empty when the whole model can be imported. Custom-domain nodes are supported when a
        plugin of that name is registered (kiln's built-in plugins, or libraries loaded with
        ``kiln.load_plugin_library`` before the call).

    Raises:
        kiln.Error: the file is unreadable or not a valid model.
        ValueError: ``model`` is bytes that are not a model, or a proto with unresolved external data.
    """
    kiln = _kiln("unsupported_nodes")
    if _is_path(model):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"unsupported_nodes: no ONNX model at '{path}'")
        return list(kiln.OnnxParser.check_file(path))
    proto = _load(model, "unsupported_nodes")
    external = _external_tensor_names(proto)
    if external:
        raise ValueError(
            f"unsupported_nodes: the model's tensor '{external[0]}' (and {len(external) - 1} more) refers to an "
            "external data file, which cannot be found from a temporary copy; pass the model's path instead, or "
            "load the proto with its data (onnx.load(path) does by default)"
        )
    with tempfile.TemporaryDirectory(prefix="kiln_onnx_") as tmp:
        path = os.path.join(tmp, "model.onnx")
        with open(path, "wb") as f:
            f.write(proto.SerializeToString())
        return list(kiln.OnnxParser.check_file(path))


# ---- replace: the pattern notation ----------------------------------------------------------

# Ops of the default domain whose inputs may be given in any order.
_COMMUTATIVE = frozenset(
    {"Add", "Mul", "Max", "Min", "Sum", "Mean", "And", "Or", "Xor", "Equal", "BitwiseAnd", "BitwiseOr", "BitwiseXor"}
)
_VAR_KINDS = ("const", "scalar")


@dataclasses.dataclass(frozen=True)
class _Var:
    name: str
    pos: int


@dataclasses.dataclass(frozen=True)
class _Op:
    op: str
    domain: str  # "" for the default domain
    args: Tuple[Union["_Op", _Var], ...]
    pos: int


@dataclasses.dataclass
class _Pattern:
    text: str
    root: _Op
    variables: List[str]  # in order of first appearance
    kinds: Dict[str, Optional[str]]  # None (any tensor), "const" or "scalar"

    @property
    def inputs(self) -> List[str]:
        return [v for v in self.variables if self.kinds[v] is None]

    @property
    def constants(self) -> List[str]:
        return [v for v in self.variables if self.kinds[v] is not None]


def _pattern_error(text: str, pos: int, message: str) -> ValueError:
    return ValueError(f"malformed pattern at position {pos}: {message}\n  {text}\n  {' ' * pos}^")


class _Parser:
    _NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")

    def __init__(self, text: str):
        self.text = text
        self.pos = 0
        self.kinds: Dict[str, Optional[str]] = {}
        self.kind_pos: Dict[str, int] = {}
        self.order: List[str] = []

    def error(self, message: str, pos: Optional[int] = None) -> ValueError:
        return _pattern_error(self.text, self.pos if pos is None else pos, message)

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        self.skip_space()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, char: str, context: str) -> None:
        if self.peek() != char:
            found = f"'{self.peek()}'" if self.peek() else "the end of the pattern"
            raise self.error(f"expected '{char}' {context}, found {found}")
        self.pos += 1

    def name(self, what: str) -> str:
        self.skip_space()
        m = self._NAME.match(self.text, self.pos)
        if not m:
            found = f"'{self.text[self.pos]}'" if self.pos < len(self.text) else "the end of the pattern"
            raise self.error(f"expected {what}, found {found}")
        self.pos = m.end()
        return m.group()

    def parse(self) -> _Pattern:
        if not self.text.strip():
            raise self.error("the pattern is empty; write an expression such as 'Mul(x, Sigmoid(x))'", 0)
        root = self.expr()
        if self.peek():
            raise self.error(f"unexpected '{self.peek()}' after the end of the expression")
        if not isinstance(root, _Op):
            raise self.error(f"the pattern is the variable '{root.name}'; its root must be an op, e.g. 'Relu(x)'", 0)
        pattern = _Pattern(self.text, root, self.order, self.kinds)
        if not pattern.inputs:
            raise self.error("the pattern has no input variable (one without ':const' / ':scalar'); the custom "
                             "node needs at least one input", 0)
        return pattern

    def expr(self) -> Union[_Op, _Var]:
        self.skip_space()
        start = self.pos
        word = self.name("an op (e.g. 'Mul(') or a variable (e.g. 'x')")
        domain = None
        if self.text.startswith("::", self.pos):
            self.pos += 2
            domain = word
            word = self.name(f"an op name after the domain '{domain}::'")
            if "." in word:
                raise self.error(f"op name '{word}' contains '.'", start)
        if domain is not None or word[0].isupper():
            if self.peek() != "(":
                raise self.error(f"op '{word}' needs its inputs in parentheses, e.g. '{word}(x)'; variables "
                                 "start with a lowercase letter or '_'")
            if "." in word:
                raise self.error(f"'{word}' is not an op name; qualify ops of other domains as 'domain::Op'", start)
            open_pos = self.pos
            self.pos += 1
            args: List[Union[_Op, _Var]] = []
            if self.peek() != ")":
                while True:
                    args.append(self.expr())
                    if self.peek() == ",":
                        self.pos += 1
                        continue
                    if self.peek() != ")":
                        found = f"'{self.peek()}'" if self.peek() else "the end of the pattern"
                        raise self.error(f"expected ',' or ')' closing '{word}(' opened at position {open_pos}, "
                                         f"found {found}")
                    break
            self.pos += 1
            return _Op(word, "" if domain in (None, "ai.onnx") else domain, tuple(args), start)
        # A variable.
        if "." in word:
            raise self.error(f"variable name '{word}' contains '.'", start)
        if self.peek() == "(":
            raise self.error(f"'{word}' starts with a lowercase letter, so it is a variable, but it is followed by "
                             f"'('; op names start with an uppercase letter (or write 'domain::{word}(')", start)
        kind = None
        if self.peek() == ":":
            self.pos += 1
            kind_pos = self.pos
            kind = self.name(f"a kind after '{word}:' ({' or '.join(_VAR_KINDS)})")
            if kind not in _VAR_KINDS:
                raise self.error(f"unknown variable kind '{kind}'; write '{word}:const' (any constant tensor) or "
                                 f"'{word}:scalar' (a constant with one element)", kind_pos)
        if word not in self.kinds:
            self.order.append(word)
            self.kinds[word] = None
        if kind is not None:
            if self.kinds[word] is not None and self.kinds[word] != kind:
                raise self.error(f"variable '{word}' is declared '{self.kinds[word]}' at position "
                                 f"{self.kind_pos[word]} and '{kind}' here", start)
            self.kinds[word] = kind
            self.kind_pos[word] = start
        return _Var(word, start)


def _parse_pattern(text: str) -> _Pattern:
    if not isinstance(text, str):
        raise TypeError(f"replace: pattern must be a str, not {type(text).__name__}")
    return _Parser(text).parse()


# ---- replace: matching ----------------------------------------------------------------------


class Match:
    """One match of a :func:`replace` pattern, given to callables in ``attrs`` and to ``where``.

    Attributes:
        tensors: ``dict`` variable name -> the ``onnx_graphsurgeon`` tensor it is bound to.
        nodes: the matched ``onnx_graphsurgeon`` nodes, the root first, then in the pattern's order (left to right,
            outer to inner). Their ``attrs`` may be read, e.g. to copy an attribute into the custom node.
        root: the node whose output the custom node takes over (``nodes[0]``).
    """

    def __init__(self, tensors: Dict[str, Any], nodes: List[Any], values: Dict[str, np.ndarray]):
        self.tensors = tensors
        self.nodes = nodes
        self._values = values

    @property
    def root(self):
        return self.nodes[0]

    def value(self, name: str) -> np.ndarray:
        """The value (a numpy array) of the constant variable ``name`` (declared ``name:const`` or ``name:scalar``)."""
        if name not in self._values:
            kind = "not a variable of the pattern" if name not in self.tensors else "not declared ':const'/':scalar'"
            raise KeyError(f"Match.value('{name}'): '{name}' is {kind}; constant variables: {sorted(self._values)}")
        return self._values[name]

    def __repr__(self) -> str:
        return f"<kiln.onnx.Match root '{self.root.name}' ({self.root.op}), {len(self.nodes)} nodes>"


class _ConstAttr:
    def __init__(self, name: str):
        self.name = name

    def __call__(self, match: Match):
        value = match.value(self.name)
        if value.size == 1:
            return value.reshape(()).item()
        return value.reshape(-1).tolist()

    def __repr__(self) -> str:
        return f"kiln.onnx.const({self.name!r})"


def const(name: str) -> Callable[[Match], Any]:
    """An ``attrs`` value for :func:`replace`: the value of the pattern's constant variable ``name`` in each match.

    A one-element constant gives a Python ``float`` or ``int`` (an ONNX FLOAT or INT attribute); a larger one a
    flat list (FLOATS or INTS). For anything else write your own callable, e.g.
    ``lambda m: m.value("w").astype(np.float32)``.
    """
    if not isinstance(name, str):
        raise TypeError(f"const: the variable name must be a str, not {type(name).__name__}")
    return _ConstAttr(name)


def _constant_value(tensor) -> Optional[np.ndarray]:
    """The value of an initializer or of a Constant node's output; None for anything computed."""
    import onnx_graphsurgeon as gs

    if isinstance(tensor, gs.Constant):
        return np.asarray(tensor.values)
    if len(tensor.inputs) != 1:
        return None
    node = tensor.inputs[0]
    if node.op != "Constant" or node.domain not in (None, "", "ai.onnx") or node.inputs:
        return None
    attrs = node.attrs
    if "value" in attrs:
        v = attrs["value"]
        return np.asarray(v.values if isinstance(v, gs.Constant) else v)
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    return None  # sparse or string constants


def _same_domain(node_domain: Optional[str], domain: str) -> bool:
    return (node_domain or "") in ((domain,) if domain else ("", "ai.onnx"))


def _match(expr, tensor, pattern: _Pattern, binding: Dict[str, Any], nodes: Tuple[Any, ...]):
    """Yields (binding, nodes) for every way `expr` matches the value `tensor`."""
    if isinstance(expr, _Var):
        bound = binding.get(expr.name)
        if bound is not None:
            if bound is tensor:
                yield binding, nodes
            return
        kind = pattern.kinds[expr.name]
        if kind is not None:
            value = _constant_value(tensor)
            if value is None or (kind == "scalar" and value.size != 1):
                return
        yield {**binding, expr.name: tensor}, nodes
        return
    if len(tensor.inputs) != 1:
        return  # a graph input or an initializer
    node = tensor.inputs[0]
    if node.op != expr.op or not _same_domain(node.domain, expr.domain) or len(node.inputs) != len(expr.args):
        return
    if not node.outputs or node.outputs[0] is not tensor:
        return  # an op of the pattern stands for its node's first output
    if any(n is node for n in nodes):
        nodes_out = nodes
    else:
        nodes_out = nodes + (node,)
    orders = (itertools.permutations(expr.args) if expr.op in _COMMUTATIVE and not expr.domain else (expr.args,))
    for args in orders:
        yield from _match_args(args, list(node.inputs), pattern, binding, nodes_out)


def _match_args(args, tensors, pattern, binding, nodes):
    if not args:
        yield binding, nodes
        return
    for b, n in _match(args[0], tensors[0], pattern, binding, nodes):
        yield from _match_args(args[1:], tensors[1:], pattern, b, n)


def _valid(nodes: Tuple[Any, ...], graph_outputs: set) -> bool:
    """True when no value computed inside the match is needed outside it (else replacing changes the graph).

    onnx-graphsurgeon lists the nodes of If/Loop/Scan bodies that read an outer value among its consumers, so
    those count as outside readers too."""
    inside = set(map(id, nodes))
    for i, node in enumerate(nodes):
        for k, out in enumerate(node.outputs):
            if i == 0 and k == 0:
                continue  # the root's output: taken over by the custom node
            if id(out) in graph_outputs:
                return False
            if any(id(c) not in inside for c in out.outputs):
                return False
            if i == 0 and out.outputs:
                return False  # the root's other outputs would lose their producer
    return True


def _attribute_value(key: str, value: Any, node: str) -> Any:
    """An attribute value onnx accepts: numpy scalars and 1-D arrays as Python values, n-D arrays as tensors."""
    if isinstance(value, (np.ndarray, np.generic)):
        value = np.asarray(value)
        value = value.item() if value.ndim == 0 else value.tolist() if value.ndim == 1 else \
            onnx.numpy_helper.from_array(value)
    try:
        onnx.helper.make_attribute(key, value)
    except Exception as e:
        raise ValueError(f"replace: attrs['{key}'] for node '{node}' is {value!r:.80}, which is not an ONNX attribute "
                         f"value (int, float, str, a list of one of them, a numpy array): {e}") from e
    return value


def replace(
    model: ModelLike,
    pattern: str,
    op: str,
    attrs: Optional[Mapping[str, Any]] = None,
    domain: str = "",
    name_prefix: Optional[str] = None,
    *,
    where: Optional[Callable[[Match], bool]] = None,
    return_count: bool = False,
):
    """Replaces every match of a subgraph pattern by one custom node (e.g. a kiln plugin); uses onnx-graphsurgeon.

    Pattern notation: an expression of ops and variables, e.g. TemperatureSwish, ``y = x * sigmoid(t * x)``::

        Mul(x, Sigmoid(Mul(x, t:scalar)))

    * ``Op(a, b, ...)``: a node of the default ONNX domain with exactly these inputs, standing for its first
      output. Op names start with an uppercase letter; other domains are written ``domain::Op(...)``. Node
      attributes are not compared (filter with ``where``).
    * ``x``: a variable (starts with a lowercase letter or ``_``), bound to any tensor. A variable used twice must
      bind to the same tensor.
    * ``t:const`` / ``t:scalar``: a constant variable, bound only to an initializer or a ``Constant`` node's output
      (``scalar``: with exactly one element). The annotation may be written at any one occurrence. Its value is
      available to ``attrs`` (:func:`const`, :meth:`Match.value`); it is not an input of the custom node.
    * The inputs of commutative ops (Add, Mul, Max, Min, Sum, Mean, And, Or, Xor, Equal, Bitwise*) match in any
      order, so the pattern above also matches ``Mul(Sigmoid(Mul(t, x)), x)``.

    Each match becomes one node ``op`` whose inputs are the pattern's non-constant variables in order of first
    appearance in the pattern text (``x`` above) and whose output is the root node's output tensor, name
    included, so consumers and graph outputs are unaffected. Matches are tried in topological order, from the
    root node; a match is skipped (never half-replaced) when any value it computes other than the root's output
    is used outside it (by another node, a subgraph, or as a graph output), when it shares a node with an
    earlier match, or when ``where`` returns False. Only the main graph is searched, not If/Loop/Scan bodies.
    Afterwards dead nodes and initializers are removed (onnx-graphsurgeon's ``cleanup``) and the graph is
    sorted topologically. With no match the model is returned unchanged (a copy).

    Args:
        model: a path, serialized model bytes or an ``onnx.ModelProto`` (not modified).
        pattern: the pattern, as above.
        op: the custom node's op_type (for kiln: the plugin name, e.g. ``"TemperatureSwish"``).
        attrs: the custom node's attributes. A value is either a constant (int, float, str, list of them, numpy
            array: 0-d and 1-d ones become INT/FLOAT(S), larger ones a TENSOR attribute) used for every match,
            or a callable receiving the :class:`Match` and returning the value for that match;
            ``kiln.onnx.const("t")`` (:func:`const`) is the callable giving constant variable ``t``'s value, e.g.
            ``attrs={"temperature": kiln.onnx.const("t")}``.
        domain: the custom node's domain (kiln's importer takes custom ops from any non-default domain, e.g.
            ``"custom"``). A domain the model does not import yet is added with version 1.
        name_prefix: names of the new nodes: ``f"{name_prefix}_{i}"`` (i = 0, 1, ... in graph order); by
            default each new node takes its root node's name (or ``f"{op}_{i}"`` when that is empty).
        where: an optional filter ``where(match) -> bool``; matches for which it returns False are left alone.
        return_count: return ``(model, number_of_replacements)`` instead of the model alone.

    Returns:
        The new ``onnx.ModelProto`` (or ``(model, count)`` with ``return_count=True``).

    Raises:
        ValueError: the pattern is malformed (the message shows the position), or ``attrs`` uses :func:`const`
            with a name that is not a constant variable of the pattern.
    """
    import onnx_graphsurgeon as gs

    pat = _parse_pattern(pattern)
    if not isinstance(op, str) or not op:
        raise ValueError("replace: op must be the custom node's op_type, a non-empty str")
    attrs = dict(attrs or {})
    for key, value in attrs.items():
        if isinstance(value, _ConstAttr) and pat.kinds.get(value.name) is None:
            what = "not a variable of the pattern" if value.name not in pat.kinds else "not declared constant"
            raise ValueError(f"replace: attrs['{key}'] = const('{value.name}'), but '{value.name}' is {what}; "
                             f"write '{value.name}:const' or '{value.name}:scalar' in the pattern")

    original = _load(model, "replace")
    work = onnx.ModelProto()
    work.CopyFrom(original)  # onnx-graphsurgeon keeps references into the proto (opset_import) and edits them
    graph = gs.import_onnx(work)
    graph.toposort()
    graph_outputs = set(map(id, graph.outputs))

    matches: List[Match] = []
    used: set = set()
    for node in list(graph.nodes):
        if node.op != pat.root.op or not _same_domain(node.domain, pat.root.domain) or not node.outputs:
            continue
        for binding, nodes in _match(pat.root, node.outputs[0], pat, {}, ()):
            if any(id(n) in used for n in nodes) or not _valid(nodes, graph_outputs):
                continue
            values = {v: _constant_value(binding[v]) for v in pat.constants}
            m = Match(dict(binding), list(nodes), values)
            if where is not None and not where(m):
                continue
            matches.append(m)
            used.update(map(id, nodes))
            break

    if not matches:
        result = onnx.ModelProto()
        result.CopyFrom(original)
        return (result, 0) if return_count else result

    taken = {n.name for n in graph.nodes if id(n) not in used and n.name}
    for i, m in enumerate(matches):
        if name_prefix is not None:
            name = f"{name_prefix}_{i}"
        else:
            name = m.root.name or f"{op}_{i}"
        unique, k = name, 1
        while unique in taken:
            unique, k = f"{name}_{k}", k + 1
        taken.add(unique)
        node_attrs = {key: _attribute_value(key, value(m) if callable(value) else value, unique)
                      for key, value in attrs.items()}
        output = m.root.outputs[0]
        m.root.outputs.clear()  # the root is now dead; cleanup() removes it and the other matched nodes
        graph.nodes.append(gs.Node(op=op, name=unique, domain=domain or None, attrs=node_attrs,
                                   inputs=[m.tensors[v] for v in pat.inputs], outputs=[output]))
    graph.cleanup().toposort()

    result = gs.export_onnx(graph, do_type_check=False)
    for field in ("doc_string", "domain", "model_version"):
        setattr(result, field, getattr(original, field))
    del result.metadata_props[:]
    result.metadata_props.extend(original.metadata_props)
    return (result, len(matches)) if return_count else result


# ---- compare --------------------------------------------------------------------------------

_REL_THRESHOLD = 1e-5  # the "share of elements with a relative error above" threshold of the report
_ORT_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "com.microsoft")


@dataclasses.dataclass
class TensorComparison:
    """The comparison of one tensor in a :class:`CompareReport`.

    Attributes:
        name: the tensor's name.
        status: ``"pass"``, ``"FAIL"`` or ``"skip"`` (per_layer with a reference callable that did not return
            this intermediate tensor).
        shape: the reference's shape (``None`` when skipped).
        max_abs: largest ``|kiln - ref|``.
        max_rel: largest relative error ``|kiln - ref| / max(|ref|, rel_floor)``.
        mean_rel: mean relative error.
        frac_rel_above_1e5: share of elements (0..1) whose relative error exceeds 1e-5.
        node: the producing node, ``"'name' (Op)"`` (per_layer only, else ``""``).
        note: why it failed beyond the numbers (shape mismatch, NaN mismatches, missing output), or ``""``.
    """

    name: str
    status: str
    shape: Optional[Tuple[int, ...]] = None
    max_abs: float = 0.0
    max_rel: float = 0.0
    mean_rel: float = 0.0
    frac_rel_above_1e5: float = 0.0
    node: str = ""
    note: str = ""

    @property
    def passed(self) -> bool:
        """True when the tensor is within tolerance (False for failures and skipped tensors)."""
        return self.status == "pass"


@dataclasses.dataclass
class CompareReport:
    """What :func:`compare` returns: one :class:`TensorComparison` per output (or per tensor with per_layer).

    ``str(report)`` is a table; ``report["name"]`` looks a tensor up by name.

    Attributes:
        tensors: the comparisons, in graph order.
        atol, rtol, rel_floor: the tolerances (an element passes when ``|kiln - ref| <= atol`` or its relative
            error ``|kiln - ref| / max(|ref|, rel_floor) <= rtol``).
        kiln: what ran on the kiln side, e.g. ``"kiln (cpu, fp32)"``; reference: ``"onnxruntime"`` or the
            callable's name.
        per_layer: whether every intermediate tensor was compared.
        inputs: the inputs both sides ran on (generated ones included), to reproduce the run.
        outputs, reference_outputs: the tensors kiln and the reference produced, by name.
    """

    tensors: List[TensorComparison]
    atol: float
    rtol: float
    rel_floor: float
    kiln: str
    reference: str
    per_layer: bool
    inputs: Dict[str, np.ndarray]
    outputs: Dict[str, np.ndarray]
    reference_outputs: Dict[str, np.ndarray]

    @property
    def passed(self) -> bool:
        """True when no compared tensor fails (skipped tensors do not count)."""
        return all(t.status != "FAIL" for t in self.tensors)

    @property
    def first_failure(self) -> Optional[TensorComparison]:
        """The first tensor in graph order above tolerance (with per_layer: where the error starts), or None."""
        return next((t for t in self.tensors if t.status == "FAIL"), None)

    def __getitem__(self, name: str) -> TensorComparison:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(f"CompareReport: no tensor '{name}' was compared")

    def __str__(self) -> str:
        def num(x: float) -> str:
            return f"{x:.3g}" if np.isfinite(x) else str(x)

        headers = ["tensor", "shape", "max abs", "max rel", "mean rel", "rel>1e-5", "result"]
        if self.per_layer:
            headers.insert(1, "node")
        rows = []
        for t in self.tensors:
            if t.status == "skip":
                row = [t.name, "-", "-", "-", "-", "-", "skip"]
            else:
                row = [t.name, str(tuple(t.shape)) if t.shape is not None else "?", num(t.max_abs), num(t.max_rel),
                       num(t.mean_rel), f"{100 * t.frac_rel_above_1e5:.2f}%", t.status]
            if t.note:
                row[-1] += f" ({t.note})"
            if self.per_layer:
                row.insert(1, t.node)
            rows.append(row)
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
        failed = sum(t.status == "FAIL" for t in self.tensors)
        verdict = "PASSED" if self.passed else f"FAILED ({failed} of {len(self.tensors)} above tolerance)"
        lines = [
            f"{self.kiln} vs {self.reference}: {len(self.tensors)} tensor(s), {verdict}",
            f"tolerance: |err| <= atol {self.atol:g} or rel <= rtol {self.rtol:g}, "
            f"rel = |err| / max(|ref|, {self.rel_floor:g})",
            "  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(),
        ]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        first = self.first_failure
        if first is not None and self.per_layer:
            lines.append(f"first tensor above tolerance: '{first.name}'" + (f", from node {first.node}"
                                                                              if first.node else ""))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<kiln.onnx.CompareReport {'passed' if self.passed else 'FAILED'}, {len(self.tensors)} tensors>"


def _graph_inputs(model: onnx.ModelProto) -> List[onnx.ValueInfoProto]:
    initializers = {t.name for t in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in initializers]


def _random_input(vi: onnx.ValueInfoProto, dims: Mapping[str, int], rng: np.random.Generator) -> np.ndarray:
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        raise ValueError(f"compare: input '{vi.name}' is not a tensor; pass its value in inputs=")
    if not tt.HasField("shape"):
        raise ValueError(f"compare: input '{vi.name}' has no shape in the model, so no random value can be made for "
                         f"it; pass it in inputs=")
    shape = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            shape.append(d.dim_value)
        else:
            shape.append(int(dims.get(d.dim_param, 1)) if d.dim_param else 1)
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
    except Exception as e:
        raise ValueError(f"compare: input '{vi.name}' has ONNX element type {tt.elem_type}, for which no random "
                         f"value can be made; pass it in inputs=") from e
    if dtype.kind == "f":
        return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 2, size=shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    raise ValueError(f"compare: input '{vi.name}' has type {dtype}, for which no random value can be made; "
                     f"pass it in inputs=")


def _make_inputs(model: onnx.ModelProto, inputs: Optional[Mapping[str, Any]], dims: Optional[Mapping[str, int]],
                 seed: int) -> Dict[str, np.ndarray]:
    graph_inputs = _graph_inputs(model)
    names = [v.name for v in graph_inputs]
    given = dict(inputs or {})
    unknown = [n for n in given if n not in names]
    if unknown:
        raise ValueError(f"compare: inputs has '{unknown[0]}', which is not an input of the model; its inputs are "
                         f"{names}")
    dims = dict(dims or {})
    params = {d.dim_param for v in graph_inputs for d in v.type.tensor_type.shape.dim if d.dim_param}
    unknown = [d for d in dims if d not in params]
    if unknown:
        raise ValueError(f"compare: dims has '{unknown[0]}', which is not a symbolic dim of the model's inputs; "
                         f"they have {sorted(params) or 'none'}")
    rng = np.random.default_rng(seed)
    result = {}
    for vi in graph_inputs:  # generated in input order, so a given seed always gives the same values
        value = _random_input(vi, dims, rng) if vi.name not in given else np.asarray(given[vi.name])
        result[vi.name] = value
    return result


def _tensors_in_graph_order(model: onnx.ModelProto) -> Tuple[List[str], Dict[str, str]]:
    """Every value computed by a node of the main graph from the inputs, in node order, and its producer.

    Values that depend on constants only (Constant nodes, Identity of an initializer, ...) are left out: both
    sides compute them exactly, and they would crowd the report."""
    initializers = {t.name for t in model.graph.initializer}
    inputs = {v.name for v in model.graph.input} | initializers
    fixed = set(initializers)
    names, producer = [], {}
    for node in model.graph.node:
        default = node.domain in ("", "ai.onnx")
        ins = [i for i in node.input if i]
        if (default and node.op_type == "Constant") or (ins and all(i in fixed for i in ins)):
            fixed.update(node.output)
            continue
        for out in node.output:
            if out and out not in producer and out not in inputs:
                names.append(out)
                producer[out] = _node_label(node)
    return names, producer


def _mark_all(model: onnx.ModelProto, names: Sequence[str]) -> Tuple[onnx.ModelProto, List[str]]:
    """A copy of the model with every tensor of `names` as a graph output (sequences and maps left out)."""
    marked = onnx.ModelProto()
    marked.CopyFrom(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
        types = {v.name: v.type for v in inferred.graph.value_info}
    except Exception:
        types = {}
    outputs = {o.name for o in marked.graph.output}
    kept = []
    for name in names:
        t = types.get(name)
        if t is not None and not t.HasField("tensor_type"):
            continue  # sequences: kiln's networks output tensors only
        kept.append(name)
        if name in outputs:
            continue
        vi = onnx.ValueInfoProto(name=name)
        if t is not None:
            vi.type.CopyFrom(t)
        marked.graph.output.append(vi)
    return marked, kept


def _run_onnxruntime(source, model: onnx.ModelProto, inputs: Dict[str, np.ndarray], names: List[str]):
    custom = [n for g in _graphs(model.graph) for n in g.node if n.domain not in _ORT_DOMAINS]
    if custom:
        raise ValueError(
            f"compare: ONNX Runtime cannot run the custom-op node {_node_label(custom[0])}"
            + (f" (and {len(custom) - 1} more)" if len(custom) > 1 else "")
            + "; compare the model before kiln.onnx.replace() made it, or pass reference= a callable "
            "f(inputs) -> dict of outputs (e.g. running the original model)"
        )
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise ImportError("compare: reference='onnxruntime' needs the onnxruntime package (pip install "
                          "onnxruntime), or pass reference= a callable") from e
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        values = session.run(names, inputs)
    except Exception as e:
        hint = ""
        if "NOT_IMPLEMENTED" in str(e) or "No Op registered" in str(e):
            hint = ("; the model has an op ONNX Runtime does not implement (a custom op?): compare the model before "
                    "kiln.onnx.replace(), or pass reference= a callable")
        raise RuntimeError(f"compare: ONNX Runtime failed on the model: {e}{hint}") from e
    return dict(zip(names, values))


def _compare_tensor(name: str, out: np.ndarray, ref: np.ndarray, atol: float, rtol: float,
                    floor: float) -> TensorComparison:
    out, ref = np.asarray(out), np.asarray(ref)
    if out.shape != ref.shape:
        return TensorComparison(name, "FAIL", tuple(ref.shape), float("inf"), float("inf"), float("inf"), 1.0,
                                note=f"kiln's shape {tuple(out.shape)} differs from the reference's")
    if ref.size == 0:
        return TensorComparison(name, "pass", tuple(ref.shape))
    if ref.dtype.kind in "USO" or out.dtype.kind in "USO":  # strings: equal or not
        differ = int(np.count_nonzero(out != ref))
        return TensorComparison(name, "FAIL" if differ else "pass", tuple(ref.shape), note=(
            f"{differ} of {ref.size} strings differ" if differ else ""))
    a = out.astype(np.float64).reshape(-1)  # 1-D, so 0-d tensors can be indexed too
    r = ref.astype(np.float64).reshape(-1)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a - r)
        same = (a == r) | (np.isnan(a) & np.isnan(r))  # equal infinities and NaN where the reference has NaN
        diff[same] = 0.0
        diff[np.isnan(diff)] = np.inf
        rel = diff / np.maximum(np.abs(r), floor)
        rel[np.isnan(rel)] = np.inf  # a finite value where the reference is infinite
        rel[same] = 0.0
    ok = (diff <= atol) | (rel <= rtol)
    nan_mismatch = int(np.count_nonzero(np.isnan(a) != np.isnan(r)))
    failed = int(np.count_nonzero(~ok))
    note = ""
    if nan_mismatch:
        note = f"{nan_mismatch} NaN mismatches"
    elif failed:
        note = f"{failed} of {ref.size} elements"
    return TensorComparison(name, "pass" if failed == 0 else "FAIL", tuple(ref.shape), float(diff.max()),
                            float(rel.max()), float(rel.mean()), float(np.mean(rel > _REL_THRESHOLD)), note=note)


def compare(
    model: ModelLike,
    inputs: Optional[Mapping[str, Any]] = None,
    reference: Union[str, Callable[[Dict[str, np.ndarray]], Mapping[str, Any]]] = "onnxruntime",
    device: str = "cpu",
    per_layer: bool = False,
    fp16: bool = False,
    plugins: Sequence[Any] = (),
    atol: Optional[float] = None,
    rtol: Optional[float] = None,
    *,
    dims: Optional[Mapping[str, int]] = None,
    seed: int = 0,
    rel_floor: float = 1e-3,
) -> CompareReport:
    """Runs kiln and a reference on the same inputs and compares their outputs (Polygraphy-style).

    Args:
        model: a path, serialized model bytes or an ``onnx.ModelProto``. A path is given to both runtimes as is
            (external data keeps working), except with ``per_layer``, which loads and edits the model.
        inputs: ``{name: array}`` for some or all graph inputs; the others get random values from a generator
            seeded with ``seed``: floats uniform in [-1, 1), integers and bools 0 or 1 (pass integer inputs such as
            token ids or shapes yourself when 0/1 does not suit them).
        reference: ``"onnxruntime"`` (its CPU provider), or a callable ``f(inputs) -> {name: array}`` returning at
            least the graph outputs (with ``per_layer``, intermediate tensors it does not return are skipped).
            ONNX Runtime cannot run custom-op nodes (e.g. those made by :func:`replace`): compare the model before
            the replacement, or pass a callable that runs it.
        device: kiln's device, ``"cpu"`` or ``"cuda"`` (the reference always runs on the CPU).
        per_layer: also compare every intermediate tensor: each is marked as a graph output in both runs (as
            Polygraphy's ``mark all``; this may keep kiln from fusing layers). Reported in graph order; tensors
            computed from constants only (Constant nodes, Identity of an initializer) and sequences are left out.
            ``report.first_failure`` is where the error starts.
        fp16: build kiln's engine with float16 enabled.
        plugins: plugin libraries for ``kiln.Session``.
        atol, rtol: tolerances; an element passes when ``|kiln - ref| <= atol`` or
            ``|kiln - ref| / max(|ref|, rel_floor) <= rtol``. Defaults: ``atol=1e-5, rtol=1e-4``, with ``fp16``
            ``atol=1e-3, rtol=1e-2``.
        dims: values of symbolic input dims for generated inputs, by dim_param name (e.g. ``{"N": 4}``); other
            dynamic dims are 1.
        seed: seed of the generated inputs.
        rel_floor: the floor under ``|ref|`` in relative errors, so values near 0 do not blow them up (1e-3).

    Returns:
        A :class:`CompareReport`: ``report.passed``, ``report.first_failure``, ``report["name"]``, and
        ``print(report)`` for the table (max abs error, max and mean relative error, share of elements with a
        relative error above 1e-5, pass/fail per tensor).

    Raises:
        ValueError: unknown input or dim names, inputs that cannot be generated, custom ops with
            ``reference="onnxruntime"``, or a reference callable missing a graph output.
        RuntimeError: ONNX Runtime failed; ``kiln.Error`` (a RuntimeError): kiln failed to build or run.
    """
    kiln = _kiln("compare")
    atol = (1e-3 if fp16 else 1e-5) if atol is None else float(atol)
    rtol = (1e-2 if fp16 else 1e-4) if rtol is None else float(rtol)
    proto = _load(model, "compare", load_external_data=per_layer)
    feed = _make_inputs(proto, inputs, dims, seed)
    output_names = [o.name for o in proto.graph.output]

    source: Any = model
    names, producers = output_names, {}
    if per_layer:
        all_names, producers = _tensors_in_graph_order(proto)
        proto, names = _mark_all(proto, all_names + [n for n in output_names if n not in all_names])
        source = proto
    elif isinstance(model, (bytearray, memoryview)):
        source = bytes(model)

    # The reference.
    if callable(reference):
        ref_name = getattr(reference, "__name__", type(reference).__name__)
        got = reference({k: v.copy() for k, v in feed.items()})
        if not isinstance(got, Mapping):
            raise TypeError(f"compare: the reference callable {ref_name} returned {type(got).__name__}; it must "
                            "return a dict {output name: array}")
        missing = [n for n in output_names if n not in got]
        if missing:
            raise ValueError(f"compare: the reference callable {ref_name} returned no '{missing[0]}'; it must return "
                             f"every graph output ({output_names}), it returned {list(got)}")
        ref = {k: np.asarray(v) for k, v in got.items()}
    elif reference == "onnxruntime":
        ref_name = "onnxruntime"
        ort_source = os.fspath(source) if _is_path(source) else (
            source.SerializeToString() if isinstance(source, onnx.ModelProto) else source)
        ref = _run_onnxruntime(ort_source, proto, feed, names)
    else:
        raise ValueError(f"compare: reference must be 'onnxruntime' or a callable f(inputs) -> dict, not {reference!r}")

    # kiln.
    kiln_source = os.fspath(source) if _is_path(source) else source
    # An engine for exactly these shapes: min = opt = max for every input with dynamic dims.
    profile = {vi.name: (feed[vi.name].shape,) * 3 for vi in _graph_inputs(proto)
               if any(not d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)}
    try:
        if profile:
            session = kiln.Session(kiln_source, device=device, fp16=fp16, plugins=plugins, profiles=profile)
        else:
            session = kiln.Session(kiln_source, device=device, fp16=fp16, plugins=plugins)
        missing = [n for n in session.input_names if n not in feed]
        if missing:
            raise ValueError(f"compare: kiln's engine has an input '{missing[0]}' that the model's graph inputs do not "
                             f"list; pass it in inputs=")
        out = session.run({n: feed[n] for n in session.input_names})
    except Exception as e:
        if per_layer and hasattr(e, "add_note"):
            e.add_note("compare(per_layer=True) marks every tensor as an output; if kiln cannot output one of "
                       "them, compare with per_layer=False")
        raise

    tensors = []
    for name in names:
        if name not in ref:
            tensors.append(TensorComparison(name, "skip", node=producers.get(name, ""),
                                            note="not returned by the reference"))
            continue
        if name not in out:
            t = TensorComparison(name, "FAIL", tuple(np.shape(ref[name])), float("inf"), float("inf"),
                                 float("inf"), 1.0, note="missing from kiln's outputs")
        else:
            t = _compare_tensor(name, out[name], ref[name], atol, rtol, rel_floor)
        t.node = producers.get(name, "")
        tensors.append(t)

    label = f"kiln ({device}, {'fp16' if fp16 else 'fp32'})"
    return CompareReport(tensors, atol, rtol, rel_floor, label, ref_name, per_layer, feed, dict(out), ref)
