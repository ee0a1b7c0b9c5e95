#!/usr/bin/env python3
"""Triton Inference Server with kiln's backend on a GPU, against `kiln bench` on the same engine, in
one run: what a client gets through the server (correctness and throughput at several concurrencies
with dynamic batching) and what the server adds per request (from Triton's own statistics).

Needs only the standard library and numpy on the client side (no tritonclient: machines without a
network may lack its dependencies): requests use the KServe v2 HTTP protocol with Triton's binary
tensor extension over keep-alive connections, one per client thread. The server is any tritonserver
binary with the kiln backend beside it, e.g. the one in PyPI's nvidia-pytriton wheel
(`unzip nvidia_pytriton-*.whl -d DIR`: DIR/pytriton/tritonserver/bin/tritonserver).

What is measured:
  * correctness: the server's output for a random batch-1 request against `kiln run` on the same
    engine and input (max abs difference; both run the same kernels, so it should be 0 or tiny),
  * closed-loop throughput and p50/p99 latency at each --concurrency (client threads, batch-1
    requests, dynamic batching, --instances contexts), against `kiln bench --streams INSTANCES` at
    batch 1 and at the mean batch the server formed (from its statistics),
  * per-request server time at concurrency 1 (Triton's statistics: request, queue, compute phases)
    against kiln bench's mean latency at batch 1: what the server adds.

  * with --python-backend: the peer, PyTorch served by the same tritonserver through Triton's
    Python backend (bench/triton_torch_model.py: torchvision's ResNet-50 with the weights kiln's
    model was exported from, fp16, channels-last, a CUDA graph per batch size), same batching and
    instances; throughput and p50/p99 of both at each concurrency, in alternating rounds, and the
    ratios. Needs --torchvision-resnet50 (both sides then serve the same network and weights).
  * with --cuda-shm: requests whose input and output live in GPU memory (CUDA shared memory
    regions registered with the server, as tritonclient's cuda_shared_memory does it; here through
    ctypes and libcudart): correctness against `kiln run`, what the server adds per request over
    `kiln bench --no-data-transfers`, and the errors a CPU model gives such requests.

Usage: python3 bench/triton_gpu.py --build build-gpu --server DIR/pytriton/tritonserver/bin/tritonserver \\
           (--onnx model.onnx | --torchvision-resnet50) [--input input --output logits --shape 3x224x224] [--fp16]
           [--python-backend DIR] [--cuda-shm] [--out FILE.md]
  DIR (--python-backend): a folder with Triton's libtriton_python.so, triton_python_backend_utils.py and the
  triton_python_backend_stub built for this Python (nvidia-pytriton ships them under
  pytriton/tritonserver/backends/python and pytriton/tritonserver/python_backend_stubs/3.X); the libraries
  they need must be on LD_LIBRARY_PATH (the wheel's nvidia_pytriton.libs).
"""
import argparse
import base64
import ctypes
import ctypes.util
import datetime
import glob
import http.client
import json
import os
import shutil
import signal
import subprocess
import statistics
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from triton_serving import equal_p99_lines, free_ports  # noqa: E402


class Cuda:
    """The few CUDA runtime calls a client needs for CUDA shared memory (libcudart through ctypes)."""

    H2D, D2H = 1, 2

    def __init__(self):
        names = ["libcudart.so", "libcudart.so.13", "libcudart.so.12", ctypes.util.find_library("cudart")]
        names += sorted(glob.glob("/usr/local/cuda*/lib64/libcudart.so*"))
        for sp in sys.path:  # PyTorch's CUDA wheels keep the runtime under nvidia/
            names += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib", "libcudart.so*")))
        self.rt = None
        for n in names:
            if not n:
                continue
            try:
                self.rt = ctypes.CDLL(n)
                break
            except OSError:
                continue
        if self.rt is None:
            raise RuntimeError("no libcudart found (CUDA shared memory needs the CUDA runtime)")
        self.rt.cudaGetErrorString.restype = ctypes.c_char_p
        count = ctypes.c_int(0)
        if self.rt.cudaGetDeviceCount(ctypes.byref(count)) != 0 or count.value == 0:
            raise RuntimeError("no CUDA device")

    def check(self, rc, what):
        if rc != 0:
            raise RuntimeError(f"{what}: CUDA error {rc} ({self.rt.cudaGetErrorString(rc).decode()})")

    def malloc(self, n):
        p = ctypes.c_void_p()
        self.check(self.rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)), "cudaMalloc")
        return p

    def free(self, p):
        self.rt.cudaFree(p)

    def ipc_handle(self, p):
        h = (ctypes.c_byte * 64)()
        self.check(self.rt.cudaIpcGetMemHandle(ctypes.byref(h), p), "cudaIpcGetMemHandle")
        return bytes(h)

    def upload(self, p, a):
        a = np.ascontiguousarray(a)
        self.check(self.rt.cudaMemcpy(p, a.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(a.nbytes), self.H2D),
                   "cudaMemcpy to the device")

    def download(self, p, shape, dtype=np.float32):
        a = np.empty(shape, dtype=dtype)
        self.check(self.rt.cudaMemcpy(a.ctypes.data_as(ctypes.c_void_p), p, ctypes.c_size_t(a.nbytes), self.D2H),
                   "cudaMemcpy to the host")
        return a


