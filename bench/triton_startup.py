#!/usr/bin/env python3
"""How long a new Triton replica takes to serve: a fresh tritonserver process started with one model,
from its launch to the model's readiness (every instance warmed up for every batch size) and to its
first answered request, with kiln's backend and with PyTorch through Triton's Python backend, in
alternating rounds. This is what autoscaling waits for when it adds a pod.

Sides (each in its own server process, one model, explicit model control):
  * kiln, compiled plans: a `kiln build --fp16 --compiled-plans-every-batch` engine of torchvision's
    ResNet-50 (random weights, seed 0) for batch 1..--max-batch; the backend loads the cuDNN plans
    the engine carries (its default, allow_compiled_plans "true") and warms up every batch size;
  * kiln, plans built: the same engine with allow_compiled_plans "false" (what every start cost
    before engines carried their plans: cuDNN builds each plan and compiles its runtime-fused
    kernels on a host whose JIT cache has not seen them);
  * PyTorch (--python-backend): bench/triton_torch_model.py, the peer of bench/triton_gpu.py's
    throughput comparison (fp16, channels-last, a CUDA graph per batch size captured at load), with
    cuDNN's autotuning (cudnn_benchmark "true", as in that comparison) and without it ("false").
Every side has --instances instances and warms up the same batch sizes before it is ready.

JIT cache: "empty" gives every server start a new empty CUDA_CACHE_PATH (a fresh host or pod);
"warm" gives each side its own folder, filled by one untimed start first (a restart on the same
host). Both by default.

Usage: python3 bench/triton_startup.py --build BUILD --server TRITONSERVER [--python-backend DIR]
           [--max-batch 4] [--instances 2] [--rounds 3] [--jit-cache empty,warm] [--out FILE.md]
  DIR: Triton's Python backend folder with the stub for this Python (see bench/triton_gpu.py --help);
  scripts/gpu_suite.sh's triton_startup step finds both in nvidia-pytriton or .dev/triton.
"""
import argparse
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from triton_gpu import Client, check_build, start_server, stop_server, with_python_backend  # noqa: E402


def ready_status(port, model):
    """The HTTP status of the model's readiness, or None while the server does not answer."""
    try:
        return Client(port).get(f"/v2/models/{model}/ready")[0]
    except OSError:
        return None


