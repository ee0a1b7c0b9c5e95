"""Plugins written in Python (docs/python.md, "Plugins written in Python").

A plugin is declared once, with a shape function, and implemented per device::

    import kiln.plugin as kp

    @kp.register("TemperatureSwish", dtypes=("float32", "float16"))
    def tswish(x, *, temperature: float = 1.0):
        return x                     # the output's dims: the input's (a list of kp dims)

    @tswish.impl("cpu")
    def _(x, y, *, temperature):     # numpy views of kiln's buffers; write the outputs in place
        np.multiply(x, 1.0 / (1.0 + np.exp(-temperature * x)), out=y)

    @tswish.impl("cuda")             # torch tensors on kiln's stream (cupy: framework="cupy")
    def _(x, y, *, temperature, stream):
        torch.mul(x, torch.sigmoid(temperature * x), out=y)

The shape function gets each input's dims (ints where the network fixes them, symbolic dims
otherwise, with + - * // ceil_div min max and require_equal) and the fields as keyword arguments,
and returns the output's dims (or a tuple of them for several outputs). Fields come from the
keyword-only parameters: ``float`` -> float32, ``int`` -> int64, ``str`` -> string,
``list[float]``/``list[int]`` -> any count; a parameter without a default is required. Output
types are the first input's unless ``output_dtypes=`` (a function of the input types and fields)
says otherwise. Registered plugins work everywhere a C++ plugin does: ONNX nodes of that op type
(the plugin fallback), Network.add_plugin, kiln.check_plugin, engines. An engine records the
plugin's module; loading the engine in another process imports it only with
``kiln.Runtime(allow_python_plugins=True)`` (it runs that module's code).
"""
from __future__ import annotations

import inspect
import typing
from typing import Callable, Sequence

from . import _kiln

Dim = _kiln.Dim

_FIELD_TYPES = {
    float: (_kiln.PluginFieldType.float32, 1),
    int: (_kiln.PluginFieldType.int64, 1),
    str: (_kiln.PluginFieldType.string, 1),
    bool: (_kiln.PluginFieldType.int64, 1),
}

_specs: dict[tuple[str, str, str], "PluginSpec"] = {}


def broadcast(a: Sequence, b: Sequence) -> list:
    """Numpy-style broadcasting of two inputs' dims (ints or dims); kiln checks the extents for every shape."""
    out = []
    for k in range(max(len(a), len(b))):
        i, j = len(a) - 1 - k, len(b) - 1 - k
        x = a[i] if i >= 0 else 1
        y = b[j] if j >= 0 else 1
        if isinstance(x, int) and isinstance(y, int):
            if x != y and x != 1 and y != 1:
                raise ValueError(f"cannot broadcast extent {x} with {y} (axis {-1 - k})")
            out.append(y if x == 1 else x)
        elif isinstance(x, int) and x == 1:
            out.append(y)
        elif isinstance(y, int) and y == 1:
            out.append(x)
        else:
            like = x if not isinstance(x, int) else y
            dx = x if not isinstance(x, int) else _kiln._constant(like, x)
            dy = y if not isinstance(y, int) else _kiln._constant(like, y)
            out.append(_kiln._broadcast([dx], [dy])[0])
    return out[::-1]


def _field_of(param: inspect.Parameter, hints) -> tuple:
    ann = hints.get(param.name, param.annotation)
    origin = typing.get_origin(ann)
    if origin in (list, tuple, Sequence):
        (elem,) = typing.get_args(ann)[:1] or (float,)
        ftype, _ = _FIELD_TYPES.get(elem, (None, None))
        count = -1
    else:
        ftype, count = _FIELD_TYPES.get(ann, (None, None))
    if ftype is None:
        raise TypeError(f"plugin field '{param.name}': annotate it as float, int, str, list[float] or list[int] "
                        f"(it is {ann!r})")
    required = param.default is inspect.Parameter.empty
    default = None if required else param.default
    if not required and count == -1:
        default = list(default)
    return (param.name, ftype, count, required, default, "")