class Client:
    """One keep-alive HTTP connection speaking KServe v2 with binary tensors (or CUDA shared memory)."""

    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def get(self, path):
        self.conn.request("GET", path)
        r = self.conn.getresponse()
        body = r.read()
        return r.status, body

    def post(self, path, doc):
        self.conn.request("POST", path, body=json.dumps(doc).encode(), headers={"Content-Type": "application/json"})
        r = self.conn.getresponse()
        return r.status, r.read()

    def register_cuda_region(self, cuda, name, ptr, nbytes):
        status, body = self.post(f"/v2/cudasharedmemory/region/{name}/register",
                                 {"raw_handle": {"b64": base64.b64encode(cuda.ipc_handle(ptr)).decode()},
                                  "device_id": 0, "byte_size": nbytes})
        if status != 200:
            raise RuntimeError(f"registering CUDA shared memory region {name}: HTTP {status}: {body[:300]!r}")

    def unregister_cuda_region(self, name):
        self.post(f"/v2/cudasharedmemory/region/{name}/unregister", {})

    def request(self, model, inp_name, x, out_name, shm_in=None, shm_out=None, shape=None, datatype="FP32"):
        """Returns (HTTP status, body, header length). shm_in / shm_out: (region, bytes) to take the input
        from / write the output to instead of the request and response bodies."""
        shape = list(x.shape) if x is not None else list(shape)
        inp = {"name": inp_name, "shape": shape, "datatype": datatype}
        if shm_in:
            inp["parameters"] = {"shared_memory_region": shm_in[0], "shared_memory_byte_size": shm_in[1]}
        else:
            inp["parameters"] = {"binary_data_size": x.nbytes}
        out = {"name": out_name, "parameters": {"binary_data": True}}
        if shm_out:
            out["parameters"] = {"shared_memory_region": shm_out[0], "shared_memory_byte_size": shm_out[1]}
        header = json.dumps({"inputs": [inp], "outputs": [out]}).encode()
        headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(header))}
        body = header if shm_in else header + x.tobytes()
        self.conn.request("POST", f"/v2/models/{model}/infer", body=body, headers=headers)
        r = self.conn.getresponse()
        data = r.read()
        return r.status, data, int(r.getheader("Inference-Header-Content-Length", len(data)))

    def infer(self, model, inp_name, x, out_name, shm_in=None, shm_out=None, shape=None):
        status, data, n = self.request(model, inp_name, x, out_name, shm_in, shm_out, shape)
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {data[:300]!r}")
        meta = json.loads(data[:n])
        out = meta["outputs"][0]
        if shm_out:
            return out["shape"]
        if "data" in out:  # the server answered in JSON
            return np.array(out["data"], dtype=np.float32).reshape(out["shape"])
        size = out.get("parameters", {}).get("binary_data_size", 0)
        if len(data) < n + size or size == 0:
            raise RuntimeError(f"response of {len(data)} bytes, header {n}: {data[:400]!r}")
        return np.frombuffer(data[n:n + size], dtype=np.float32).reshape(out["shape"])


def wait_for(port, proc, path, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"tritonserver exited with {proc.returncode}")
        try:
            if Client(port).get(path)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"tritonserver: {path} not answering after {timeout} s")


