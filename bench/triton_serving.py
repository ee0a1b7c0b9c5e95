#!/usr/bin/env python3
"""kiln's Triton backend against Triton's Python backend running ONNX Runtime, in one run
(issue 17's benchmark, CPU).

Both are served by the same tritonserver (PyPI's nvidia-pytriton): kiln's backend serves the demo
model (scripts/make_demo_model.py, custom layers) from libtriton_kiln.so; PyTriton binds an ONNX
Runtime session on the same network written in standard ops (model_standard.onnx) through Triton's
Python backend. Same batching on both sides (dynamic batcher, max batch 8, --queue-delay-us: 2 ms by
default; Triton's own default is 0), two
model instances each with one CPU thread per instance. A closed-loop load generator (tritonclient
over HTTP, one client per worker thread, batch-1 requests) runs each concurrency for --duration
seconds per side, the sides alternating; throughput and p50/p99 latency per side and the ratios.
kiln bench's latency at batch 1 on the same engine is the server-free baseline (the server and
client overhead per request = server p50 at concurrency 1 - kiln bench's median).

The load generator is Triton's perf_analyzer (--load-generator perf_analyzer, the default when it is
on PATH: scripts/install_deps.sh installs the 2.51.0 program from PyPI's tritonclient 2.51.0 wheel,
since PyPI's perf-analyzer package is an empty placeholder): one run per side and concurrency,
--concurrency-range C, measurement windows of --duration seconds, its CSV's throughput and
p50/p99. `--load-generator python` uses the tritonclient-based closed loop instead.

Usage: python3 bench/triton_serving.py --build build [--duration 10] [--concurrency 1,4,16] [--rounds 2]
           [--load-generator perf_analyzer|python] [--out FILE.md]
"""
import argparse
import datetime
import json
import multiprocessing as mp
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CONFIG = """backend: "kiln"
max_batch_size: 8
dynamic_batching {{ max_queue_delay_microseconds: {delay} }}
instance_group [ {{ count: 2, kind: KIND_CPU }} ]
parameters {{ key: "threads" value {{ string_value: "1" }} }}
"""


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def wait_ready(url, proc, timeout=180):
    import tritonclient.http as http
    client = http.InferenceServerClient(url)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if client.is_server_ready():
                return
        except Exception:  # noqa: BLE001 (not up yet)
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} not ready after {timeout} s")


# PyTriton restricts its server's model-repository, statistics and shared-memory endpoints to
# requests carrying this header (TritonSecurityConfig); perf_analyzer reads the model's
# configuration and statistics, so both sides' runs send it (kiln's server ignores it).
ACCESS_TOKEN = "kiln-bench-" + os.urandom(8).hex()


def serve_ort(model_path, ports, ready, token=None, delay_us=2000):
    """PyTriton: ONNX Runtime sessions (one per instance, one thread each) behind Triton's Python backend."""
    import sysconfig
    # Triton's Python backend stub embeds this interpreter: it must find its libpython (pyenv and
    # other non-system Pythons keep it outside the loader's default folders).
    os.environ["LD_LIBRARY_PATH"] = sysconfig.get_config_var("LIBDIR") + ":" + os.environ.get("LD_LIBRARY_PATH", "")
    import onnxruntime as ort
    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

    def make():
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(model_path, opts, providers=["CPUExecutionProvider"])

        @batch
        def infer(image):
            return {"scores": sess.run(["scores"], {"image": image})[0]}

        return infer

    config = TritonConfig(http_address="127.0.0.1", http_port=ports[0], grpc_address="127.0.0.1", grpc_port=ports[1],
                          metrics_port=ports[2], allow_gpu_metrics=False)
    with Triton(config=config, security_config=TritonSecurityConfig(access_token=token)) as triton:
        triton.bind(model_name="demo_ort", infer_func=[make(), make()],
                    inputs=[Tensor(name="image", dtype=np.float32, shape=(3, 64, 64))],
                    outputs=[Tensor(name="scores", dtype=np.float32, shape=(10,))],
                    config=ModelConfig(max_batch_size=8, batcher=DynamicBatcher(max_queue_delay_microseconds=delay_us)))
        ready.set()
        triton.serve()


