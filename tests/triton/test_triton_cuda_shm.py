#!/usr/bin/env python3
"""kiln's Triton backend with request data in GPU memory (CUDA shared memory regions, registered
with the server the way tritonclient's cuda_shared_memory module does it; here through ctypes and
libcudart, bench/triton_gpu.py's Cuda and Client). Needs a GPU: exits 77 (skipped) without a CUDA
device, without a CUDA build of kiln, or without a tritonserver.

Checks, on a CUDA model built by the backend at load (Relu over [N, 4096], dynamic batching) and a
CPU model:
  * input and output in GPU memory, only the input, only the output: each equals Relu(x);
  * 8 client threads at once, each alternating GPU-memory and plain requests with its own random
    inputs, batched together by the dynamic batcher (mixed host and device segments in one
    execution): every response equals Relu of its own input, and batches did form;
  * the CPU model answers a GPU-memory input and a GPU-memory output with an error naming the
    tensor, then still serves a plain request; the server is live at the end.

Usage: python3 tests/triton/test_triton_cuda_shm.py --build BUILD [--server TRITONSERVER]
"""
import argparse
import os
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


def find_server(given):
    if given:
        return given
    try:
        import pytriton
        return str(Path(pytriton.__file__).parent / "tritonserver" / "bin" / "tritonserver")
    except ImportError:
        return None


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
    for name, width, device, batcher in (("g", WIDTH, "cuda", True), ("c", 4, "cpu", False)):
        (repo / name / "1").mkdir(parents=True)
        tg.write_relu_onnx(repo / name / "1" / "model.onnx", width)
        (repo / name / "config.pbtxt").write_text(
            'backend: "kiln"\nmax_batch_size: 8\n' +
            ("dynamic_batching { max_queue_delay_microseconds: 5000 }\n" if batcher else "") +
            f'parameters {{ key: "device" value {{ string_value: "{device}" }} }}\n')
    http_port, grpc_port, metrics_port = tg.free_ports(3)
    log = open(work / "server.log", "w")
    server = subprocess.Popen([server_bin, f"--model-repository={repo}", f"--backend-directory={backend.parent.parent}",
                               "--http-address=127.0.0.1", f"--http-port={http_port}", "--grpc-address=127.0.0.1",
                               f"--grpc-port={grpc_port}", "--metrics-address=127.0.0.1",
                               f"--metrics-port={metrics_port}", "--allow-gpu-metrics=false"],
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
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

        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        after = tg.stats(http_port, "g")
        execs = after["executions"] - before["executions"]
        infs = after["inferences"] - before["inferences"]
        expect(not errors, f"8 clients mixing GPU-memory and plain requests: no errors {errors[:2]}")
        expect(not wrong and infs == 320, f"every one of the {infs} responses equals Relu of its own input "
                                          f"({len(wrong)} wrong)")
        expect(execs < infs, f"the dynamic batcher grouped them: {execs} executions for {infs} inferences")

        for ok, what in tg.cpu_model_refuses_gpu_memory(cuda, c, "c"):
            expect(ok, what)
        expect(tg.Client(http_port).get("/v2/health/live")[0] == 200, "the server is live")
    except Exception as e:  # noqa: BLE001
        failures.append(repr(e))
        print("FAILED:", repr(e))
        print("server log (last 30 lines):\n" + "\n".join((work / "server.log").read_text().splitlines()[-30:]))
    finally:
        tg.stop_server(server)
        log.close()
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
