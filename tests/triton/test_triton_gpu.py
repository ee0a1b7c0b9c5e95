#!/usr/bin/env python3
"""kiln's Triton backend on a GPU: request data in GPU memory (CUDA shared memory regions,
registered with the server the way tritonclient's cuda_shared_memory module does it; here through
ctypes and libcudart, bench/triton_gpu.py's Cuda and Client) and reloads of a CUDA model. Needs a
GPU: exits 77 (skipped) without a CUDA device, without a CUDA build of kiln, or without a
tritonserver.

Checks, on a CUDA model built by the backend at load (Relu over [N, 4096], dynamic batching) and a
CPU model:
  * input and output in GPU memory, only the input, only the output: each equals Relu(x);
  * 8 client threads at once, each alternating GPU-memory and plain requests with its own random
    inputs, batched together by the dynamic batcher (mixed host and device segments in one
    execution): every response equals Relu of its own input, and batches did form;
  * a CUDA model whose requests are 280,000 bytes each (more than one 64 KiB copy chunk and one
    128 KiB device copy per request, batched): 4 clients, every response equals Relu of its own
    input;
  * the CPU model answers a GPU-memory input and a GPU-memory output with an error naming the
    tensor, then still serves a plain request; the server is live at the end;
  * a convolution model (3x3 conv + bias + SiLU, fp16, builder_optimization_level 0, batch 1..4)
    built by the backend at load: the cached engine carries compiled cuDNN plans for every batch
    size (the backend's compiled_plans_every_batch default); a restarted server (explicit mode,
    verbose log) loads that engine and its warm-up of batch 1..4 loads every plan from the file,
    building none; its answers at batch 1..4 match a NumPy reference;
  * a second server in explicit model-control mode unloads and loads the CUDA model 50 times
    (each load builds nothing: the engine the first load built is cached beside the ONNX file;
    each instance warms up every batch size, capturing CUDA graphs): the GPU's used memory and the
    server's resident memory stay within bounds, and the model still answers correctly.

Usage: python3 tests/triton/test_triton_gpu.py --build BUILD [--server TRITONSERVER]
"""
import argparse
import json
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
SKIP = 77
WIDTH = 4096
BIG = 70000  # floats per request of model "b": 280,000 bytes
CONV_SHAPE = (16, 24, 24)  # model "v": x [N, 16, 24, 24] -> SiLU(conv3x3(x) + bias), N = 1..4


def find_server(given):
    if given:
        return given
    try:
        import pytriton
        return str(Path(pytriton.__file__).parent / "tritonserver" / "bin" / "tritonserver")
    except ImportError:
        return None


def run_threads(target, n):
    """Runs target(0) .. target(n - 1) on n threads at once and waits for all of them."""
    threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def gpu_memory_used_mib():
    r = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                       capture_output=True, text=True, timeout=30)
    return int(r.stdout.split()[0])


def rss_mib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    return 0


def write_conv_silu_onnx(path):
    """Model "v": y = SiLU(Conv3x3(x, W) + B), x [N, 16, 24, 24], pads 1 (a fused graph-API convolution
    on CUDA). Returns (W, B) for the reference."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    c = CONV_SHAPE[0]
    rng = np.random.default_rng(11)
    w = (rng.standard_normal((c, c, 3, 3)) * 0.1).astype(np.float32)
    b = (rng.standard_normal(c) * 0.1).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    g = helper.make_graph(nodes, "conv_silu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *CONV_SHAPE])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", *CONV_SHAPE])],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return w, b


def conv_silu_reference(x, w, b):
    """NumPy: SiLU(conv3x3(x, w) + b) with padding 1, in float64."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # N, C, H, W, 3, 3
    y = np.einsum("nchwij,kcij->nkhw", win, w.astype(np.float64)) + b.astype(np.float64)[None, :, None, None]
    return y / (1 + np.exp(-y))