def timed_start(server_bin, repo, backends, model, work, tag, env, x, timeout=900):
    """Starts a server with `model` only; returns (seconds to ready, seconds to the first answer,
    the answer). Stops the server before returning."""
    log = work / f"server_{tag}.log"
    t0 = time.perf_counter()
    proc, port = start_server(server_bin, repo, backends, log,
                              ["--model-control-mode=explicit", f"--load-model={model}", "--exit-on-error=true"], env)
    try:
        while ready_status(port, model) != 200:
            if proc.poll() is not None:
                raise RuntimeError(f"{tag}: tritonserver exited with {proc.returncode}: "
                                   f"{log.read_text()[-2000:]}")
            if time.perf_counter() - t0 > timeout:
                raise RuntimeError(f"{tag}: model {model} not ready after {timeout} s: {log.read_text()[-2000:]}")
            time.sleep(0.02)
        ready = time.perf_counter() - t0
        y = Client(port).infer(model, "input", x, "logits")
        first = time.perf_counter() - t0
        return ready, first, y
    finally:
        stop_server(proc)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True, help="kiln build folder (kiln, triton/kiln/libtriton_kiln.so)")
    ap.add_argument("--server", required=True, help="the tritonserver binary")
    ap.add_argument("--python-backend", help="Triton's Python backend folder: PyTorch as the peer")
    ap.add_argument("--max-batch", type=int, default=4)
    ap.add_argument("--instances", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jit-cache", default="empty,warm", help="comma-separated: empty, warm (default both)")
    ap.add_argument("--out", help="write the report (markdown) here too")
    args = ap.parse_args()
    kiln, backend_dir = check_build(args.build, args.python_backend)
    caches = [c for c in args.jit_cache.split(",") if c]
    if not caches or any(c not in ("empty", "warm") for c in caches):
        sys.exit("--jit-cache: empty, warm or both")
    work = Path(tempfile.mkdtemp(prefix="kiln-triton-startup-"))
    from _common import export_resnet50
    onnx_path = work / "resnet50.onnx"
    export_resnet50(str(onnx_path))
    repo = work / "repo"
    engine = work / "model.kiln"
    shapes = [f"--{k}-shapes=input:{b}x3x224x224" for k, b in (("min", 1), ("opt", args.max_batch),
                                                               ("max", args.max_batch))]
    t0 = time.perf_counter()
    r = subprocess.run([kiln, "build", "--onnx", str(onnx_path), "--save-engine", str(engine), "--device", "cuda",
                        "--fp16", "--compiled-plans-every-batch", *shapes], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("kiln build failed:\n" + r.stdout[-2000:] + r.stderr[-2000:])
    build_s = time.perf_counter() - t0
    plans = next((ln.strip() for ln in r.stdout.splitlines() if "compiled plan" in ln), "")
    instances = f"instance_group [ {{ count: {args.instances}, kind: KIND_CPU }} ]\n"
    sides = {"kiln_plans": ("kiln, compiled plans", "true"), "kiln_built": ("kiln, plans built", "false")}
    for model, (_, allow) in sides.items():
        (repo / model / "1").mkdir(parents=True)
        shutil.copy(engine, repo / model / "1" / "model.kiln")
        (repo / model / "config.pbtxt").write_text(
            f'backend: "kiln"\nmax_batch_size: {args.max_batch}\n{instances}'
            f'parameters {{ key: "allow_compiled_plans" value {{ string_value: "{allow}" }} }}\n')
    backends = backend_dir
    env = dict(os.environ)
    if args.python_backend:
        for model, bench_on in (("torch_autotuned", "true"), ("torch_plain", "false")):
            sides[model] = (f"PyTorch, cudnn.benchmark {'on' if bench_on == 'true' else 'off'}", None)
            (repo / model / "1").mkdir(parents=True)
            shutil.copy(Path(__file__).resolve().parent / "triton_torch_model.py", repo / model / "1" / "model.py")
            (repo / model / "config.pbtxt").write_text(
                f'backend: "python"\nmax_batch_size: {args.max_batch}\n'
                f"instance_group [ {{ count: {args.instances}, kind: KIND_GPU }} ]\n"
                'input [ { name: "input", data_type: TYPE_FP32, dims: [ 3, 224, 224 ] } ]\n'
                'output [ { name: "logits", data_type: TYPE_FP32, dims: [ 1000 ] } ]\n'
                f'parameters {{ key: "cudnn_benchmark" value {{ string_value: "{bench_on}" }} }}\n')
        backends = with_python_backend(work, backend_dir, args.python_backend, env)
    x = np.random.default_rng(7).uniform(-1, 1, size=(1, 3, 224, 224)).astype(np.float32)
    times = {(m, c): [] for m in sides for c in caches}
    answers = {}
    warm_dirs = {m: work / f"jit_warm_{m}" for m in sides}
    if "warm" in caches:
        for m in sides:  # one untimed start fills each side's own JIT cache
            timed_start(args.server, repo, backends, m, work, f"{m}_fill", dict(env, CUDA_CACHE_PATH=str(warm_dirs[m])), x)
    for rnd in range(args.rounds):
        for cache in caches:
            for m in sides:
                jit = warm_dirs[m] if cache == "warm" else Path(tempfile.mkdtemp(prefix="jit-", dir=work))
                ready, first, y = timed_start(args.server, repo, backends, m, work, f"{m}_{cache}_{rnd}",
                                              dict(env, CUDA_CACHE_PATH=str(jit)), x)
                times[(m, cache)].append((ready, first))
                answers[m] = y
                print(f"round {rnd + 1}, {cache} JIT cache, {sides[m][0]}: ready {ready:.2f} s, first answer "
                      f"{first:.2f} s", flush=True)
                if cache == "empty":
                    shutil.rmtree(jit, ignore_errors=True)
    ref = answers["kiln_built"].astype(np.float64)
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    lines = [f"# A new Triton replica: launch to ready and to its first answer ({gpu}, "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
             f"ResNet-50 fp16, batch 1..{args.max_batch}, {args.instances} instances, every batch size warmed up "
             f"before the model is ready; {args.rounds} alternating rounds, each start a new tritonserver process "
             f"with one model. kiln engine built in {build_s:.1f} s ({plans or 'compiled plans: see kiln build'}).",
             "", "| side | JIT cache | ready s (median) | first answer s (median) | rounds (ready) | "
             "vs PyTorch autotuned (ready) |", "| --- | --- | ---: | ---: | --- | ---: |"]
    for cache in caches:
        peer = statistics.median(r for r, _ in times[("torch_autotuned", cache)]) if args.python_backend else None
        for m, (label, _) in sides.items():
            t = times[(m, cache)]
            ready = statistics.median(r for r, _ in t)
            first = statistics.median(f for _, f in t)
            ratio = f"{ready / peer:.2f}x" if peer else ""
            lines.append(f"| {label} | {cache} | {ready:.2f} | {first:.2f} | "
                         f"{' '.join(f'{r:.2f}' for r, _ in t)} | {ratio} |")
    lines += ["", "Answers to the same batch-1 request, max |difference| / max |kiln, plans built|: " +
              ", ".join(f"{sides[m][0]} {np.abs(answers[m] - ref).max() / np.abs(ref).max():.2e}"
                        for m in sides if m != "kiln_built"),
              "", "Ratios under 1: kiln's replica is ready sooner. Each start includes tritonserver's own "
              "start-up and, for PyTorch, the Python stub processes and `import torch`."]
    report = "\n".join(lines)
    print(report)
    if args.out:
        Path(args.out).write_text(report + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
