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

The numbers come from Triton's own statistics, so the client only has to send one request at a time
(tritonclient); bench/triton_serving.py drives servers with perf_analyzer.

--input-copy-threads 0,2 serves the model once per value of the backend's parameter
input_copy_threads (threads per instance that help copy request inputs; models <name>_k0, _k2, one
instance each, measured in turn in every round) to compare compute_input. The helpers only copy
inputs of 256 KiB and more: --model wide224 is a cheap network on 3x224x224 fp32 images (602 KB per
request, ResNet-50's input) instead of the demo CNN (64x64, 48 KB).

Usage: python3 bench/triton_overhead.py --build build [--requests 3000] [--rounds 3] [--threads 1] [--out FILE.md]
           [--model demo|wide224] [--input-copy-threads 0,2]
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


def make_wide224(path):
    """A cheap network on ResNet-50's input size: image [N,3,224,224] -> Conv 8x3x4x4 stride 4 ->
    Relu -> GlobalAveragePool -> Flatten -> scores [N,8] (the request is 602 KB, the answer 32 B)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w = (np.random.default_rng(0).standard_normal((8, 3, 4, 4)) * 0.2).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["image", "w"], ["c"], strides=[4, 4]), helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("GlobalAveragePool", ["r"], ["p"]), helper.make_node("Flatten", ["p"], ["scores"])],
        "wide224", [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, 224, 224])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 8])], [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


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
    ap.add_argument("--model", choices=["demo", "wide224"], default="demo")
    ap.add_argument("--input-copy-threads", default="",
                    help="comma-separated values of the backend's input_copy_threads, one model each "
                         "(default: the parameter unset, i.e. the backend's default)")
    args = ap.parse_args()
    copy_threads = [int(v) for v in args.input_copy_threads.split(",") if v.strip() != ""] or [None]
    import pytriton
    if args.protocol == "grpc":
        import tritonclient.grpc as tc
    else:
        import tritonclient.http as tc
    server_bin = Path(pytriton.__file__).parent / "tritonserver" / "bin" / "tritonserver"
    work = Path(tempfile.mkdtemp(prefix="kiln_triton_overhead_"))
    (work / "m").mkdir()
    if args.model == "demo":
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_demo_model.py"), str(work / "m")], check=True,
                       capture_output=True)
        item = [3, 64, 64]
    else:
        make_wide224(work / "m" / "model.onnx")
        item = [3, 224, 224]
    repo = work / "repo"
    models = {}  # model name -> input_copy_threads (None: not set)
    for k in copy_threads:
        name = args.model if k is None else f"{args.model}_k{k}"
        models[name] = k
        (repo / name / "1").mkdir(parents=True)
        shutil.copy(work / "m" / "model.onnx", repo / name / "1" / "model.onnx")
        (repo / name / "config.pbtxt").write_text(
            'backend: "kiln"\nmax_batch_size: 8\ninstance_group [ { count: 1, kind: KIND_CPU } ]\n'
            f'parameters {{ key: "threads" value {{ string_value: "{args.threads}" }} }}\n' +
            ("" if k is None else f'parameters {{ key: "input_copy_threads" value {{ string_value: "{k}" }} }}\n'))
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
        x = np.random.default_rng(0).standard_normal([1] + item).astype(np.float32)
        inp = tc.InferInput("image", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        done = {}
        for name in models:
            for _ in range(300):  # warm-up
                client.infer(name, [inp])
            done[name] = settled(client, name, 300)["success"][0]
        first = next(iter(models))
        engine = next((repo / first / "1").glob("model.onnx.*.kiln"))
        shapes = "image:" + "x".join(str(d) for d in [1] + item)
        for r in range(args.rounds):
            for name, k in models.items():
                before = settled(client, name, done[name])
                lat = []
                for _ in range(args.requests):
                    t0 = time.perf_counter()
                    client.infer(name, [inp])
                    lat.append(time.perf_counter() - t0)
                done[name] += args.requests
                after = settled(client, name, done[name])
                n = after["success"][0] - before["success"][0]
                per = {p: (after[p][1] - before[p][1]) / max(n, 1) / 1e3 for p in PHASES}  # us per request
                row = {"round": r + 1, "copy": "default" if k is None else str(k), "requests": n, **per,
                       "client_p50_us": float(np.percentile(lat, 50)) * 1e6}
                rows.append(row)
            bench = subprocess.run([str(Path(args.build) / "kiln"), "bench", "--engine", str(engine), "--shapes",
                                    shapes, "--threads", str(args.threads), "--duration", "3", "--json"],
                                   capture_output=True, text=True, timeout=120)
            kb = json.loads(bench.stdout[bench.stdout.index("{"):])["latency_ms"]
            for row in rows[-len(models):]:
                row["bench_mean_us"], row["bench_median_us"] = kb["mean"] * 1e3, kb["median"] * 1e3
                row["overhead_us"] = row["success"] - row["bench_mean_us"]
                row["around_us"] = row["success"] - row["compute_infer"]
                print(f"round {r + 1}, input_copy_threads {row['copy']}: server {row['success']:.1f} us/request "
                      f"(queue {row['queue']:.1f}, input {row['compute_input']:.1f}, infer {row['compute_infer']:.1f}, "
                      f"output {row['compute_output']:.1f}); kiln bench mean {row['bench_mean_us']:.1f} us; overhead "
                      f"{row['overhead_us']:.1f} us ({row['around_us']:.1f} us around kiln's inference); "
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
             ("The demo CNN (custom layers, 3x64x64 fp32 input)" if args.model == "demo" else
              "wide224 (Conv stride 4, Relu, GlobalAveragePool on 3x224x224 fp32 input: 602 KB per request)") +
             f", batch-1 requests one at a time over {args.protocol}, no dynamic batcher, 1 instance x "
             f"{args.threads} CPU thread; {args.requests} requests per round; input_copy_threads: "
             f"{', '.join('default' if k is None else str(k) for k in models.values())} (one model each, in turn). Server times are Triton's own statistics "
             "(microseconds per request, mean); kiln bench runs the engine the backend built, same threads. "
             "overhead = server request - kiln bench mean (target: under 100 us); around = server request - compute_infer "
             "(what Triton and the backend add around kiln's inference in the same request; the difference between "
             "compute_infer and kiln bench is the server's threads and the client sharing the cores with the inference).", "",
             "| round | input_copy_threads | server request us | queue | compute_input | compute_infer | compute_output | "
             "kiln bench mean us | kiln bench median us | **overhead us** | around us | client p50 us |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['round']} | {r['copy']} | {r['success']:.1f} | {r['queue']:.1f} | {r['compute_input']:.1f} | "
                     f"{r['compute_infer']:.1f} | {r['compute_output']:.1f} | {r['bench_mean_us']:.1f} | "
                     f"{r['bench_median_us']:.1f} | **{r['overhead_us']:.1f}** | {r['around_us']:.1f} | {r['client_p50_us']:.1f} |")
    for k in dict.fromkeys(r["copy"] for r in rows):
        mine = [r for r in rows if r["copy"] == k]
        med = float(np.median([r["overhead_us"] for r in mine]))
        around = float(np.median([r["around_us"] for r in mine]))
        cin = float(np.median([r["compute_input"] for r in mine]))
        lines += ["", f"input_copy_threads {k}, median over the rounds: overhead **{med:.1f} us per request**; around "
                  f"kiln's inference {around:.1f} us; compute_input {cin:.1f} us."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