def compiled_plans_on_restart(server_bin, backend, build, repo, work, expect, conv_wb):
    """Model "v" was built (and its engine cached) by the first server. A new server loads the cached
    engine: every plan its warm-up resolves loads from the engine file; none is built."""
    import triton_gpu as tg
    cached = list((repo / "v" / "1").glob("model.onnx.*.kiln"))
    expect(len(cached) == 1 and ".fp16.level0.batch1-4-4." in cached[0].name,
           f"model v: one cached engine named by its build settings ({[p.name for p in cached]})")
    if not cached:
        return
    info = subprocess.run([str(Path(build) / "kiln"), "inspect", "--engine", str(cached[0]), "--json"],
                          capture_output=True, text=True)
    try:
        line = json.loads(info.stdout)["build_info"].get("compiled_plans", "")
    except ValueError:
        line = f"kiln inspect failed: {info.stdout[-300:]} {info.stderr[-300:]}"
    count = int(line.split()[0]) if line[:1].isdigit() else 0
    expect(count >= 4, f"model v's cached engine carries compiled plans for batch 1..4: '{line}'")
    log_path = work / "server_plans.log"
    server, http_port = tg.start_server(server_bin, repo, backend.parent.parent, log_path,
                                        ["--model-control-mode=explicit", "--load-model=v", "--log-verbose=1"])
    try:
        tg.wait_ready(http_port, server, timeout=300)
        c = tg.Client(http_port)
        worst = 0.0
        for n in (1, 2, 3, 4):
            x = np.random.default_rng(40 + n).standard_normal((n, *CONV_SHAPE)).astype(np.float32)
            ref = conv_silu_reference(x, *conv_wb)
            worst = max(worst, float(np.abs(c.infer("v", "x", x, "y") - ref).max() / np.abs(ref).max()))
        expect(worst < 1e-2, f"model v after the restart, batch 1..4: within 1e-2 of the range of the NumPy "
                             f"reference (worst {worst:.2e})")
        lines = [ln for ln in log_path.read_text().splitlines() if "kiln: " in ln and ": engine " in ln]
        loaded = [ln for ln in lines if "nothing built" in ln]
        built = [ln for ln in lines if "configs built so far" in ln]
        from_file = [ln for ln in loaded if "the engine file's compiled plan" in ln]
        expect(loaded and not built and from_file,
               f"the restarted server built no cuDNN plan: {len(loaded)} loaded ({len(from_file)} from the engine "
               f"file), {len(built)} built{(': ' + built[0][-300:]) if built else ''}")
    except Exception as e:  # noqa: BLE001
        expect(False, f"compiled plans on restart: {e!r}; server log: {log_path.read_text()[-1500:]}")
    finally:
        tg.stop_server(server)


