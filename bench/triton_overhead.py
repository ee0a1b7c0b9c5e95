#!/usr/bin/env python3
"""What Triton Inference Server with kiln's backend adds per request over `kiln bench` on the same
engine (issue 17's "the server adds under 100 microseconds per request"), in one run.

The server side is read from Triton's own statistics (the model's cumulative nanoseconds per phase,
before and after the timed requests), so neither the network nor the client counts:
  * request: from the server receiving a request to its response being complete (success),
  * queue: waiting for a model instance,
  * compute_input: kiln's backend gathering and binding the inputs,
  * compute_infer: kiln's inference (ExecutionContext::execute),
  * compute_output: the outputs copied into the responses and sent.
The baseline is `kiln bench` on the engine the backend built (the same file), batch 1, the same
thread count. Overhead = server mean per request - kiln bench mean. The model has no dynamic
batcher (its queue delay would be the only thing measured) and one instance; requests are sent
one at a time over gRPC (or HTTP with --protocol http; tritonclient). Server and kiln bench alternate for --rounds rounds; the
client-observed latency is printed too, for reference (it includes the Python client).

perf_analyzer is not used: PyPI's perf-analyzer is a placeholder (0.1.0, no program).

Usage: python3 bench/triton_overhead.py --build build [--requests 3000] [--rounds 3] [--threads 1] [--out FILE.md]
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from triton_serving import free_ports, wait_ready  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PHASES = ["success", "queue", "compute_input", "compute_infer", "compute_output"]


def stats(client, model):
    got = client.get_inference_statistics(model, as_json=True) if hasattr(client, "get_server_metadata") and \
        "grpc" in type(client).__module__ else client.get_inference_statistics(model)
    s = got["model_stats"][0]["inference_stats"]
    return {p: (int(s.get(p, {}).get("count", 0)), int(s.get(p, {}).get("ns", 0))) for p in PHASES}


def settled(client, model, count):
    """The statistics once `count` successful requests are in them (the backend reports a request's
    statistics just after its response)."""
    deadline = time.time() + 10
    while True:
        s = stats(client, model)
        if s["success"][0] >= count or time.time() > deadline:
            return s
        time.sleep(0.02)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--protocol", choices=["grpc", "http"], default="grpc")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import pytriton
    if args.protocol == "grpc":
        import tritonclient.grpc as tc
    else:
        import tritonclient.http as tc
    server_bin = Path(pytriton.__file__).parent / "tritonserver" / "bin" / "tritonserver"
    work = Path(tempfile.mkdtemp(prefix="kiln_triton_overhead_"))
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_demo_model.py"), str(work / "m")], check=True,
                   capture_output=True)
    repo = work / "repo"
    (repo / "demo" / "1").mkdir(parents=True)
    shutil.copy(work / "m" / "model.onnx", repo / "demo" / "1" / "model.onnx")
    (repo / "demo" / "config.pbtxt").write_text(
        'backend: "kiln"\nmax_batch_size: 8\ninstance_group [ { count: 1, kind: KIND_CPU } ]\n'
        f'parameters {{ key: "threads" value {{ string_value: "{args.threads}" }} }}\n')
    ports = free_ports(3)
    proc = subprocess.Popen(
        [str(server_bin), f"--model-repository={repo}", f"--backend-directory={Path(args.build) / 'triton'}",
         "--http-address=127.0.0.1", f"--http-port={ports[0]}", "--grpc-address=127.0.0.1", f"--grpc-port={ports[1]}",
         "--metrics-address=127.0.0.1", f"--metrics-port={ports[2]}", "--allow-gpu-metrics=false",
         "--exit-timeout-secs=5"],
        stdout=open(work / "server.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    rows = []
    client = None
    try:
        wait_ready(f"127.0.0.1:{ports[0]}", proc)
        client = tc.InferenceServerClient(f"127.0.0.1:{ports[1] if args.protocol == 'grpc' else ports[0]}")
        x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
        inp = tc.InferInput("image", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        for _ in range(300):  # warm-up
            client.infer("demo", [inp])
        engine = next((repo / "demo" / "1").glob("model.onnx.*.kiln"))
        done = settled(client, "demo", 300)["success"][0]
        for r in range(args.rounds):
            before = settled(client, "demo", done)
            lat = []
            for _ in range(args.requests):
                t0 = time.perf_counter()
                client.infer("demo", [inp])
                lat.append(time.perf_counter() - t0)
            done += args.requests
            after = settled(client, "demo", done)
            n = after["success"][0] - before["success"][0]
            per = {p: (after[p][1] - before[p][1]) / max(n, 1) / 1e3 for p in PHASES}  # us per request
            bench = subprocess.run([str(Path(args.build) / "kiln"), "bench", "--engine", str(engine), "--shapes",
                                    "image:1x3x64x64", "--threads", str(args.threads), "--duration", "3", "--json"],
                                   capture_output=True, text=True, timeout=120)
            kb = json.loads(bench.stdout[bench.stdout.index("{"):])["latency_ms"]
            row = {"round": r + 1, "requests": n, **per, "client_p50_us": float(np.percentile(lat, 50)) * 1e6,
                   "bench_mean_us": kb["mean"] * 1e3, "bench_median_us": kb["median"] * 1e3}
            row["overhead_us"] = row["success"] - row["bench_mean_us"]
            row["around_us"] = row["success"] - row["compute_infer"]
            rows.append(row)
            print(f"round {r + 1}: server {row['success']:.1f} us/request (queue {row['queue']:.1f}, input "
                  f"{row['compute_input']:.1f}, infer {row['compute_infer']:.1f}, output {row['compute_output']:.1f}); "
                  f"kiln bench mean {row['bench_mean_us']:.1f} us; overhead {row['overhead_us']:.1f} us "
                  f"({row['around_us']:.1f} us around kiln's inference); "
                  f"client p50 {row['client_p50_us']:.1f} us", flush=True)
    finally:
        if client is not None:
            client.close()
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    lines = [f"# What Triton + kiln's backend adds per request over kiln bench ({platform.node()}, "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores)", "",
             f"The demo CNN (custom layers), batch-1 requests one at a time over {args.protocol}, no dynamic batcher, 1 instance x "
             f"{args.threads} CPU thread; {args.requests} requests per round. Server times are Triton's own statistics "
             "(microseconds per request, mean); kiln bench runs the engine the backend built, same threads. "
             "overhead = server request - kiln bench mean (target: under 100 us); around = server request - compute_infer "
             "(what Triton and the backend add around kiln's inference in the same request; the difference between "
             "compute_infer and kiln bench is the server's threads and the client sharing the cores with the inference).", "",
             "| round | server request us | queue | compute_input | compute_infer | compute_output | kiln bench mean us | "
             "kiln bench median us | **overhead us** | around us | client p50 us |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['round']} | {r['success']:.1f} | {r['queue']:.1f} | {r['compute_input']:.1f} | "
                     f"{r['compute_infer']:.1f} | {r['compute_output']:.1f} | {r['bench_mean_us']:.1f} | "
                     f"{r['bench_median_us']:.1f} | **{r['overhead_us']:.1f}** | {r['around_us']:.1f} | {r['client_p50_us']:.1f} |")
    if rows:
        med = float(np.median([r["overhead_us"] for r in rows]))
        around = float(np.median([r["around_us"] for r in rows]))
        lines += ["", f"Median over the rounds: overhead **{med:.1f} us per request**; around kiln's inference {around:.1f} us."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
