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

Usage: python3 bench/triton_gpu.py --build build-gpu --server DIR/pytriton/tritonserver/bin/tritonserver \\
           --onnx model.onnx [--input input --output logits --shape 3x224x224] [--fp16] [--out FILE.md]
"""
import argparse
import datetime
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from triton_serving import free_ports  # noqa: E402


class Client:
    """One keep-alive HTTP connection speaking KServe v2 with binary tensors."""

    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def get(self, path):
        self.conn.request("GET", path)
        r = self.conn.getresponse()
        body = r.read()
        return r.status, body

    def infer(self, model, inp_name, x, out_name):
        header = json.dumps({
            "inputs": [{"name": inp_name, "shape": list(x.shape), "datatype": "FP32",
                        "parameters": {"binary_data_size": x.nbytes}}],
            "outputs": [{"name": out_name, "parameters": {"binary_data": True}}],
        }).encode()
        body = header + x.tobytes()
        self.conn.request("POST", f"/v2/models/{model}/infer", body=body,
                          headers={"Content-Type": "application/octet-stream",
                                   "Inference-Header-Content-Length": str(len(header))})
        r = self.conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {data[:300]!r}")
        n = int(r.getheader("Inference-Header-Content-Length", len(data)))
        meta = json.loads(data[:n])
        out = meta["outputs"][0]
        return np.frombuffer(data[n:n + out["parameters"]["binary_data_size"]], dtype=np.float32).reshape(out["shape"])


def wait_ready(port, proc, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"tritonserver exited with {proc.returncode}")
        try:
            c = Client(port)
            if c.get("/v2/health/ready")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"tritonserver not ready after {timeout} s")


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


def kiln_bench(kiln, engine, shape_arg, streams, duration):
    cmd = [kiln, "bench", "--engine", engine, "--shapes", shape_arg, "--duration", str(duration), "--json",
           "--streams", str(streams), "--warmup", "200ms"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"kiln bench failed: {r.stderr[-800:]}")
    j = json.loads(r.stdout[r.stdout.index("{"):])
    return j


def load(port, model, args, x, conc, duration):
    """Closed loop: conc threads, each sending batch-1 requests for `duration` s."""
    lat = [[] for _ in range(conc)]
    errors = []
    warm = [0.0] * conc
    stop = [0.0]
    barrier = threading.Barrier(conc, action=lambda: stop.__setitem__(0, time.perf_counter() + duration))

    def worker(i):
        c = Client(port)
        t0 = time.perf_counter()
        try:
            c.infer(model, args.input, x, args.output)  # connection warm
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(f"warm-up: {e}")
            barrier.abort()
            return
        warm[i] = time.perf_counter() - t0
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return
        while time.perf_counter() < stop[0]:
            t0 = time.perf_counter()
            try:
                c.infer(model, args.input, x, args.output)
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(str(e))
                return
            lat[i].append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    allv = np.array(sorted(v for lst in lat for v in lst)) * 1e3
    if errors or len(allv) == 0:
        raise RuntimeError(f"concurrency {conc}: {len(allv)} requests timed, errors {errors[:3]}, "
                           f"warm-up requests took {', '.join(f'{w:.3f}' for w in warm)} s")
    return {"requests": len(allv), "qps": len(allv) / min(wall, duration + 0.5), "p50": float(np.percentile(allv, 50)),
            "p99": float(np.percentile(allv, 99))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True, help="kiln build folder (kiln, triton/kiln/libtriton_kiln.so)")
    ap.add_argument("--server", required=True, help="the tritonserver binary")
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--input", default="input")
    ap.add_argument("--output", default="logits")
    ap.add_argument("--shape", default="3x224x224", help="one item's dims (without the batch)")
    ap.add_argument("--fp16", action="store_true")
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--instances", type=int, default=2)
    ap.add_argument("--queue-delay-us", type=int, default=100)
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--out", help="write the report (markdown) here too")
    args = ap.parse_args()
    kiln = str(Path(args.build) / "kiln")
    backend_dir = Path(args.build) / "triton"
    if not (backend_dir / "kiln" / "libtriton_kiln.so").exists():
        sys.exit(f"no {backend_dir}/kiln/libtriton_kiln.so: build kiln with KILN_BUILD_TRITON_BACKEND=ON")
    item = [int(d) for d in args.shape.split("x")]
    work = Path(tempfile.mkdtemp(prefix="kiln-triton-gpu-"))
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
    (repo / "m" / "config.pbtxt").write_text(
        'backend: "kiln"\n'
        f"max_batch_size: {args.max_batch}\n"
        f"dynamic_batching {{ max_queue_delay_microseconds: {args.queue_delay_us} }}\n"
        f"instance_group [ {{ count: {args.instances}, kind: KIND_CPU }} ]\n")
    # The same engine as a second model without the dynamic batcher and with one instance: what
    # the server adds per request, without the batcher's queue delay in it.
    (repo / "d" / "1").mkdir(parents=True)
    shutil.copy(engine, repo / "d" / "1" / "model.kiln")
    (repo / "d" / "config.pbtxt").write_text(
        'backend: "kiln"\n'
        f"max_batch_size: {args.max_batch}\n"
        "instance_group [ { count: 1, kind: KIND_CPU } ]\n")
    # And once more with 3 helper threads copying the request inputs with the instance's thread
    # (input_copy_threads 3; model d takes the backend's default, 0).
    (repo / "d3" / "1").mkdir(parents=True)
    shutil.copy(engine, repo / "d3" / "1" / "model.kiln")
    (repo / "d3" / "config.pbtxt").write_text(
        'backend: "kiln"\n'
        f"max_batch_size: {args.max_batch}\n"
        "instance_group [ { count: 1, kind: KIND_CPU } ]\n"
        'parameters { key: "input_copy_threads" value { string_value: "3" } }\n')
    http_port, grpc_port, metrics_port = free_ports(3)
    log = open(work / "server.log", "w")
    server = subprocess.Popen([args.server, f"--model-repository={repo}", f"--backend-directory={backend_dir}",
                               "--http-address=127.0.0.1", f"--http-port={http_port}", "--grpc-address=127.0.0.1",
                               f"--grpc-port={grpc_port}", "--metrics-address=127.0.0.1",
                               f"--metrics-port={metrics_port}", "--allow-gpu-metrics=false"],
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    lines = []
    say = lambda s="": (print(s, flush=True), lines.append(s))  # noqa: E731
    try:
        wait_ready(http_port, server)
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
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True).stdout.strip()
        say(f"# Triton Inference Server + kiln backend on {gpu or 'a GPU'}, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
        say()
        say(f"Model `{args.onnx}` ({'fp16' if args.fp16 else 'fp32'} engine, batch 1..{args.max_batch}, built in "
            f"{build_s:.1f} s); `{args.instances}` instances (execution contexts, one stream each); dynamic batching "
            f"(queue delay {args.queue_delay_us} us); clients: Python threads, KServe v2 HTTP with binary tensors, "
            "batch-1 requests, one keep-alive connection each, on the same machine.")
        say()
        say(f"Correctness: the server's output for a random request against `kiln run` on the same engine: max abs "
            f"difference {diff:.3g} (output {list(got.shape)}).")
        say()
        b1 = kiln_bench(kiln, str(engine), f"{args.input}:{dims(1)}", 1, args.duration)
        say("| concurrency | server req/s | p50 ms | p99 ms | mean batch formed | kiln bench, "
            f"{args.instances} streams, that batch: items/s | server / kiln bench |")
        say("| --- | --- | --- | --- | --- | --- | --- |")
        phases = []
        for conc in [int(c) for c in args.concurrency.split(",")]:
            before = stats(http_port, "m")
            try:
                res = load(http_port, "m", args, x, conc, args.duration)
            except RuntimeError as e:
                say(f"| {conc} | failed: {e} | | | | | |")
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
            d = {k: (after[k][0] - before[k][0], after[k][1] - before[k][1]) for k in after
                 if isinstance(after[k], tuple)}
            phases.append(f"concurrency {conc}: per request (Triton statistics, mean over {d['success'][0]}): " +
                          ", ".join(f"{k} {d[k][1] / max(1, d[k][0]) / 1e3:.1f} us" for k in
                                    ("queue", "compute_input", "compute_infer", "compute_output") if k in d) +
                          f"; {execs} executions for {infs} inferences")
        say()
        for line in phases:
            say("* " + line)
        # What the server adds per request: one request at a time, Triton's statistics, with the
        # batcher (model m) and without it (model d, one instance).
        kb_ms = b1["latency_ms"]["mean"]
        for model, what in (("m", f"dynamic batching ({args.queue_delay_us} us delay), {args.instances} instances"),
                            ("d", "no dynamic batching, 1 instance"),
                            ("d3", "no dynamic batching, 1 instance, input_copy_threads 3 (three helper threads "
                                   "copy the inputs with the instance's thread)"),
                            ("d", "no dynamic batching, 1 instance (again, after d3)")):
            before = stats(http_port, model)
            res1 = load(http_port, model, args, x, 1, args.duration)
            after = stats(http_port, model)
            d = {k: (after[k][0] - before[k][0], after[k][1] - before[k][1]) for k in after
                 if isinstance(after[k], tuple)}
            n = max(1, d["success"][0])
            per = {k: d[k][1] / n / 1e3 for k in d}
            say()
            say(f"One request at a time, {what} ({n} requests): per request, the server's time (Triton statistics) "
                f"{per['success']:.1f} us = queue {per.get('queue', 0):.1f} + input {per.get('compute_input', 0):.1f} + "
                f"inference {per.get('compute_infer', 0):.1f} + output {per.get('compute_output', 0):.1f} us; "
                "`kiln bench` batch 1, 1 stream (CUDA graphs, inputs and outputs copied between host and device, "
                f"as the backend does): {kb_ms * 1e3:.1f} us. **Server adds {per['success'] - kb_ms * 1e3:.1f} us** "
                f"per request over kiln bench; the client saw p50 {res1['p50'] * 1e3:.0f} us (Python client and HTTP "
                "included).")
    except Exception:
        print("server log (last 40 lines):\n" + "\n".join((work / "server.log").read_text().splitlines()[-40:]))
        raise
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
        shutil.copy(work / "server.log", Path(args.out).with_suffix(".server.log"))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
