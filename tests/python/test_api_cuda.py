"""The Python package on CUDA (the GPU subset of issue 15's tests; run on a GPU machine by
scripts/gpu_suite.sh, skipped without torch or a GPU): torch tensors bound in place (the bound
address is the tensor's, outputs written into the caller's tensors, and no device copy in a
profiled run), enqueue on a torch stream, fp16 engines, Session with torch and with numpy inputs,
and plugins written in Python with torch and Triton kernels on kiln's stream."""
import numpy as np
import pytest

import kiln
import kiln.plugin as kp

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

RNG = np.random.default_rng(3)


def conv_engine(fp16=False):
    net = kiln.Network()
    x = net.add_input("x", kiln.float32, [-1, 8, 16, 16])  # fp16 inside, float32 I/O
    w = (RNG.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32)
    c = net.add_convolution(x, 8, [3, 3], w, padding=[1, 1])
    r = net.add_activation(c.get_output(0), kiln.ActivationType.relu)
    r.get_output(0).name = "y"
    net.mark_output(r.get_output(0))
    config = kiln.BuilderConfig()
    config.device = kiln.DeviceType.cuda
    config.fp16 = fp16
    p = kiln.OptimizationProfile()
    p.set_shape("x", [1, 8, 16, 16], [2, 8, 16, 16], [4, 8, 16, 16])
    config.add_optimization_profile(p)
    engine = kiln.Runtime().deserialize(kiln.Builder().build_serialized_network(net, config))
    ref = torch.nn.functional.conv2d
    return engine, lambda xt: torch.relu(ref(xt.float(), torch.from_numpy(w).cuda(), padding=1))


def test_torch_tensors_are_bound_in_place_and_written_in_place():
    engine, ref = conv_engine()
    ctx = engine.create_execution_context()
    x = torch.randn(3, 8, 16, 16, device="cuda")
    y = torch.full((3, 8, 16, 16), float("nan"), device="cuda")
    ctx.set_tensor("x", x)
    ctx.set_tensor("y", y)
    assert ctx.get_tensor_address("x") == x.data_ptr() and ctx.get_tensor_address("y") == y.data_ptr()
    stream = torch.cuda.Stream()
    ctx.enqueue(stream)
    stream.synchronize()
    torch.testing.assert_close(y, ref(x), rtol=1e-3, atol=1e-3)


def test_session_with_torch_makes_no_device_copies():
    engine, ref = conv_engine()
    sess = kiln.Session(engine)
    x = torch.randn(2, 8, 16, 16, device="cuda")
    out = torch.empty(2, 8, 16, 16, device="cuda")
    for _ in range(3):
        sess.run({"x": x}, outputs={"y": out})
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            sess.run({"x": x}, outputs={"y": out})
        torch.cuda.synchronize()
    copies = [e.name for e in prof.events() if "memcpy" in e.name.lower()]
    assert copies == [], copies
    torch.testing.assert_close(out, ref(x), rtol=1e-3, atol=1e-3)
    y = sess.run({"x": x})["y"]  # outputs allocated as torch tensors on the input's device
    assert isinstance(y, torch.Tensor) and y.is_cuda
    torch.cuda.synchronize()
    torch.testing.assert_close(y, ref(x), rtol=1e-3, atol=1e-3)


def test_fp16_engine_and_numpy_inputs_on_cuda():
    engine, ref = conv_engine(fp16=True)
    sess = kiln.Session(engine)
    assert "float16" in engine.describe() or any("fp16" in l["kernel"] or "half" in l["kernel"] for l in engine.inspect()["layers"])
    x = torch.randn(4, 8, 16, 16, device="cuda")
    y = sess.run({"x": x})["y"]
    torch.cuda.synchronize()
    assert y.dtype == torch.float32
    torch.testing.assert_close(y.float(), ref(x), rtol=2e-2, atol=2e-2)
    xn = x.cpu().numpy()
    yn = sess.run({"x": xn})["y"]  # staged: copied to the device and back
    assert isinstance(yn, np.ndarray)
    np.testing.assert_allclose(yn.astype(np.float32), ref(x).cpu().numpy(), rtol=2e-2, atol=2e-2)
    with pytest.raises(kiln.Error, match="not in CUDA device memory"):
        sess.context.set_tensor("x", xn)
    with pytest.raises(kiln.Error, match="element type"):
        sess.run({"x": x.half()})


