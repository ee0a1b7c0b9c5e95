#!/usr/bin/env python3
"""Start-up on a GPU host: from a fresh process to its first inference, kiln against PyTorch.

What a server replica pays when it starts (a new pod, a Triton model load, a restart): kiln loads
the engine file, makes its contexts (cuDNN plans for the convolutions) and runs once; PyTorch
imports torch, builds the model, moves it to the GPU and runs once. Both in fresh processes, with
the driver's JIT cache (CUDA_CACHE_PATH) either empty (a fresh host or container) or warm (the
same host again), alternating rounds.

kiln engines are built once per model (fp16, the given optimization level, compiled plans on:
BuilderConfig::embed_compiled_plans) and loaded with --allow-compiled-plans two ways:
  * "compiled plans": as built: every cuDNN graph-API convolution's execution plan is loaded
    from the engine file (no plan built, no kernel compiled);
  * "no compiled plans": the same file with KILN_COMPILED_PLANS=0, every plan built and its
    runtime-compiled kernels compiled again (what kiln did before session 33).
Each with `kiln bench --iterations 1 --duration 0 --warmup 0` and --streams 1 and 4 (4 contexts
made on 4 threads: each thread has its own cuDNN handle and, without compiled plans, builds its
own plans). The time is the process's wall time. PyTorch: eager fp16 channels-last, inference
mode, one inference and a synchronize, in a fresh `python3 -c` process (the same model
definitions as bench/gpu_vs_pytorch.py, random weights).

Prints per model and variant the median seconds and the ratios kiln (compiled plans) / kiln (no
compiled plans) and kiln / PyTorch; below 1.0 means kiln starts faster.

--dynamic-batch N adds the dynamic-batching case (a Triton model with max_batch_size N): engines
with a profile of batch 1..N (opt N), started and run once at every batch size 1..N in turn
(`kiln bench --shape-schedule`, N calls), with the plans at the profile's points only (the
default), at every batch size (`kiln build --compiled-plans-every-batch`), and none
(KILN_COMPILED_PLANS=0); PyTorch runs the same N batches.

Usage: python3 bench/engine_startup.py --kiln build-gpu/kiln --models-dir DIR --torch-models DIR
       [--level 3] [--rounds 3] [--dynamic-batch N] [--out bench/results/FILE.md]
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

from _common import export_resnet50, kiln_build

TORCH_PROGRAM = r"""
import sys, time
t0 = time.perf_counter()
import torch
sys.path.insert(0, {tools!r})
kind = {kind!r}
if kind == "resnet50":
    import torchvision
    m = torchvision.models.resnet50(weights=None)
else:
    from torch_models import TinyYolo, init_random
    m = init_random(TinyYolo(w=16, act="silu"), seed=1)
m = m.eval().cuda().half().to(memory_format=torch.channels_last)
with torch.inference_mode():
    for batch in {batches!r}:
        x = torch.rand((batch,) + {shape!r}[1:], device="cuda").half().to(memory_format=torch.channels_last)
        m(x)
        torch.cuda.synchronize()