class PluginSpec:
    """A plugin written in Python: its shape function, types and implementations (see register)."""

    def __init__(self, fn: Callable, name: str, namespace: str, version: str, dtypes, num_outputs: int,
                 output_dtypes: Callable | None, module: str):
        self.shape_fn = fn
        self.name, self.namespace, self.version = name, namespace, version
        self.num_outputs = num_outputs
        self.output_dtypes = output_dtypes
        self.module = module
        self.dtypes = [d if isinstance(d, _kiln.DataType) else getattr(_kiln.DataType, str(d)) for d in dtypes]
        self.impls: dict[str, tuple[Callable, str]] = {}
        self._streams: dict[int, object] = {}
        sig = inspect.signature(fn)
        try:
            hints = typing.get_type_hints(fn)
        except Exception:  # noqa: BLE001 (unresolvable annotations: use them as written)
            hints = {}
        self.num_inputs = sum(1 for p in sig.parameters.values()
                              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
        self.fields = [_field_of(p, hints) for p in sig.parameters.values() if p.kind == p.KEYWORD_ONLY]
        self.__doc__ = fn.__doc__

    # --- declaration -----------------------------------------------------------------------
    def impl(self, device: str, framework: str = "torch") -> Callable:
        """Decorates the implementation for a device: ``"cpu"`` (numpy arrays) or ``"cuda"``.

        CUDA implementations get tensors of ``framework`` ("torch" or "cupy") made in place from
        kiln's device buffers (no copies), with that library's current stream set to kiln's, and
        ``stream`` (the handle, an int) as a keyword; Triton kernels launched from torch code run
        on that stream too. Write the outputs in place; never synchronize the device.
        """
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be 'cpu' or 'cuda', not {device!r}")
        if framework not in ("torch", "cupy"):
            raise ValueError(f"framework must be 'torch' or 'cupy', not {framework!r}")

        def deco(f: Callable) -> Callable:
            self.impls[device] = (f, framework)
            return f

        return deco

    def __call__(self, *args, **kwargs):
        return self.shape_fn(*args, **kwargs)

    def create(self, layer_name: str = "", **fields) -> "_kiln.Plugin":
        """A plugin object with these fields, for Network.add_plugin."""
        creator = _kiln.plugin_registry().get_creator(self.name, self.version, self.namespace)
        return creator.create(layer_name or self.name, fields)

    # --- called by kiln (python/src/plugins.cpp) -------------------------------------------
    def _output_types(self, input_types, fields):
        if self.output_dtypes is None:
            return [input_types[0]] * self.num_outputs
        out = self.output_dtypes(list(input_types), **fields)
        out = [out] if not isinstance(out, (list, tuple)) else list(out)
        return [d if isinstance(d, _kiln.DataType) else getattr(_kiln.DataType, str(d)) for d in out]

    def _output_dims(self, index, inputs, fields):
        ins = [[d.constant_value if d.is_constant else d for d in dims] for dims in inputs]
        out = self.shape_fn(*ins, **fields)
        if self.num_outputs == 1:
            out = [out] if not (isinstance(out, tuple) and len(out) == 1) else list(out)
        if len(out) != self.num_outputs:
            raise ValueError(f"the shape function returned {len(out)} shapes for {self.num_outputs} outputs")
        return list(out[index])

    def _enqueue(self, device, inputs, outputs, fields, stream, num_threads):
        impl = self.impls.get(device)
        if impl is None:
            have = ", ".join(self.impls) or "none"
            raise NotImplementedError(f"no {device} implementation (it has: {have}); add one with @{self.shape_fn.__name__}.impl('{device}')")
        f, framework = impl
        if device == "cpu":
            f(*inputs, *outputs, **fields)
            return
        if framework == "torch":
            import torch  # noqa: PLC0415
            s = self._streams.get(stream)
            if s is None:
                s = torch.cuda.ExternalStream(stream) if stream else torch.cuda.current_stream()
                self._streams[stream] = s
            ins = [torch.as_tensor(_CudaArray(*t), device="cuda") for t in inputs]
            outs = [torch.as_tensor(_CudaArray(*t), device="cuda") for t in outputs]
            with torch.cuda.stream(s):
                f(*ins, *outs, stream=stream, **fields)
        else:
            import cupy  # noqa: PLC0415
            ins = [cupy.asarray(_CudaArray(*t)) for t in inputs]
            outs = [cupy.asarray(_CudaArray(*t)) for t in outputs]
            with cupy.cuda.ExternalStream(stream):
                f(*ins, *outs, stream=stream, **fields)


_TYPESTR = {"float32": "<f4", "float16": "<f2", "float64": "<f8", "int8": "|i1", "int16": "<i2", "int32": "<i4",
            "int64": "<i8", "uint8": "|u1", "uint16": "<u2", "uint32": "<u4", "uint64": "<u8", "bool": "|b1"}


class _CudaArray:
    """kiln's device buffer as a __cuda_array_interface__ object (torch.as_tensor/cupy.asarray use it in place)."""

    __slots__ = ("__cuda_array_interface__",)

    def __init__(self, address: int, shape: tuple, dtype):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": _TYPESTR[dtype.name],
                                         "data": (address, False), "version": 3, "strides": None, "stream": None}


def register(name: str, *, dtypes: Sequence = ("float32",), num_outputs: int = 1, namespace: str = "",
             version: str = "1", output_dtypes: Callable | None = None, in_place: dict | None = None,
             replace: bool = False) -> Callable:
    """Registers a plugin written in Python; decorates its shape function (see the module's doc).

    ``name`` may be ``"namespace::Name"``. ``dtypes``: the element types it supports (every input
    and output of one type). ``in_place={output: input}``: outputs that may reuse an input's memory
    (Plugin::aliased_input; the kernel must then be right whether or not they share it). Returns a
    PluginSpec; add implementations with ``@spec.impl(device)``.
    """
    if "::" in name:
        namespace, name = name.split("::", 1)

    def deco(fn: Callable) -> PluginSpec:
        module = getattr(fn, "__module__", None) or "__main__"
        spec = PluginSpec(fn, name, namespace, version, dtypes, num_outputs, output_dtypes, module)
        key = (name, version, namespace)
        aliases = [(in_place or {}).get(o, -1) for o in range(num_outputs)]
        _kiln._register_python_plugin(spec, name, version, namespace, module, num_outputs, spec.dtypes,
                                      spec.fields, aliases, replace or key in _specs)
        _specs[key] = spec
        return spec

    return deco


def registered() -> list[PluginSpec]:
    """The plugins written in Python registered in this process."""
    return list(_specs.values())


def check(name: str, device: str = "cpu", fields: dict | None = None, num_inputs: int = 0, version: str = "1",
          namespace: str = "") -> dict:
    """`kiln plugin check` on a registered plugin (C++ or Python): a dict with 'passed' and every check."""
    dev = _kiln.DeviceType.cuda if device == "cuda" else _kiln.DeviceType.cpu
    return _kiln.check_plugin(name, version, namespace, dev, fields, num_inputs)