def load(url, model, concurrency, duration, x):
    import tritonclient.http as http
    latencies, errors = [], []
    stop = time.time() + duration

    def worker():
        client = http.InferenceServerClient(url)
        inp = http.InferInput("image", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        mine = []
        try:
            while time.time() < stop:
                t0 = time.perf_counter()
                client.infer(model, [inp])
                mine.append(time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
        latencies.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    lat = np.array(latencies) * 1e3
    return {"throughput": len(lat) / wall, "p50": float(np.percentile(lat, 50)), "p99": float(np.percentile(lat, 99)),
            "requests": len(lat), "errors": errors[:3]}


def equal_p99_lines(a_name, a, b_name, b):
    """Throughput at equal p99 (issue 17's "at equal p99"): each of side b's measured p99s is a bound;
    under it, the highest throughput each side reached at any measured concurrency whose p99 is
    within the bound. a, b: {concurrency: {"throughput": req/s, "p99": ms}} (medians). Only measured
    points count (no interpolation), so a side is never credited with a latency it did not show."""
    def best(side, bound):
        ok = [(r["throughput"], c) for c, r in side.items() if r["throughput"] > 0 and r["p99"] <= bound]
        return max(ok) if ok else None

    lines = [f"Throughput at equal p99: for each p99 {b_name} showed, the most requests/s each side served at any "
             "measured concurrency with its p99 within it (measured points only; ratio above 1: kiln serves more "
             "at that latency).", "",
             f"| p99 bound ms ({b_name} at concurrency) | {a_name} req/s (concurrency, p99 ms) | "
             f"{b_name} req/s (concurrency, p99 ms) | ratio |",
             "| --- | --- | --- | --- |"]
    for c in sorted(b):
        if not b[c]["throughput"] > 0:
            continue
        bound = b[c]["p99"]
        ka, kb = best(a, bound), best(b, bound)
        cell = lambda side, hit: (f"{hit[0]:.0f} ({hit[1]}, {side[hit[1]]['p99']:.2f})" if hit  # noqa: E731
                                  else "none within")
        ratio = f"**{ka[0] / kb[0]:.2f}x**" if ka and kb else "-"
        lines.append(f"| {bound:.2f} ({c}) | {cell(a, ka)} | {cell(b, kb)} | {ratio} |")
    return lines


# glibc malloc settings for perf_analyzer's process (GLIBC_TUNABLES): keep freed memory instead of
# returning it to the kernel. Its HTTP client frees and allocates a request's buffers (the demo's
# 49 KB input) per request; with glibc's defaults the freed top of the heap went back to the
# kernel and every new buffer faulted in zeroed pages: at 32 clients the load generator's page
# faults took 44% of the machine's 2 cores (perf), which both servers share with it. The same
# setting serves both sides; --client-glibc-tunables "" runs perf_analyzer with glibc's defaults.
CLIENT_GLIBC_TUNABLES = ("glibc.malloc.trim_threshold=268435456:glibc.malloc.mmap_threshold=33554432:"
                         "glibc.malloc.top_pad=67108864")


def load_pa(url, model, concurrency, duration, work, token=ACCESS_TOKEN, extra=(), tunables=CLIENT_GLIBC_TUNABLES):
    """perf_analyzer at one concurrency (HTTP, batch 1, random inputs from the model's configuration):
    throughput and p50/p99 from its CSV. `tunables`: GLIBC_TUNABLES for its process ("" for none)."""
    csv = Path(work) / f"pa_{model}_{concurrency}_{time.monotonic_ns()}.csv"
    cmd = ["perf_analyzer", "-m", model, "-u", url, "-i", "http", "--concurrency-range", str(concurrency),
           "-p", str(int(duration * 1000)), "-s", "100", "--max-trials", "3", "-f", str(csv),
           "-H", f"triton-access-token:{token}"] + list(extra)
    env = dict(os.environ)
    env.pop("GLIBC_TUNABLES", None)
    if tunables:
        env["GLIBC_TUNABLES"] = tunables
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60 + 10 * duration, env=env)
    except subprocess.TimeoutExpired:  # a point that never stabilizes: recorded as failed, the run goes on
        return {"throughput": 0.0, "p50": float("nan"), "p99": float("nan"),
                "errors": [f"perf_analyzer did not finish within {60 + 10 * duration:.0f} s"]}
    if r.returncode != 0 or not csv.exists():
        return {"throughput": 0.0, "p50": float("nan"), "p99": float("nan"),
                "errors": [f"perf_analyzer exited with {r.returncode}: {(r.stdout + r.stderr)[-400:]}"]}
    head, row = csv.read_text().splitlines()[:2]
    v = dict(zip(head.split(","), row.split(",")))
    return {"throughput": float(v["Inferences/Second"]), "p50": float(v["p50 latency"]) / 1e3,
            "p99": float(v["p99 latency"]) / 1e3, "errors": []}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--queue-delay-us", type=int, default=2000, help="the dynamic batcher's max queue delay, both sides")
    ap.add_argument("--rounds", type=int, default=1, help="rounds per point, the sides alternating (medians)")
    ap.add_argument("--load-generator", choices=("perf_analyzer", "python"),
                    default="perf_analyzer" if shutil.which("perf_analyzer") else "python")
    ap.add_argument("--client-glibc-tunables", default=CLIENT_GLIBC_TUNABLES,
                    help="GLIBC_TUNABLES for perf_analyzer (default: keep freed memory; see CLIENT_GLIBC_TUNABLES; "
                         "\"\" for glibc's defaults)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.load_generator == "perf_analyzer" and not shutil.which("perf_analyzer"):
        sys.exit("perf_analyzer is not on PATH (scripts/install_deps.sh installs it), or use --load-generator python")
    import pytriton
    server_bin = Path(pytriton.__file__).parent / "tritonserver" / "bin" / "tritonserver"
    work = Path(tempfile.mkdtemp(prefix="kiln_triton_bench_"))
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_demo_model.py"), str(work / "m")], check=True,
                   capture_output=True)
    repo = work / "repo"
    (repo / "demo" / "1").mkdir(parents=True)
    shutil.copy(work / "m" / "model.onnx", repo / "demo" / "1" / "model.onnx")
    (repo / "demo" / "config.pbtxt").write_text(CONFIG.format(delay=args.queue_delay_us))
    kports = free_ports(3)
    kiln_proc = subprocess.Popen(
        [str(server_bin), f"--model-repository={repo}", f"--backend-directory={Path(args.build) / 'triton'}",
         "--http-address=127.0.0.1", f"--http-port={kports[0]}", "--grpc-address=127.0.0.1", f"--grpc-port={kports[1]}",
         "--metrics-address=127.0.0.1", f"--metrics-port={kports[2]}", "--allow-gpu-metrics=false"],
        stdout=open(work / "kiln_server.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    oports = free_ports(3)
    ready = mp.Event()
    ort_proc = mp.Process(target=serve_ort, args=(str(work / "m" / "model_standard.onnx"), oports, ready, ACCESS_TOKEN,
                                                      args.queue_delay_us), daemon=True)
    ort_proc.start()
    results = {}
    try:
        wait_ready(f"127.0.0.1:{kports[0]}", kiln_proc)
        ready.wait(180)
        wait_ready(f"127.0.0.1:{oports[0]}", None)
        x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
        sides = {"kiln backend": (f"127.0.0.1:{kports[0]}", "demo"), "Python backend + ONNX Runtime": (f"127.0.0.1:{oports[0]}", "demo_ort")}
        for url, model in sides.values():
            load(url, model, 4, 2.0, x)  # warm-up
        runs = {}
        for rnd in range(args.rounds):
            for c in [int(v) for v in args.concurrency.split(",")]:
                order = list(sides.items()) if rnd % 2 == 0 else list(reversed(list(sides.items())))
                for name, (url, model) in order:
                    if args.load_generator == "perf_analyzer":
                        r = load_pa(url, model, c, args.duration, work, tunables=args.client_glibc_tunables)
                    else:
                        r = load(url, model, c, args.duration, x)
                    runs.setdefault((name, c), []).append(r)
                    print(f"{name:32s} concurrency {c:3d}: {r['throughput']:8.1f} req/s  p50 {r['p50']:7.2f} ms  "
                          f"p99 {r['p99']:7.2f} ms  errors {r['errors']}", flush=True)
        for key, rs in runs.items():
            results[key] = {f: float(np.median([r[f] for r in rs])) for f in ("throughput", "p50", "p99")}
            results[key]["errors"] = [e for r in rs for e in r["errors"]]
        # Server-free baseline: kiln bench on the engine the backend built.
        engine = next((repo / "demo" / "1").glob("model.onnx.*.kiln"))
        bench = subprocess.run([str(Path(args.build) / "kiln"), "bench", "--engine", str(engine), "--shapes", "image:1x3x64x64",
                                "--threads", "1", "--duration", "3", "--json"], capture_output=True, text=True, timeout=120)
        kb = json.loads(bench.stdout[bench.stdout.index("{"):]) if bench.returncode == 0 and "{" in bench.stdout else None
    finally:
        os.killpg(kiln_proc.pid, signal.SIGTERM)
        kiln_proc.wait(timeout=30)
        ort_proc.terminate()
        ort_proc.join(30)
    lines = [f"# kiln's Triton backend vs Triton's Python backend + ONNX Runtime ({platform.node()}, "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores)", "",
             "Same tritonserver (nvidia-pytriton 0.7.0), same network (the demo CNN; kiln with its custom layers, ONNX Runtime "
             f"the standard-op version), dynamic batching (max 8, {args.queue_delay_us} us queue delay), 2 instances x 1 CPU thread each side; closed-loop "
             + ("perf_analyzer 2.51 (HTTP, " if args.load_generator == "perf_analyzer" else "tritonclient HTTP load (")
             + f"batch-1 requests), {args.duration:g} s per point, sides alternating, {args.rounds} round(s), medians. "
             + (f"perf_analyzer with GLIBC_TUNABLES={args.client_glibc_tunables} (freed memory kept: fewer page faults "
                "in the load generator, which shares the cores with both servers). "
                if args.load_generator == "perf_analyzer" and args.client_glibc_tunables else "")
             + "ratio = kiln / Python backend (throughput: above 1 is better; p99: below 1 is better).", "",
             "| concurrency | kiln req/s | kiln p50 ms | kiln p99 ms | Python+ORT req/s | p50 ms | p99 ms | throughput ratio | p99 ratio |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in [int(v) for v in args.concurrency.split(",")]:
        k, o = results[("kiln backend", c)], results[("Python backend + ONNX Runtime", c)]
        if not (k["throughput"] > 0 and o["throughput"] > 0):
            lines.append(f"| {c} | failed: {(k['errors'] + o['errors'])[:1]} | | | | | | | |")
            continue
        lines.append(f"| {c} | {k['throughput']:.1f} | {k['p50']:.2f} | {k['p99']:.2f} | {o['throughput']:.1f} | {o['p50']:.2f} | "
                     f"{o['p99']:.2f} | **{k['throughput'] / o['throughput']:.2f}x** | {k['p99'] / o['p99']:.2f} |")
    measured = {name: {c: results[(name, c)] for (n, c) in results if n == name} for name in sides}
    lines += [""] + equal_p99_lines("kiln", measured["kiln backend"], "Python+ORT", measured["Python backend + ONNX Runtime"])
    if kb:
        med = kb.get("latency_ms", {}).get("median") if isinstance(kb.get("latency_ms"), dict) else None
        if med is not None:
            k1 = results.get(("kiln backend", 1))
            lines += ["", f"kiln bench, same engine, batch 1, 1 thread: median {med:.3f} ms; the server at concurrency 1: p50 "
                      f"{k1['p50']:.3f} ms, so server + HTTP client cost {1e3 * (k1['p50'] - med):.0f} us per request "
                      "(the load generator's own time included)."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