print("first inference after", time.perf_counter() - t0)
"""


def timed(cmd, env):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(" ".join(cmd[:3]) + " failed:\n" + r.stdout[-1500:] + r.stderr[-1500:])
    return seconds


def measure(variants, rounds, warm_cache, work, say):
    """Median wall seconds of each variant with an empty and a warm JIT cache (alternating rounds,
    the warm cache warmed by every variant first); prints the table."""
    times = {(label, cache): [] for label, _, _ in variants for cache in ("cold", "warm")}
    for label, cmd, extra_env in variants:
        timed(cmd, dict(os.environ, CUDA_CACHE_PATH=warm_cache, **extra_env))
    for _ in range(rounds):
        for label, cmd, extra_env in variants:
            cold = tempfile.mkdtemp(prefix="jit_cold_", dir=work)
            times[(label, "cold")].append(timed(cmd, dict(os.environ, CUDA_CACHE_PATH=cold, **extra_env)))
            shutil.rmtree(cold, ignore_errors=True)
            times[(label, "warm")].append(timed(cmd, dict(os.environ, CUDA_CACHE_PATH=warm_cache, **extra_env)))
    med = {k: statistics.median(v) for k, v in times.items()}
    say("| variant | empty JIT cache s | warm JIT cache s |")
    say("| --- | ---: | ---: |")
    for label, _, _ in variants:
        say(f"| {label} | {med[(label, 'cold')]:.2f} | {med[(label, 'warm')]:.2f} |")
    say("")
    return med


def dynamic_case(args, name, onnx, input_name, shape, work, warm_cache, say):
    """The dynamic-batching case (--dynamic-batch N): see the module's description."""
    n = args.dynamic_batch
    dims = lambda b: "x".join(str(d) for d in (b,) + shape[1:])
    profile = ["--min-shapes", f"{input_name}:{dims(1)}", "--opt-shapes", f"{input_name}:{dims(n)}",
               "--max-shapes", f"{input_name}:{dims(n)}"]
    engines = {}
    for label, extra in (("points", []), ("every", ["--compiled-plans-every-batch"])):
        engines[label] = os.path.join(work, f"{name}_dyn_{label}.kiln")
        b = kiln_build(args.kiln, onnx, engines[label], profile,
                       extra=["--builder-optimization-level", str(args.level)] + extra)
        say(f"- batch 1..{n} engine, plans at {label}: {os.path.getsize(engines[label]) / 1e6:.1f} MB, "
            f"built in {b:.1f} s")
    say("")
    schedule = ",".join(f"{input_name}:{dims(b)}" for b in range(1, n + 1))
    run = lambda e: [args.kiln, "bench", "--engine", e, "--allow-compiled-plans", "--shape-schedule", schedule,
                     "--iterations", str(n),
                     "--duration", "0", "--warmup", "0"]
    dyn = [("kiln, plans at the profile's min/opt/max", run(engines["points"]), {}),
           ("kiln, plans at every batch size", run(engines["every"]), {}),
           ("kiln, no compiled plans", run(engines["points"]), {"KILN_COMPILED_PLANS": "0"}),
           ("PyTorch eager", [sys.executable, "-c", TORCH_PROGRAM.format(
               tools=args.torch_models, kind="resnet50" if name == "resnet50" else "yolo", shape=shape,
               batches=list(range(1, n + 1)))], {})]
    say(f"Dynamic batching: a fresh process runs batch 1, 2, ..., {n} once each:\n")
    dm = measure(dyn, args.rounds, warm_cache, work, say)
    for cache in ("cold", "warm"):
        say(f"- {cache} JIT cache: every batch / profile points "
            f"{dm[(dyn[1][0], cache)] / dm[(dyn[0][0], cache)]:.2f}x, every batch / none "
            f"{dm[(dyn[1][0], cache)] / dm[(dyn[2][0], cache)]:.2f}x, kiln (every batch) / PyTorch "
            f"{dm[(dyn[1][0], cache)] / dm[(dyn[3][0], cache)]:.2f}x")
    say("")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--models-dir", required=True, help="folder with tinyyolo_silu/model.onnx")
    ap.add_argument("--torch-models", required=True, help="folder with torch_models.py")
    ap.add_argument("--level", type=int, default=3, help="builder optimization level of the engines")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="tinyyolo_silu,resnet50")
    ap.add_argument("--dynamic-batch", type=int, default=0,
                    help="also the dynamic-batching case: batch 1..N, each run once (0: not)")
    ap.add_argument("--only-dynamic", action="store_true", help="with --dynamic-batch: only that case")
    ap.add_argument("--out", help="also write the report (markdown) here")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="kiln_startup_")
    lines = []

    def say(text=""):
        print(text, flush=True)
        lines.append(text)

    models = []
    for name in args.models.split(","):
        if name == "tinyyolo_silu":
            models.append((name, os.path.join(args.models_dir, "tinyyolo_silu", "model.onnx"), "images",
                           (1, 3, 320, 320)))
        elif name == "resnet50":
            path = os.path.join(work, "resnet50.onnx")
            export_resnet50(path)
            models.append((name, path, "input", (1, 3, 224, 224)))
        else:
            sys.exit("engine_startup: unknown model " + name + " (tinyyolo_silu, resnet50)")

    say(f"# Engine start-up: fresh process to first inference ({datetime.date.today()})\n")
    try:
        import torch
        say(f"GPU: {torch.cuda.get_device_name(0)}; PyTorch {torch.__version__}; kiln engines fp16, "
            f"level {args.level}; {args.rounds} alternating rounds; median seconds of the process's wall time.\n")
    except Exception as e:  # the report says what is missing
        say(f"(PyTorch unavailable: {e})\n")

    warm_cache = os.path.join(work, "jit_warm")
    os.makedirs(warm_cache)
    for name, onnx, input_name, shape in models:
        say(f"## {name}\n")
        if args.only_dynamic and args.dynamic_batch > 1:
            dynamic_case(args, name, onnx, input_name, shape, work, warm_cache, say)
            continue
        engine = os.path.join(work, name + ".kiln")
        shape_text = "x".join(str(d) for d in shape)
        build_s = kiln_build(args.kiln, onnx, engine, ["--shapes", f"{input_name}:{shape_text}"],
                             extra=["--builder-optimization-level", str(args.level)])
        say(f"Batch {shape[0]}: engine {os.path.getsize(engine) / 1e6:.1f} MB, built in {build_s:.1f} s\n")
        variants = []
        for streams in (1, 4):
            for plans in (True, False):
                variants.append((f"kiln, {streams} stream(s), {'compiled plans' if plans else 'no compiled plans'}",
                                 [args.kiln, "bench", "--engine", engine, "--allow-compiled-plans", "--iterations",
                                  "1", "--duration", "0",
                                  "--warmup", "0", "--streams", str(streams)],
                                 {} if plans else {"KILN_COMPILED_PLANS": "0"}))
        variants.append(("PyTorch eager", [sys.executable, "-c",
                                           TORCH_PROGRAM.format(tools=args.torch_models,
                                                                kind="resnet50" if name == "resnet50" else "yolo",
                                                                shape=shape, batches=[shape[0]])], {}))
        med = measure(variants, args.rounds, warm_cache, work, say)
        torch_label = "PyTorch eager"
        for streams in (1, 4):
            on = f"kiln, {streams} stream(s), compiled plans"
            off = f"kiln, {streams} stream(s), no compiled plans"
            for cache in ("cold", "warm"):
                say(f"- {streams} stream(s), {cache} JIT cache: compiled plans / none "
                    f"{med[(on, cache)] / med[(off, cache)]:.2f}x; kiln / PyTorch "
                    f"{med[(on, cache)] / med[(torch_label, cache)]:.2f}x (none: "
                    f"{med[(off, cache)] / med[(torch_label, cache)]:.2f}x)")
        say("")
        if args.dynamic_batch > 1:
            dynamic_case(args, name, onnx, input_name, shape, work, warm_cache, say)
    shutil.rmtree(work, ignore_errors=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