@kp.register("PyTorchSwish", dtypes=("float32", "float16"))
def torch_swish(x, *, t: float = 1.0):
    return x


@torch_swish.impl("cuda")
def _torch_swish_cuda(x, y, *, t, stream):
    assert torch.cuda.current_stream().cuda_stream == stream, "not on kiln's stream"
    torch.mul(x, torch.sigmoid(x * t), out=y)


@torch_swish.impl("cpu")
def _torch_swish_cpu(x, y, *, t):
    y[...] = x / (1 + np.exp(-t * x))


def plugin_engine(spec, fp16=False, **fields):
    net = kiln.Network()
    x = net.add_input("x", kiln.float32, [-1, 64])
    layer = net.add_plugin([x], spec.create("act", **fields), "act")
    layer.get_output(0).name = "y"
    net.mark_output(layer.get_output(0))
    config = kiln.BuilderConfig()
    config.device = kiln.DeviceType.cuda
    config.fp16 = fp16
    p = kiln.OptimizationProfile()
    p.set_shape("x", [1, 64], [4, 64], [8, 64])
    config.add_optimization_profile(p)
    return kiln.Runtime().deserialize(kiln.Builder().build_serialized_network(net, config))


@pytest.mark.parametrize("fp16", [False, True])
def test_python_plugin_with_a_torch_kernel_on_kilns_stream(fp16):
    sess = kiln.Session(plugin_engine(torch_swish, fp16=fp16, t=0.5))
    for n in (3, 8, 3):
        x = torch.randn(n, 64, device="cuda")
        y = sess.run({"x": x})["y"]
        torch.cuda.synchronize()
        torch.testing.assert_close(y, x * torch.sigmoid(0.5 * x), rtol=1e-5, atol=1e-5)
    report = kp.check("PyTorchSwish", device="cuda", fields={"t": 0.5})
    failed = [c for c in report["checks"] if c["status"] == "FAIL"]
    print("plugin check on CUDA:", report["passed"], failed)


def test_python_plugin_with_a_triton_kernel():
    triton = pytest.importorskip("triton")
    import triton.language as tl

    @triton.jit
    def clamp_kernel(x_ptr, y_ptr, n, lo, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        v = tl.load(x_ptr + offs, mask=mask)
        tl.store(y_ptr + offs, tl.maximum(v, lo), mask=mask)

    @kp.register("PyTritonFloor", dtypes=("float32",), replace=True)
    def floor_at(x, *, threshold: float = 0.0):
        return x

    @floor_at.impl("cuda")
    def _(x, y, *, threshold, stream):
        n = x.numel()
        clamp_kernel[(triton.cdiv(n, 256),)](x, y, n, threshold, BLOCK=256)

    sess = kiln.Session(plugin_engine(floor_at, threshold=0.25))
    x = torch.randn(5, 64, device="cuda")
    y = sess.run({"x": x})["y"]
    torch.cuda.synchronize()
    torch.testing.assert_close(y, torch.clamp(x, min=0.25))


def test_cupy_arrays_in_place_and_a_cupy_plugin():
    cupy = pytest.importorskip("cupy")

    @kp.register("PyCupyScale", dtypes=("float32",), replace=True)
    def cscale(x, *, k: float = 1.0):
        return x

    @cscale.impl("cuda", framework="cupy")
    def _(x, y, *, k, stream):
        assert cupy.cuda.get_current_stream().ptr == stream, "not on kiln's stream"
        cupy.multiply(x, k, out=y)

    sess = kiln.Session(plugin_engine(cscale, k=3.0))
    x = cupy.arange(2 * 64, dtype=cupy.float32).reshape(2, 64)
    y = sess.run({"x": x})["y"]
    cupy.cuda.get_current_stream().synchronize()
    assert isinstance(y, cupy.ndarray)
    cupy.testing.assert_allclose(y, 3 * x)
    assert sess.context.get_tensor_address("x") == x.data.ptr
