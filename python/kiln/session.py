"""kiln.Session: the short path for the common case (as ONNX Runtime's InferenceSession).

``Session(source, device=...)`` takes an ONNX model (a path, bytes or an onnx.ModelProto: it
builds an engine), an engine file, engine bytes or a loaded ``kiln.Engine``, and ``run({name:
array})`` returns ``{name: array}``. On the CPU it takes and returns numpy arrays; on CUDA, torch
(or cupy) tensors in device memory are used in place and the outputs come back as new tensors of
the same library, queued on the library's current stream; numpy arrays given to a CUDA session are
copied to the device and back.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np

from . import _kiln

_ENGINE_MAGIC = b"KILN"


def _as_device(device) -> _kiln.DeviceType:
    if isinstance(device, _kiln.DeviceType):
        return device
    name = str(device).lower()
    if name.startswith("cuda"):
        return _kiln.DeviceType.cuda
    if name == "cpu":
        return _kiln.DeviceType.cpu
    raise _kiln.Error(f"device '{device}' is not 'cpu' or 'cuda'")


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch")


class Session:
    """Builds or loads an engine and runs it on named arrays.

    Args:
        source: an ONNX file path (``.onnx``), ONNX bytes or ``onnx.ModelProto`` (built here), an
            engine file path, engine bytes, or a ``kiln.Engine``.
        device: ``"cpu"`` or ``"cuda"`` (for building; a loaded engine keeps its own).
        fp16: allow float16 kernels (CUDA; on the CPU it changes the layers that have them).
        profiles: ``{input: (min, opt, max)}`` shapes for dynamic inputs, or a list of such dicts
            (several optimization profiles; the session uses the first). Without it, a dynamic
            batch dim (dim 0) gets 1..32 (opt 1); other dynamic dims need a profile.
        plugins: plugin library paths to load first.
        threads: CPU threads (0: the cores, shared among live contexts).
        timing_cache: a timing cache file for builds.
        save_engine: write the built engine there.
        allow_python_plugins / allow_embedded_plugins / allow_compiled_plans: see ``kiln.Runtime``
            (an engine the session builds from ONNX loads its own compiled plans).
    """

    def __init__(self, source: Any, device: str | _kiln.DeviceType = "cpu", *, fp16: bool = False,
                 profiles: Mapping | list | None = None, plugins=(), threads: int = 0,
                 timing_cache: str | None = None, save_engine: str | None = None,
                 allow_python_plugins: bool = False, allow_embedded_plugins: bool = False,
                 allow_compiled_plans: bool = False):
        for lib in plugins:
            _kiln.load_plugin_library(os.fspath(lib))
        runtime = _kiln.Runtime(allow_embedded_plugins=allow_embedded_plugins, allow_python_plugins=allow_python_plugins,
                                allow_compiled_plans=allow_compiled_plans)
        self.build_report = None
        if isinstance(source, _kiln.Engine):
            engine = source
        else:
            onnx_bytes, engine_bytes, base_dir = self._classify(source)
            if engine_bytes is not None:
                engine = runtime.deserialize(engine_bytes) if not isinstance(source, (str, os.PathLike)) else runtime.load(os.fspath(source))
            else:
                net = _kiln.Network()
                parser = _kiln.OnnxParser(net)
                if isinstance(source, (str, os.PathLike)):
                    parser.parse_from_file(os.fspath(source))
                else:
                    parser.parse(onnx_bytes, base_dir)
                config = _kiln.BuilderConfig()
                config.device = _as_device(device)
                config.fp16 = fp16
                config.num_threads = threads
                if timing_cache:
                    config.timing_cache_path = os.fspath(timing_cache)
                for p in self._profiles(net, profiles):
                    config.add_optimization_profile(p)
                builder = _kiln.Builder()
                data = builder.build_serialized_network(net, config)
                self.build_report = builder.last_report
                if save_engine:
                    with open(save_engine, "wb") as f:
                        f.write(data)
                runtime.allow_compiled_plans = True  # built by this process
                engine = runtime.deserialize(data)
        self.engine = engine
        self.context = engine.create_execution_context()
        if threads:
            self.context.num_threads = threads
        self._cuda = engine.device == _kiln.DeviceType.cuda
        self.input_names = list(engine.input_names)
        self.output_names = list(engine.output_names)
        self._staging: dict[str, Any] = {}
        self._input_set = set(self.input_names)
        self._np_dtype = {t.name: t.dtype.name for t in engine.io_tensors}
        self._torch_dtype: dict[str, Any] = {}
        self._input_shape: dict[str, tuple] = {}
        self._keep: dict[str, Any] = {}  # tensors bound by address, kept alive while bound
        self._shapes: dict[tuple, tuple] = {}

    @staticmethod
    def _classify(source):
        """(onnx bytes, engine bytes, base dir) of a source; paths are read lazily."""
        if isinstance(source, (str, os.PathLike)):
            path = os.fspath(source)
            if not os.path.exists(path):
                raise _kiln.Error(f"'{path}' does not exist (kiln.Session takes an ONNX model or an engine file)")
            with open(path, "rb") as f:
                head = f.read(4)
            if head == _ENGINE_MAGIC:
                return None, b"", os.path.dirname(path)
            return b"", None, os.path.dirname(path) or "."
        if hasattr(source, "SerializeToString"):  # onnx.ModelProto
            return source.SerializeToString(), None, "."
        if isinstance(source, (bytes, bytearray, memoryview)):
            data = bytes(source)
            if data[:4] == _ENGINE_MAGIC:
                return None, data, "."
            return data, None, "."
        raise _kiln.Error(f"kiln.Session: cannot use a {type(source).__name__} as a model or engine")

    @staticmethod
    def _profiles(net, profiles):
        if profiles is None:
            profiles = []
            shapes = {}
            for t in net.inputs:
                dims = list(t.shape)
                if -1 not in dims:
                    continue
                if any(d == -1 for d in dims[1:]):
                    raise _kiln.Error(
                        f"input '{t.name}' has dynamic dims {tuple(dims)} beyond the batch: give their range, "
                        f"kiln.Session(..., profiles={{'{t.name}': (min_shape, opt_shape, max_shape)}})")
                lo, hi = list(dims), list(dims)
                lo[0], hi[0] = 1, 32
                shapes[t.name] = (lo, lo, hi)
            if shapes:
                profiles = [shapes]
        elif isinstance(profiles, Mapping):
            profiles = [profiles]
        out = []
        for shapes in profiles:
            p = _kiln.OptimizationProfile()
            for name, (lo, opt, hi) in shapes.items():
                p.set_shape(name, list(lo), list(opt), list(hi))
            out.append(p)
        return out

    def _check_names(self, inputs: Mapping):
        if inputs.keys() == self._input_set:
            return
        unknown = [n for n in inputs if n not in self._input_set]
        if unknown:
            raise _kiln.Error(f"unknown input(s) {unknown}; the engine's inputs are {self.input_names}")
        missing = [n for n in self.input_names if n not in inputs]
        raise _kiln.Error(f"missing input(s) {missing}; the engine's inputs are {self.input_names}")

    def _output_shapes(self):
        """(shapes to allocate, whether some output has a data-dependent size) at the current input shapes."""
        key = tuple(self.context.get_tensor_shape(n) for n in self.input_names)
        hit = self._shapes.get(key)
        if hit is None:
            ctx = self.context
            alloc = [ctx.get_max_tensor_shape(n) for n in self.output_names]
            dynamic = any(tuple(ctx.get_tensor_shape(n)) != tuple(a) for n, a in zip(self.output_names, alloc))
            hit = self._shapes[key] = (alloc, dynamic)
        return hit

    def run(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any] | None = None) -> dict:
        """Runs one inference: ``{input name: array}`` -> ``{output name: array}``.

        CPU engines take numpy arrays (converted to the engine's type only when they differ).
        CUDA engines take device tensors (torch, cupy), used in place, and queue the inference on
        the current torch (cupy) stream without waiting; numpy inputs are copied to the device and
        the outputs copied back. ``outputs`` may give arrays to write into (in place).
        """
        self._check_names(inputs)
        first = next(iter(inputs.values())) if inputs else None
        if self._cuda:
            if first is not None and _is_torch(first):
                return self._run_torch(inputs, outputs)
            if first is not None and not isinstance(first, np.ndarray) and not np.isscalar(first):
                return self._run_device(inputs, outputs)
            return self._run_staged(inputs, outputs)
        ctx = self.context
        for name, value in inputs.items():
            want = self._np_dtype[name]
            arr = value if isinstance(value, np.ndarray) and value.dtype == want and value.flags.c_contiguous \
                else np.ascontiguousarray(value, dtype=want)
            ctx.set_tensor(name, arr)
        alloc, dynamic = self._output_shapes()
        result = {}
        for name, shape in zip(self.output_names, alloc):
            out = None if outputs is None else outputs.get(name)
            if out is None:
                out = np.empty(shape, dtype=self._np_dtype[name])
            ctx.set_tensor(name, out)
            result[name] = out
        ctx.execute()
        return {n: self._exact(n, a) for n, a in result.items()} if dynamic else result

    def _exact(self, name, array):
        shape = tuple(self.context.get_tensor_shape(name))
        if tuple(array.shape) == shape:
            return array
        n = int(np.prod(shape)) if shape else 1
        return array.reshape(-1)[:n].reshape(shape)  # data-dependent size: written compactly at the start

    def _torch_tensor(self, name, t, writes):
        """The address of a torch tensor for `name`, checked (device, type, layout) without a DLPack round trip."""
        want = self._torch_dtype.get(name) or self._torch_dtype_of(name)
        if not t.is_cuda:
            raise _kiln.Error(f"'{name}' is a CPU tensor and the engine runs on CUDA: pass t.cuda()")
        if t.dtype != want:
            raise _kiln.Error(f"'{name}' has element type {t.dtype}, the engine's tensor has {want} (t.to({want}))")
        if not t.is_contiguous():
            raise _kiln.Error(f"'{name}' is not contiguous; kiln reads and writes it in place: pass t.contiguous()")
        if writes and t.requires_grad:
            raise _kiln.Error(f"'{name}' requires grad; pass a tensor kiln may write (torch.no_grad or .detach())")
        return t.data_ptr()

    def _run_torch(self, inputs, outputs):
        import torch  # noqa: PLC0415
        ctx, keep = self.context, self._keep
        for name, t in inputs.items():
            shape = tuple(t.shape)
            if self._input_shape.get(name) != shape:
                ctx.set_input_shape(name, list(shape))
                self._input_shape[name] = shape
            ctx.set_tensor_address(name, self._torch_tensor(name, t, False))
            keep[name] = t
        alloc, dynamic = self._output_shapes()
        device = next(iter(inputs.values())).device
        result = {}
        for name, shape in zip(self.output_names, alloc):
            out = None if outputs is None else outputs.get(name)
            if out is None:
                out = torch.empty(shape, dtype=self._torch_dtype.get(name) or self._torch_dtype_of(name), device=device)
            elif tuple(out.shape) != tuple(shape) and not dynamic:
                raise _kiln.Error(f"output '{name}' has shape {tuple(out.shape)}, the inference writes {tuple(shape)}")
            ctx.set_tensor_address(name, self._torch_tensor(name, out, True))
            keep[name] = out
            result[name] = out
        ctx.enqueue(torch.cuda.current_stream(device).cuda_stream)
        if dynamic:
            torch.cuda.current_stream(device).synchronize()  # the sizes are known once the inference ran
            ctx.check_device_errors()
            return {n: self._exact(n, a) for n, a in result.items()}
        return result

    def _torch_dtype_of(self, name):
        import torch  # noqa: PLC0415
        dt = self._np_dtype[name]
        self._torch_dtype[name] = getattr(torch, "bool" if dt == "bool" else dt)
        return self._torch_dtype[name]

    def _run_device(self, inputs, outputs):
        import cupy  # noqa: PLC0415
        ctx = self.context
        for name, value in inputs.items():
            ctx.set_tensor(name, value)
        alloc, dynamic = self._output_shapes()
        result = {}
        for name, shape in zip(self.output_names, alloc):
            out = None if outputs is None else outputs.get(name)
            if out is None:
                out = cupy.empty(shape, dtype=self._np_dtype[name])
            ctx.set_tensor(name, out)
            result[name] = out
        ctx.enqueue(cupy.cuda.get_current_stream().ptr)
        if dynamic:
            cupy.cuda.get_current_stream().synchronize()
            ctx.check_device_errors()
            return {n: self._exact(n, a) for n, a in result.items()}
        return result

    def _buffer(self, name, nbytes):
        buf = self._staging.get(name)
        if buf is None or buf.nbytes < nbytes:
            buf = _kiln._DeviceBuffer(_kiln.DeviceType.cuda, max(nbytes, 1))
            self._staging[name] = buf
        return buf

    def _run_staged(self, inputs, outputs):
        ctx = self.context
        for name, value in inputs.items():
            arr = np.ascontiguousarray(value, dtype=self._np_dtype[name])
            ctx.set_input_shape(name, list(arr.shape))
            buf = self._buffer(name, arr.nbytes)
            buf.upload(arr)
            ctx.set_tensor_address(name, buf.address)
        alloc, _ = self._output_shapes()
        result = {}
        for name, shape in zip(self.output_names, alloc):
            out = None if outputs is None else outputs.get(name)
            if out is None:
                out = np.empty(shape, dtype=self._np_dtype[name])
            buf = self._buffer(name, out.nbytes)
            ctx.set_tensor_address(name, buf.address)
            result[name] = (out, buf)
        ctx.execute()
        done = {}
        for name, (out, buf) in result.items():
            buf.download(out)
            done[name] = self._exact(name, out)
        return done