def start_server(binary, repo, backends, log_path, extra=(), env=None):
    """tritonserver on free loopback ports in its own process group, its output in log_path.
    Returns (process, HTTP port); stop it with stop_server."""
    http_port, grpc_port, metrics_port = free_ports(3)
    with open(log_path, "w") as log:  # the server keeps its own descriptor
        proc = subprocess.Popen([str(binary), f"--model-repository={repo}", f"--backend-directory={backends}",
                                 "--http-address=127.0.0.1", f"--http-port={http_port}", "--grpc-address=127.0.0.1",
                                 f"--grpc-port={grpc_port}", "--metrics-address=127.0.0.1",
                                 f"--metrics-port={metrics_port}", "--allow-gpu-metrics=false", *extra],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    return proc, http_port


def stop_server(proc):
    """SIGTERM to the server's process group, SIGKILL after 30 s (nothing if it has exited)."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def wait_ready(port, proc, timeout=300):
    wait_for(port, proc, "/v2/health/ready", timeout)


def wait_live(port, proc, timeout=600):
    """Triton answers on HTTP once it has tried to load every model (loaded or failed)."""
    wait_for(port, proc, "/v2/health/live", timeout)


def stats(port, model):
    status, body = Client(port).get(f"/v2/models/{model}/stats")
    if status != 200:
        raise RuntimeError(f"stats: HTTP {status}")
    s = json.loads(body)["model_stats"][0]
    inf = s["inference_stats"]
    out = {k: (int(v.get("count", 0)), int(v.get("ns", 0))) for k, v in inf.items()}
    out["executions"] = int(s.get("execution_count", 0))
    out["inferences"] = int(s.get("inference_count", 0))
    return out


def kiln_bench(kiln, engine, shape_arg, streams, duration, extra=()):
    cmd = [kiln, "bench", "--engine", engine, "--shapes", shape_arg, "--duration", str(duration), "--json",
           "--streams", str(streams), "--warmup", "200ms"] + list(extra)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"kiln bench failed: {r.stderr[-800:]}")
    j = json.loads(r.stdout[r.stdout.index("{"):])
    return j


class CudaRegions:
    """A client's input region (holding x) and output region in GPU memory, registered with the server."""

    def __init__(self, cuda, client, tag, x, out_bytes):
        self.cuda, self.client = cuda, client
        self.names = (f"in_{tag}", f"out_{tag}")
        self.sizes = (x.nbytes, out_bytes)
        self.ptrs = (cuda.malloc(x.nbytes), cuda.malloc(out_bytes))
        cuda.upload(self.ptrs[0], x)
        for name, ptr, n in zip(self.names, self.ptrs, self.sizes):
            client.register_cuda_region(cuda, name, ptr, n)

    @property
    def shm_in(self):
        return (self.names[0], self.sizes[0])

    @property
    def shm_out(self):
        return (self.names[1], self.sizes[1])

    def close(self):
        for name, ptr in zip(self.names, self.ptrs):
            try:
                self.client.unregister_cuda_region(name)
            finally:
                self.cuda.free(ptr)


def load_threads(port, model, inp, outp, x, threads, duration, start_at=None, cuda=None, out_bytes=0, tag=""):
    """Closed loop in this process: `threads` threads, each sending batch-1 requests from start_at (after
    its warm-up request) for `duration` s; with `cuda` (True in a child process: its own), each thread's
    input and output live in its own CUDA shared memory regions. Returns (latencies in s, errors)."""
    if cuda is True:
        cuda = Cuda()
    lat = [[] for _ in range(threads)]
    errors = []
    start = [start_at]
    barrier = threading.Barrier(threads, action=lambda: start.__setitem__(0, start[0] or time.perf_counter()))
    perf_offset = time.perf_counter() - time.time()  # start_at is wall-clock time (shared by processes)

    def worker(i):
        c = Client(port)
        regions = None
        try:
            kw = {}
            if cuda is not None:
                regions = CudaRegions(cuda, c, f"{model}_{tag}_{i}_{os.getpid()}", x, out_bytes)
                kw = {"shm_in": regions.shm_in, "shm_out": regions.shm_out, "shape": x.shape}
            xin = None if cuda else x
            c.infer(model, inp, xin, outp, **kw)  # connection warm
            barrier.wait()
            t_start = start[0] + perf_offset if start_at else start[0]
            if time.perf_counter() > t_start + 0.2:
                raise RuntimeError("the warm-up ended after the timed run should have started")
            while time.perf_counter() < t_start:
                time.sleep(0.0005)
            stop = t_start + duration
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                c.infer(model, inp, xin, outp, **kw)
                lat[i].append(time.perf_counter() - t0)
        except threading.BrokenBarrierError:
            pass
        except Exception as e:  # noqa: BLE001 (reported by the caller)
            errors.append(str(e))
            barrier.abort()
        finally:
            if regions:
                regions.close()

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return [v for lst in lat for v in lst], errors


def load(port, model, args, x, conc, duration, cuda=None, out_bytes=0):
    """Closed loop: conc client threads spread over up to --client-processes processes (one Python
    process with many threads is itself the bottleneck at a few thousand requests/s), batch-1 requests
    for `duration` s."""
    if getattr(args, "load_generator", "python") == "perf_analyzer":
        from triton_serving import load_pa
        extra = ["--shared-memory", "cuda", "--output-shared-memory-size", str(out_bytes)] if cuda else []
        r = load_pa(f"127.0.0.1:{port}", model, conc, duration, tempfile.gettempdir(), extra=extra)
        if r["errors"]:
            raise RuntimeError(f"concurrency {conc}: {r['errors'][0]}")
        return {"requests": int(r["throughput"] * duration), "qps": r["throughput"], "p50": r["p50"], "p99": r["p99"]}
    procs = max(1, min(conc, args.client_processes))
    if procs == 1:
        lat, errors = load_threads(port, model, args.input, args.output, x, conc, duration, cuda=cuda,
                                   out_bytes=out_bytes, tag=str(conc))
    else:
        import multiprocessing as mp
        ctx = mp.get_context("spawn")  # CUDA (for shared memory) must not be initialized before a fork
        start_at = time.time() + 4.0
        split = [conc // procs + (1 if i < conc % procs else 0) for i in range(procs)]
        with ctx.Pool(procs) as pool:
            results = pool.starmap(load_threads, [
                (port, model, args.input, args.output, x, n, duration, start_at, True if cuda is not None else None, out_bytes,
                 f"{conc}p{i}")
                for i, n in enumerate(split)])
        lat = [v for r in results for v in r[0]]
        errors = [e for r in results for e in r[1]]
    allv = np.array(sorted(lat)) * 1e3
    if errors or len(allv) == 0:
        raise RuntimeError(f"concurrency {conc}: {len(allv)} requests timed, errors {errors[:3]}")
    return {"requests": len(allv), "qps": len(allv) / duration, "p50": float(np.percentile(allv, 50)),
            "p99": float(np.percentile(allv, 99))}


def write_relu_onnx(path, width=4):
    """A small model for the CUDA shared memory checks: y = Relu(x), x [N, width]."""
    import onnx
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", width])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def model_ready(port, model):
    return Client(port).get(f"/v2/models/{model}/ready")[0] == 200


def phase_means(before, after):
    d = {k: (after[k][0] - before[k][0], after[k][1] - before[k][1]) for k in after if isinstance(after[k], tuple)}
    n = max(1, d["success"][0])
    return n, {k: d[k][1] / n / 1e3 for k in d}


def check_build(build, python_backend):
    """The kiln command and the folder holding kiln's Triton backend in a build folder; exits with
    what is missing (the backend, or the Python backend's stub)."""
    backend_dir = Path(build) / "triton"
    if not (backend_dir / "kiln" / "libtriton_kiln.so").exists():
        sys.exit(f"no {backend_dir}/kiln/libtriton_kiln.so: build kiln with KILN_BUILD_TRITON_BACKEND=ON")
    if python_backend and not (Path(python_backend) / "triton_python_backend_stub").exists():
        sys.exit(f"no triton_python_backend_stub in {python_backend} (see --help)")
    return str(Path(build) / "kiln"), backend_dir


def with_python_backend(work, backend_dir, python_backend, env):
    """A backends folder with kiln's and Triton's Python backend, and the environment the Python stub
    needs (it embeds this Python: libpython and the packages torch lives in). Returns the folder."""
    import torch
    backends = work / "backends"
    backends.mkdir()
    os.symlink((backend_dir / "kiln").resolve(), backends / "kiln")
    os.symlink(Path(python_backend).resolve(), backends / "python")
    env["LD_LIBRARY_PATH"] = sysconfig.get_config_var("LIBDIR") + ":" + env.get("LD_LIBRARY_PATH", "")
    env["PYTHONPATH"] = ":".join([str(Path(torch.__file__).resolve().parents[1])] + sys.path[1:])
    return backends


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True, help="kiln build folder (kiln, triton/kiln/libtriton_kiln.so)")
    ap.add_argument("--server", required=True, help="the tritonserver binary")
    ap.add_argument("--onnx", help="the model kiln serves")
    ap.add_argument("--torchvision-resnet50", action="store_true",
                    help="export torchvision's ResNet-50 (random weights, seed 0) and serve that (needs torch)")
    ap.add_argument("--python-backend", help="Triton's Python backend folder: serve PyTorch beside kiln as the peer")
    ap.add_argument("--cuda-shm", action="store_true", help="also requests with inputs and outputs in GPU memory")
    ap.add_argument("--input", default="input")
    ap.add_argument("--output", default="logits")
    ap.add_argument("--shape", default="3x224x224", help="one item's dims (without the batch)")
    ap.add_argument("--fp16", action="store_true")
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--instances", type=int, default=2)
    ap.add_argument("--queue-delay-us", type=int, default=100)
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of the kiln / PyTorch comparison")
    ap.add_argument("--client-processes", type=int, default=4,
                    help="client processes the concurrency's threads are spread over (default 4)")
    ap.add_argument("--load-generator", choices=("python", "perf_analyzer"), default="python",
                    help="python (default: the threads above, needs only numpy) or perf_analyzer (Triton's, on PATH: "
                         "random batch-1 requests; with --cuda-shm its own CUDA shared memory regions)")
    ap.add_argument("--copy-threads-ab", type=int, default=0, metavar="N",
                    help="also serve the engine as model d{N}, like d but with input_copy_threads N, and time it the "
                         "same way (the server log's per-instance input copy lines compare d and dN)")
    ap.add_argument("--out", help="write the report (markdown) here too")
    args = ap.parse_args()
    if bool(args.onnx) == args.torchvision_resnet50:
        sys.exit("give --onnx MODEL or --torchvision-resnet50")
    if args.python_backend and not args.torchvision_resnet50:
        sys.exit("--python-backend serves torchvision's ResNet-50: use it with --torchvision-resnet50")
    kiln, backend_dir = check_build(args.build, args.python_backend)
    item = [int(d) for d in args.shape.split("x")]
    work = Path(tempfile.mkdtemp(prefix="kiln-triton-gpu-"))
    if args.torchvision_resnet50:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _common import export_resnet50
        args.onnx = str(work / "resnet50.onnx")
        export_resnet50(args.onnx)
    repo = work / "repo"
    (repo / "m" / "1").mkdir(parents=True)
    engine = repo / "m" / "1" / "model.kiln"
    dims = lambda b: "x".join(str(d) for d in [b] + item)  # noqa: E731
    build = [kiln, "build", "--onnx", args.onnx, "--save-engine", str(engine), "--device", "cuda",
             "--min-shapes", f"{args.input}:{dims(1)}", "--opt-shapes", f"{args.input}:{dims(min(4, args.max_batch))}",
             "--max-shapes", f"{args.input}:{dims(args.max_batch)}"] + (["--fp16"] if args.fp16 else [])
    t0 = time.perf_counter()
    r = subprocess.run(build, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("kiln build failed:\n" + r.stdout[-1500:] + r.stderr[-1500:])
    build_s = time.perf_counter() - t0
    batcher = f"dynamic_batching {{ max_queue_delay_microseconds: {args.queue_delay_us} }}\n"
    (repo / "m" / "config.pbtxt").write_text(
        f'backend: "kiln"\nmax_batch_size: {args.max_batch}\n{batcher}'
        f"instance_group [ {{ count: {args.instances}, kind: KIND_CPU }} ]\n")
    # The same engine as a second model without the dynamic batcher and with one instance: what
    # the server adds per request, without the batcher's queue delay in it.
    (repo / "d" / "1").mkdir(parents=True)
    shutil.copy(engine, repo / "d" / "1" / "model.kiln")
    (repo / "d" / "config.pbtxt").write_text(
        f'backend: "kiln"\nmax_batch_size: {args.max_batch}\ninstance_group [ {{ count: 1, kind: KIND_CPU }} ]\n')
    one_at_a_time = [("m", f"dynamic batching ({args.queue_delay_us} us delay), {args.instances} instances"),
                     ("d", "no dynamic batching, 1 instance")]
    if args.copy_threads_ab:
        ab = f"d{args.copy_threads_ab}"
        (repo / ab / "1").mkdir(parents=True)
        shutil.copy(engine, repo / ab / "1" / "model.kiln")
        (repo / ab / "config.pbtxt").write_text(
            f'backend: "kiln"\nmax_batch_size: {args.max_batch}\ninstance_group [ {{ count: 1, kind: KIND_CPU }} ]\n'
            f'parameters {{ key: "input_copy_threads" value {{ string_value: "{args.copy_threads_ab}" }} }}\n')
        one_at_a_time.append((ab, f"no dynamic batching, 1 instance, input_copy_threads {args.copy_threads_ab}"))
    backends = backend_dir
    if args.python_backend:
        # PyTorch through Triton's Python backend, same batching and instances as model m.
        (repo / "t" / "1").mkdir(parents=True)
        shutil.copy(Path(__file__).resolve().parent / "triton_torch_model.py", repo / "t" / "1" / "model.py")
        (repo / "t" / "config.pbtxt").write_text(
            f'backend: "python"\nmax_batch_size: {args.max_batch}\n{batcher}'
            f"instance_group [ {{ count: {args.instances}, kind: KIND_GPU }} ]\n"
            f'input [ {{ name: "{args.input}", data_type: TYPE_FP32, dims: [ {", ".join(map(str, item))} ] }} ]\n'
            f'output [ {{ name: "{args.output}", data_type: TYPE_FP32, dims: [ 1000 ] }} ]\n'
            f'parameters {{ key: "input" value {{ string_value: "{args.input}" }} }}\n'
            f'parameters {{ key: "output" value {{ string_value: "{args.output}" }} }}\n')
    if args.cuda_shm:  # a CPU model: GPU-memory requests must get errors naming the tensor
        (repo / "c" / "1").mkdir(parents=True)
        write_relu_onnx(repo / "c" / "1" / "model.onnx")
        (repo / "c" / "config.pbtxt").write_text('backend: "kiln"\nmax_batch_size: 8\n')
    env = dict(os.environ)
    if args.python_backend:
        backends = with_python_backend(work, backend_dir, args.python_backend, env)
    server, http_port = start_server(args.server, repo, backends, work / "server.log",
                                     ["--exit-on-error=false", "--strict-readiness=false"], env)
    lines = []
    failures = []
    say = lambda s="": (print(s, flush=True), lines.append(s))  # noqa: E731
    try:
        wait_live(http_port, server)
        for model in [m for m, _ in one_at_a_time] + (["c"] if args.cuda_shm else []):
            if not model_ready(http_port, model):
                raise RuntimeError(f"model {model} did not load")
        peer = bool(args.python_backend) and model_ready(http_port, "t")
        rng = np.random.default_rng(7)
        x = rng.uniform(-1, 1, size=[1] + item).astype(np.float32)
        got = Client(http_port).infer("m", args.input, x, args.output)
        indir, outdir = work / "in", work / "out"
        indir.mkdir()
        np.save(indir / f"{args.input}.npy", x)
        r = subprocess.run([kiln, "run", "--engine", str(engine), "--inputs-dir", str(indir), "--output-dir", str(outdir)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("kiln run failed: " + r.stderr[-800:])
        ref = np.load(outdir / f"{args.output}.npy")
        diff = float(np.max(np.abs(ref.astype(np.float64) - got.astype(np.float64))))
        if diff != 0:
            failures.append(f"the server's output differs from kiln run's by {diff:.3g}")
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True).stdout.strip()
        say(f"# Triton Inference Server + kiln backend on {gpu or 'a GPU'}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
        say()
        say(f"Model `{Path(args.onnx).name}` ({'fp16' if args.fp16 else 'fp32'} engine, batch 1..{args.max_batch}, built in "
            f"{build_s:.1f} s); `{args.instances}` instances (execution contexts, one stream each); dynamic batching "
            f"(queue delay {args.queue_delay_us} us); clients: Python threads in up to "
            f"{args.client_processes} processes, KServe v2 HTTP with binary tensors, batch-1 requests, one keep-alive "
            "connection each, on the same machine" + (" (the load tables: perf_analyzer, HTTP, random inputs)."
                                                      if args.load_generator == "perf_analyzer" else "."))
        say()
        say(f"Correctness: the server's output for a random request against `kiln run` on the same engine: max abs "
            f"difference {diff:.3g} (output {list(got.shape)}).")
        if args.python_backend and not peer:
            say()
            say("**The PyTorch peer (model t, Python backend) did not load**; server log:")
            say("```")
            for ln in (work / "server.log").read_text().splitlines()[-25:]:
                say(ln[:300])
            say("```")
            failures.append("the PyTorch peer did not load")
        if peer:
            tout = Client(http_port).infer("t", args.input, x, args.output)
            pd = float(np.max(np.abs(tout.astype(np.float64) - got.astype(np.float64))))
            scale = float(np.max(np.abs(tout)))
            same_top = int(np.argmax(tout)) == int(np.argmax(got))
            say()
            say(f"PyTorch (Python backend, fp16) against kiln (fp16) on the same request: max abs difference {pd:.3g} "
                f"({pd / scale:.2%} of the largest logit {scale:.3g}); same top-1 class: {same_top}.")
            if pd / scale > 0.05:
                failures.append(f"PyTorch and kiln disagree: {pd:.3g} of {scale:.3g}")
        say()
        b1 = kiln_bench(kiln, str(engine), f"{args.input}:{dims(1)}", 1, args.duration)
        say("| concurrency | server req/s | p50 ms | p99 ms | mean batch formed | kiln bench, "
            f"{args.instances} streams, that batch: items/s | server / kiln bench |")
        say("| --- | --- | --- | --- | --- | --- | --- |")
        phases = []
        concs = [int(c) for c in args.concurrency.split(",")]
        for conc in concs:
            before = stats(http_port, "m")
            try:
                res = load(http_port, "m", args, x, conc, args.duration)
            except RuntimeError as e:
                say(f"| {conc} | failed: {e} | | | | | |")
                failures.append(f"kiln at concurrency {conc}: {e}")
                continue
            after = stats(http_port, "m")
            execs = after["executions"] - before["executions"]
            infs = after["inferences"] - before["inferences"]
            mean_batch = infs / execs if execs else 1.0
            b = max(1, min(args.max_batch, int(round(mean_batch))))
            kb = kiln_bench(kiln, str(engine), f"{args.input}:{dims(b)}", args.instances, args.duration)
            items = kb["throughput_items_per_s"]
            say(f"| {conc} | {res['qps']:.0f} | {res['p50']:.3f} | {res['p99']:.3f} | {mean_batch:.2f} (kiln bench at {b}) "
                f"| {items:.0f} | {res['qps'] / items:.2f}x |")
            n, per = phase_means(before, after)
            phases.append(f"concurrency {conc}: per request (Triton statistics, mean over {n}): " +
                          ", ".join(f"{k} {per[k]:.1f} us" for k in
                                    ("queue", "compute_input", "compute_infer", "compute_output") if k in per) +
                          f"; {execs} executions for {infs} inferences")
        say()
        for line in phases:
            say("* " + line)
        if peer:
            # kiln and PyTorch served by the same server, same batching and instances, in alternating
            # rounds (kiln first in odd rounds, PyTorch first in even ones).
            runs = {}
            peer_stats = {model: [stats(http_port, model)] for model in ("m", "t")}
            for rnd in range(args.rounds):
                for conc in concs:
                    for model in (("m", "t") if rnd % 2 == 0 else ("t", "m")):
                        try:
                            runs.setdefault((model, conc), []).append(load(http_port, model, args, x, conc, args.duration))
                        except RuntimeError as e:
                            failures.append(f"{model} at concurrency {conc}: {e}")
            for model in ("m", "t"):
                peer_stats[model].append(stats(http_port, model))
            say()
            say(f"kiln's backend against PyTorch through Triton's Python backend (same server, model, batching and "
                f"{args.instances} instances; {args.rounds} alternating rounds of {args.duration:g} s per side and "
                "concurrency, medians):")
            say()
            say("| concurrency | kiln req/s | PyTorch req/s | throughput kiln / PyTorch | kiln p50 / p99 ms | "
                "PyTorch p50 / p99 ms | p99 kiln / PyTorch |")
            say("| --- | --- | --- | --- | --- | --- | --- |")
            for conc in concs:
                k, t = runs.get(("m", conc)), runs.get(("t", conc))
                if not k or not t:
                    say(f"| {conc} | failed | | | | | |")
                    continue
                med = lambda rs, f: statistics.median(r[f] for r in rs)  # noqa: E731
                say(f"| {conc} | {med(k, 'qps'):.0f} | {med(t, 'qps'):.0f} | **{med(k, 'qps') / med(t, 'qps'):.2f}x** | "
                    f"{med(k, 'p50'):.3f} / {med(k, 'p99'):.3f} | {med(t, 'p50'):.3f} / {med(t, 'p99'):.3f} | "
                    f"{med(k, 'p99') / med(t, 'p99'):.2f} |")
            say()
            medians = {model: {c: {"throughput": statistics.median(r["qps"] for r in runs[(model, c)]),
                                   "p99": statistics.median(r["p99"] for r in runs[(model, c)])}
                               for c in concs if runs.get((model, c))} for model in ("m", "t")}
            for line in equal_p99_lines("kiln", medians["m"], "PyTorch", medians["t"]):
                say(line)
            say()
            for model, who in (("m", "kiln"), ("t", "PyTorch")):
                n, per = phase_means(*peer_stats[model])
                say(f"* {who}, per request over the comparison (Triton statistics, {n} requests): " +
                    ", ".join(f"{k} {per[k]:.1f} us" for k in ("queue", "compute_input", "compute_infer", "compute_output")
                              if k in per))
            say()
            say("Rounds: " + "; ".join(f"{m}@{c}: " + ", ".join(f"{r['qps']:.0f}" for r in v)
                                      for (m, c), v in sorted(runs.items())) + " req/s.")
        # What the server adds per request: one request at a time, Triton's statistics, with the
        # batcher (model m) and without it (model d, one instance).
        kb_ms = b1["latency_ms"]["mean"]
        for model, what in one_at_a_time:
            before = stats(http_port, model)
            res1 = load(http_port, model, args, x, 1, args.duration)
            n, per = phase_means(before, stats(http_port, model))
            say()
            say(f"One request at a time, {what} ({n} requests): per request, the server's time (Triton statistics) "
                f"{per['success']:.1f} us = queue {per.get('queue', 0):.1f} + input {per.get('compute_input', 0):.1f} + "
                f"inference {per.get('compute_infer', 0):.1f} + output {per.get('compute_output', 0):.1f} us; "
                "`kiln bench` batch 1, 1 stream (CUDA graphs, inputs and outputs copied between host and device, "
                f"as the backend does): {kb_ms * 1e3:.1f} us. **Server adds {per['success'] - kb_ms * 1e3:.1f} us** "
                f"per request over kiln bench; the client saw p50 {res1['p50'] * 1e3:.0f} us (Python client and HTTP "
                "included).")
        if args.cuda_shm:
            cuda_shm_section(args, http_port, kiln, engine, dims, x, ref, say, failures)
    except Exception:
        print("server log (last 40 lines):\n" + "\n".join((work / "server.log").read_text().splitlines()[-40:]))
        raise
    finally:
        stop_server(server)
    copies = [ln[ln.find("kiln backend"):].rstrip('"') for ln in (work / "server.log").read_text(errors="replace").splitlines()
              if "executions; inputs from host memory" in ln]
    if copies:
        say()
        say("Input gathering per instance over the run (the server's log when the models were unloaded):")
        say()
        for ln in copies:
            say("* " + ln)
    if failures:
        say()
        say("**Failed checks:** " + "; ".join(failures))
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
        shutil.copy(work / "server.log", Path(args.out).with_suffix(".server.log"))
    shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failures else 0)


def cpu_model_refuses_gpu_memory(cuda, client, model):
    """CPU model `model` (write_relu_onnx, width 4): an input and an output in GPU memory each get an
    error naming the tensor, then a plain request is still answered. Returns [(ok, what)]."""
    y = np.array([[-1.0, 2.0, -3.0, 4.0]], np.float32)
    results = []
    regions = CudaRegions(cuda, client, f"cpu_{model}_{os.getpid()}", y, y.nbytes)
    try:
        for what, kw, name in (("input in GPU memory", {"shm_in": regions.shm_in}, "x"),
                               ("output in GPU memory", {"shm_out": regions.shm_out}, "y")):
            status, body, _ = client.request(model, "x", None if "shm_in" in kw else y, "y", shape=y.shape, **kw)
            text = body.decode(errors="replace")
            ok = status != 200 and "GPU memory" in text and f"'{name}'" in text and "CPU" in text
            results.append((ok, f"CPU model, {what}: an error naming '{name}' (HTTP {status}: {text[:220]})"))
    finally:
        regions.close()
    plain = client.infer(model, "x", y, "y")
    results.append((np.array_equal(plain, np.maximum(y, 0)),
                    f"CPU model afterwards, a plain request: {plain.tolist()}"))
    return results


def cuda_shm_section(args, port, kiln, engine, dims, x, ref, say, failures):
    """Requests with inputs and outputs in GPU memory (CUDA shared memory regions)."""
    cuda = Cuda()
    out_bytes = ref.nbytes
    c = Client(port)
    say()
    say("## Inputs and outputs in GPU memory (CUDA shared memory)")
    say()
    checks = []
    regions = CudaRegions(cuda, c, f"check_{os.getpid()}", x, out_bytes)
    try:
        for what, kw in (("input and output in GPU memory", {"shm_in": regions.shm_in, "shm_out": regions.shm_out}),
                         ("input in GPU memory, output in the response", {"shm_in": regions.shm_in}),
                         ("input in the request, output in GPU memory", {"shm_out": regions.shm_out})):
            cuda.upload(regions.ptrs[1], np.full(ref.shape, np.nan, np.float32))  # stale output would show
            res = c.infer("d", args.input, None if "shm_in" in kw else x, args.output, shape=x.shape, **kw)
            got = cuda.download(regions.ptrs[1], ref.shape) if "shm_out" in kw else res
            diff = float(np.max(np.abs(got.astype(np.float64) - ref.astype(np.float64))))
            checks.append(f"{what}: max abs difference from `kiln run` {diff:.3g}")
            if not diff == 0:
                failures.append(f"CUDA shared memory, {what}: differs from kiln run by {diff}")
    finally:
        regions.close()
    # A CPU model: GPU-memory requests get an error naming the tensor; the server keeps serving.
    for ok, what in cpu_model_refuses_gpu_memory(cuda, c, "c"):
        checks.append(what)
        if not ok:
            failures.append(what)
    for line in checks:
        say("* " + line)
    nodt = kiln_bench(kiln, str(engine), f"{args.input}:{dims(1)}", 1, args.duration, extra=["--no-data-transfers"])
    kb_ms = nodt["latency_ms"]["mean"]
    before = stats(port, "d")
    res1 = load(port, "d", args, x, 1, args.duration, cuda=cuda, out_bytes=out_bytes)
    n, per = phase_means(before, stats(port, "d"))
    say()
    say(f"One request at a time, no dynamic batching, 1 instance, input and output in CUDA shared memory ({n} "
        f"requests): the server's time {per['success']:.1f} us = queue {per.get('queue', 0):.1f} + input "
        f"{per.get('compute_input', 0):.1f} + inference {per.get('compute_infer', 0):.1f} + output "
        f"{per.get('compute_output', 0):.1f} us; `kiln bench --no-data-transfers` batch 1, 1 stream: "
        f"{kb_ms * 1e3:.1f} us. **Server adds {per['success'] - kb_ms * 1e3:.1f} us** per request; the client saw "
        f"p50 {res1['p50'] * 1e3:.0f} us.")
    say()
    say("| concurrency | req/s, CUDA shared memory | p50 / p99 ms | req/s, request bodies | p50 / p99 ms |")
    say("| --- | --- | --- | --- | --- |")
    for conc in [int(v) for v in args.concurrency.split(",")]:
        try:
            g = load(port, "m", args, x, conc, args.duration, cuda=cuda, out_bytes=out_bytes)
            h = load(port, "m", args, x, conc, args.duration)
        except RuntimeError as e:
            failures.append(f"CUDA shared memory at concurrency {conc}: {e}")
            continue
        say(f"| {conc} | {g['qps']:.0f} | {g['p50']:.3f} / {g['p99']:.3f} | {h['qps']:.0f} | "
            f"{h['p50']:.3f} / {h['p99']:.3f} |")


if __name__ == "__main__":
    main()