def reloads(server_bin, backend, repo, work, expect, cycles=50):
    """Unload/load the CUDA model `cycles` times in explicit mode: no growth of GPU or host memory."""
    import triton_gpu as tg
    server, http_port = tg.start_server(server_bin, repo, backend.parent.parent, work / "server_reload.log",
                                        ["--model-control-mode=explicit", "--load-model=g"])
    try:
        tg.wait_ready(http_port, server, timeout=300)
        c = tg.Client(http_port)
        x = np.random.default_rng(5).standard_normal((2, WIDTH)).astype(np.float32)

        def cycle():
            for action in ("unload", "load"):
                status, body = c.post(f"/v2/repository/models/g/{action}", {})
                if status != 200:
                    raise RuntimeError(f"{action} of model g: HTTP {status}: {body[:300]!r}")
            return c.infer("g", "x", x, "y")

        for _ in range(3):  # the allocators' steady state
            cycle()
        gpu0, rss0 = gpu_memory_used_mib(), rss_mib(server.pid)
        for _ in range(cycles):
            out = cycle()
        gpu, rss = gpu_memory_used_mib() - gpu0, rss_mib(server.pid) - rss0
        expect(gpu < 64, f"{cycles} unload/load cycles of the CUDA model: the GPU's used memory grew {gpu} MiB "
                         "(bound 64)")
        expect(rss < 100, f"... and the server's resident memory grew {rss} MiB (bound 100)")
        expect(np.array_equal(out, np.maximum(x, 0)), "the reloaded model still answers correctly")
    except Exception as e:  # noqa: BLE001
        expect(False, f"reloads: {e!r}; server log: {(work / 'server_reload.log').read_text()[-1500:]}")
    finally:
        tg.stop_server(server)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--server")
    args = ap.parse_args()
    import triton_gpu as tg
    server_bin = find_server(args.server)
    backend = Path(args.build) / "triton" / "kiln" / "libtriton_kiln.so"
    if not server_bin or not Path(server_bin).exists() or not backend.exists():
        print("skipped: no tritonserver or no libtriton_kiln.so")
        return SKIP
    try:
        cuda = tg.Cuda()
    except RuntimeError as e:
        print(f"skipped: {e}")
        return SKIP
    probe = subprocess.run([str(Path(args.build) / "kiln"), "version"], capture_output=True, text=True)
    if "cuda backend: built in" not in probe.stdout:
        print("skipped: this kiln build has no CUDA backend")
        return SKIP
    work = Path(tempfile.mkdtemp(prefix="kiln-triton-shm-"))
    repo = work / "repo"
    for name, width, device, batcher in (("g", WIDTH, "cuda", True), ("b", BIG, "cuda", True), ("c", 4, "cpu", False)):
        (repo / name / "1").mkdir(parents=True)
        tg.write_relu_onnx(repo / name / "1" / "model.onnx", width)
        (repo / name / "config.pbtxt").write_text(
            'backend: "kiln"\nmax_batch_size: 8\n' +
            ("dynamic_batching { max_queue_delay_microseconds: 5000 }\n" if batcher else "") +
            f'parameters {{ key: "device" value {{ string_value: "{device}" }} }}\n')
    (repo / "v" / "1").mkdir(parents=True)
    conv_wb = write_conv_silu_onnx(repo / "v" / "1" / "model.onnx")
    (repo / "v" / "config.pbtxt").write_text(
        'backend: "kiln"\nmax_batch_size: 4\ndynamic_batching { max_queue_delay_microseconds: 2000 }\n' +
        "".join(f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n'
                for k, v in (("device", "cuda"), ("precision", "fp16"), ("builder_optimization_level", "0"))))
    server, http_port = tg.start_server(server_bin, repo, backend.parent.parent, work / "server.log")
    failures = []

    def expect(ok, what):
        print(("ok:     " if ok else "FAILED: ") + what, flush=True)
        if not ok:
            failures.append(what)

    try:
        tg.wait_ready(http_port, server, timeout=300)
        c = tg.Client(http_port)
        rng = np.random.default_rng(3)
        x = rng.standard_normal((1, WIDTH)).astype(np.float32)
        regions = tg.CudaRegions(cuda, c, "single", x, x.nbytes)
        try:
            for what, kw in (("input and output in GPU memory", {"shm_in": regions.shm_in, "shm_out": regions.shm_out}),
                             ("input in GPU memory", {"shm_in": regions.shm_in}),
                             ("output in GPU memory", {"shm_out": regions.shm_out})):
                cuda.upload(regions.ptrs[1], np.full(x.shape, np.nan, np.float32))
                res = c.infer("g", "x", None if "shm_in" in kw else x, "y", shape=x.shape, **kw)
                got = cuda.download(regions.ptrs[1], x.shape) if "shm_out" in kw else res
                expect(np.array_equal(got, np.maximum(x, 0)), f"CUDA model, {what}: equals Relu(x)")
        finally:
            regions.close()

        before = tg.stats(http_port, "g")
        wrong, errors = [], []

        def client(i):
            cl = tg.Client(http_port)
            r = np.random.default_rng(100 + i)
            xi = r.standard_normal((1, WIDTH)).astype(np.float32)
            reg = tg.CudaRegions(cuda, cl, f"t{i}", xi, xi.nbytes)
            try:
                for k in range(40):
                    xi = r.standard_normal((1, WIDTH)).astype(np.float32)
                    if (k + i) % 2:
                        cuda.upload(reg.ptrs[0], xi)
                        cl.infer("g", "x", None, "y", shm_in=reg.shm_in, shm_out=reg.shm_out, shape=xi.shape)
                        got = cuda.download(reg.ptrs[1], xi.shape)
                    else:
                        got = cl.infer("g", "x", xi, "y")
                    if not np.array_equal(got, np.maximum(xi, 0)):
                        wrong.append((i, k))
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(f"client {i}: {e}")
            finally:
                reg.close()

        run_threads(client, 8)
        after = tg.stats(http_port, "g")
        execs = after["executions"] - before["executions"]
        infs = after["inferences"] - before["inferences"]
        expect(not errors, f"8 clients mixing GPU-memory and plain requests: no errors {errors[:2]}")
        expect(not wrong and infs == 320, f"every one of the {infs} responses equals Relu of its own input "
                                          f"({len(wrong)} wrong)")
        expect(execs < infs, f"the dynamic batcher grouped them: {execs} executions for {infs} inferences")

        big_wrong, big_errors = [], []

        def big_client(i):
            cl = tg.Client(http_port)
            r = np.random.default_rng(200 + i)
            try:
                for k in range(20):
                    xi = r.standard_normal((1, BIG)).astype(np.float32)
                    if not np.array_equal(cl.infer("b", "x", xi, "y"), np.maximum(xi, 0)):
                        big_wrong.append((i, k))
            except Exception as e:  # noqa: BLE001 (reported below)
                big_errors.append(f"client {i}: {e}")

        run_threads(big_client, 4)
        expect(not big_errors and not big_wrong,
               f"4 clients, 80 requests of {BIG * 4} bytes: every response equals Relu of its own input "
               f"({len(big_wrong)} wrong, errors {big_errors[:2]})")

        for ok, what in tg.cpu_model_refuses_gpu_memory(cuda, c, "c"):
            expect(ok, what)
        expect(tg.Client(http_port).get("/v2/health/live")[0] == 200, "the server is live")
        tg.stop_server(server)
        compiled_plans_on_restart(server_bin, backend, args.build, repo, work, expect, conv_wb)
        reloads(server_bin, backend, repo, work, expect)
    except Exception as e:  # noqa: BLE001
        failures.append(repr(e))
        print("FAILED:", repr(e))
        print("server log (last 30 lines):\n" + "\n".join((work / "server.log").read_text().splitlines()[-30:]))
    finally:
        tg.stop_server(server)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
