"""kiln: an inference engine whose custom layers are first-class citizens (docs/python.md).

The TensorRT workflow, kiln's names where they differ::

    import kiln, numpy as np
    net = kiln.Network()
    kiln.OnnxParser(net).parse_from_file("model.onnx")      # or build the network by hand
    config = kiln.BuilderConfig()
    config.device = kiln.DeviceType.cuda; config.fp16 = True
    engine_bytes = kiln.Builder().build_serialized_network(net, config)
    engine = kiln.Runtime().deserialize(engine_bytes)
    context = engine.create_execution_context()
    context.set_tensor("x", x); context.set_tensor("y", y); context.execute()

and the short path, ``kiln.Session("model.onnx", device="cpu").run({"x": x})``.
Errors are ``kiln.Error`` (a RuntimeError) with the C++ library's messages.
"""
from __future__ import annotations

import atexit as _atexit
import logging as _logging



def _preload_cuda_wheels() -> None:
    """Loads the CUDA libraries of NVIDIA's pip wheels (those PyTorch uses) before kiln's own.

    libkiln and PyTorch ask for the same libraries by name (libcudart.so.13, libcublasLt.so.13,
    libcudnn.so.9, libnvrtc.so.13); a process holds one copy of each name, and PyTorch refuses to
    start with older copies than its own. So when the wheels are installed, kiln loads theirs,
    wherever torch is imported. KILN_USE_SYSTEM_CUDA_LIBS=1 turns this off.
    """
    import ctypes
    import importlib.util
    import os

    if os.environ.get("KILN_USE_SYSTEM_CUDA_LIBS") == "1":
        return
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return
    if spec is None or not spec.submodule_search_locations:
        return
    names = ["libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13", "libnvrtc.so.13", "libcudnn.so.9"]
    for root in spec.submodule_search_locations:
        for sub in ("cu13/lib", "cuda_runtime/lib", "cublas/lib", "cuda_nvrtc/lib", "cudnn/lib"):
            for name in names:
                path = os.path.join(root, sub, name)
                if os.path.exists(path):
                    try:
                        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                    except OSError:
                        pass


_preload_cuda_wheels()

from . import _kiln  # noqa: E402
from ._kiln import (  # noqa: E402,F401  (the public API)
    ActivationType,
    ArgReduceOp,
    BitShiftDirection,
    CaseChangeAction,
    FillMode,
    GridSamplePadding,
    InterpolationMode,
    NormalizationMode,
    PaddingMode,
    RNNCell,
    RNNDirection,
    RoiAlignMode,
    ScatterMode,
    ScatterReductionKind,
    Builder,
    BuilderConfig,
    BuildReport,
    DataType,
    DeviceType,
    ElementWiseOp,
    Engine,
    EngineFormatError,
    Error,
    ExecutionContext,
    Layer,
    Network,
    OnnxParser,
    OptimizationProfile,
    ParseError,
    PluginCreator,
    PluginField,
    PluginFieldCollection,
    PluginFieldSpec,
    PluginFieldType,
    PluginRegistry,
    PoolingType,
    ReduceOp,
    Runtime,
    ScaleMode,
    Severity,
    Tensor,
    TensorFormat,
    TensorInfo,
    UnaryOp,
    UnsupportedNode,
    builder_pass_names,
    check_plugin,
    data_type_size,
    get_plugin_registry,
    load_plugin_library,
    parse_dims,
    plugin_registry,
    set_log_callback,
    set_log_severity,
    version,
)
from .session import Session  # noqa: F401

__version__ = version()

# Element types as module attributes, as in TensorRT (kiln.float32, kiln.float16, ...).
float32 = DataType.float32
float16 = DataType.float16
float64 = DataType.float64
int8 = DataType.int8
int16 = DataType.int16
int32 = DataType.int32
int64 = DataType.int64
uint8 = DataType.uint8
uint16 = DataType.uint16
uint32 = DataType.uint32
uint64 = DataType.uint64
bool_ = DataType.bool
string = DataType.string

_LEVELS = {
    Severity.error: _logging.ERROR,
    Severity.warning: _logging.WARNING,
    Severity.info: _logging.INFO,
    Severity.verbose: _logging.DEBUG,
}


def route_logging_to_python(logger: str | _logging.Logger = "kiln") -> _logging.Logger:
    """Sends kiln's log messages to Python's logging (errors, warnings, info; verbose as DEBUG).

    Returns the logging.Logger used. kiln then logs every message it has (its own threshold is the
    logger's level): set the level with ``logging.getLogger("kiln").setLevel(...)``.
    ``kiln.set_log_callback(None)`` restores kiln's default stderr logger.
    """
    target = logger if isinstance(logger, _logging.Logger) else _logging.getLogger(logger)

    def _emit(severity: Severity, message: str) -> None:
        level = _LEVELS.get(severity, _logging.INFO)
        if target.isEnabledFor(level):
            target.log(level, message)

    set_log_callback(_emit)
    return target


class Logger:
    """A logger in TensorRT's style: kiln calls ``log(severity, message)`` for every message at or above
    ``min_severity`` (``Severity.error`` is the most severe). The default prints to stderr; subclass it
    and override ``log`` to send messages elsewhere, then install it with ``kiln.set_logger``."""

    def __init__(self, min_severity: Severity = Severity.warning):
        self.min_severity = min_severity

    def log(self, severity: Severity, message: str) -> None:
        import sys
        print(f"[kiln {severity.name}] {message}", file=sys.stderr)

    def _dispatch(self, severity: Severity, message: str) -> None:
        if int(severity.value) <= int(self.min_severity.value):
            self.log(severity, message)


def set_logger(logger: "Logger | None") -> None:
    """Makes ``logger`` kiln's process-wide logger (None: the default stderr logger)."""
    set_log_callback(None if logger is None else logger._dispatch)


def dtype(value) -> DataType:
    """A kiln DataType from a DataType, a name ('float16') or a numpy/torch dtype."""
    if isinstance(value, DataType):
        return value
    name = str(value).replace("torch.", "")
    if name == "bool_":
        name = "bool"
    try:
        return getattr(DataType, name)
    except AttributeError:
        raise Error(f"'{value}' is not a kiln element type (float16/32/64, int8-64, uint8-64, bool)") from None


def _reset_logger() -> None:
    # The callback is a Python object: drop it before the interpreter goes away.
    try:
        set_log_callback(None)
    except Exception:  # noqa: BLE001 (interpreter shutdown)
        pass


_atexit.register(_reset_logger)

from . import plugin  # noqa: E402,F401  (kiln.plugin.register, ...)
