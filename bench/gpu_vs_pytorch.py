#!/usr/bin/env python3
"""GPU latency and throughput of kiln against PyTorch, same models and batch sizes, in one run.

Workloads (fp16): ResNet-50 (torchvision, random weights, exported to ONNX in this run) at batch
1, 32 and 128; TinyYolo 320x320 (the model definitions of torch_models.py, SiLU and
TemperatureSwish variants) at batch 1 and 32. kiln builds the TinyYolo engines from the
exported ONNX models of the shared test models (tinyyolo_silu / tinyyolo_tswish: the same
architecture; the TemperatureSwish one runs kiln's CUDA plugin). Per workload:
  * PyTorch 2.x, fp16, channels-last, inference mode: eager, and captured in a CUDA graph
    (torch.cuda.CUDAGraph) and replayed;
  * kiln: `kiln build --device cuda --fp16` with min = opt = max = the benchmark shape (timing
    cache shared across builds), then `kiln run --json` without and with --cuda-graph.
Every timed iteration is one inference followed by a stream synchronization, measured with a
host clock on both sides (kiln run times ExecutionContext::execute the same way). Reports
median and p99 latency, throughput (images/s), kiln's engine build time and peak device
memory (PyTorch: torch.cuda.max_memory_allocated; kiln: device memory in use by the run's
process as seen by cudaMemGetInfo, which includes the CUDA context), and the ratio
kiln / PyTorch-with-CUDA-graph (below 1.0 means kiln is faster).

Usage: python3 bench/gpu_vs_pytorch.py --kiln build-gpu/kiln --models-dir DIR --torch-models DIR
       [--iterations 100] [--warmup 20] [--out bench/results/FILE.md] [--quick]
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from _common import export_resnet50, kiln_build, percentile, rel_to_max


def torch_bench(model, x_np, iterations, warmup, want_reference):
    import copy
    import torch
    results = {}
    if want_reference:
        with torch.inference_mode():
            ref_model = copy.deepcopy(model).cuda().float().eval()
            results["reference"] = ref_model(torch.from_numpy(x_np).cuda()).float().cpu().numpy()
            del ref_model
    model = copy.deepcopy(model)
    x = torch.from_numpy(x_np).cuda().half().to(memory_format=torch.channels_last)
    model = model.cuda().half().to(memory_format=torch.channels_last).eval()
    with torch.inference_mode():
        results["output"] = model(x).float().cpu().numpy()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        for _ in range(warmup):
            model(x)
        torch.cuda.synchronize()
        samples = []
        for _ in range(iterations):
            t0 = time.perf_counter()
            model(x)
            torch.cuda.synchronize()
            samples.append((time.perf_counter() - t0) * 1e3)
        results["eager"] = samples
        # CUDA graph: warm up on a side stream, capture once, replay.
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                model(x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            model(x)
        for _ in range(warmup):
            g.replay()
        torch.cuda.synchronize()
        samples = []
        for _ in range(iterations):
            t0 = time.perf_counter()
            g.replay()
            torch.cuda.synchronize()
            samples.append((time.perf_counter() - t0) * 1e3)
        results["graph"] = samples
        results["peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
    del model, x
    torch.cuda.empty_cache()
    return results


def kiln_bench(kiln, onnx_path, input_name, x, iterations, warmup, work, cache, plugins, profile=False):
    batch, shape = x.shape[0], tuple(x.shape[1:])
    npy = os.path.join(work, f"in_{batch}.npy")
    np.save(npy, x)
    engine = os.path.join(work, os.path.basename(os.path.dirname(onnx_path) or "m") + f"_b{batch}.kiln")
    spec = input_name + ":" + "x".join(str(d) for d in (batch,) + shape)
    build_s = kiln_build(kiln, onnx_path, engine, ["--shapes", spec], timing_cache=cache)
    out = {"build_s": build_s}
    outdir = os.path.join(work, f"out_{batch}")
    for graph in (False, True):
        cmd = [kiln, "run", "--engine", engine, "--input", f"{input_name}={npy}", "--iterations", str(iterations),
               "--warmup", str(warmup), "--json", "--output-dir", outdir + ("_graph" if graph else "")]
        cmd += ["--cuda-graph"] if graph else ["--no-cuda-graph"]
        for p in plugins:
            cmd += ["--plugins", p]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("kiln run failed:\n" + r.stdout[-2000:] + r.stderr[-2000:])
        j = json.loads(r.stdout)
        out["graph" if graph else "plain"] = j["latency_ms"]
        out["peak_mb"] = max(out.get("peak_mb", 0), j.get("device_memory_mb", 0))
        out["output" + ("_graph" if graph else "")] = np.load(j["outputs"][0]["file"]).astype(np.float32)
    if profile:
        # Per-layer times (the stream is synchronized after every layer, so host overhead shows).
        r = subprocess.run([kiln, "run", "--engine", engine, "--input", f"{input_name}={npy}", "--iterations", "20",
                            "--warmup", "5", "--dump-profile"], capture_output=True, text=True)
        lines = [l for l in r.stderr.splitlines() if "ms" in l][:16]
        print(f"--- kiln layer profile, {os.path.basename(engine)} ---\n" + "\n".join(lines), flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--models-dir", required=True, help="folder with tinyyolo_silu/ and tinyyolo_tswish/")
    ap.add_argument("--torch-models", required=True, help="folder with torch_models.py")
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--out")
    ap.add_argument("--quick", action="store_true", help="batch 1 only")
    ap.add_argument("--profile", action="store_true", help="also print kiln's slowest layers per engine")
    args = ap.parse_args()
    import torch
    # The fp32 reference must be fp32: no TF32 in cuDNN convolutions or matmuls.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    sys.path.insert(0, args.torch_models)
    from torch_models import TinyYolo, init_random

    work = tempfile.mkdtemp(prefix="kiln_gpu_bench_")
    print(f"work dir: {work}", flush=True)
    cache = os.path.join(work, "timing.cache")
    resnet_onnx = os.path.join(work, "resnet50", "model.onnx")
    os.makedirs(os.path.dirname(resnet_onnx))
    resnet = export_resnet50(resnet_onnx)
    workloads = [("ResNet-50", resnet, resnet_onnx, "input", (3, 224, 224), [1, 32, 128], []),
                 ("TinyYolo SiLU", init_random(TinyYolo(w=16, act="silu"), seed=1),
                  os.path.join(args.models_dir, "tinyyolo_silu", "model.onnx"), "images", (3, 320, 320), [1, 32], []),
                 ("TinyYolo TemperatureSwish", init_random(TinyYolo(w=16, act="tswish"), seed=1),
                  os.path.join(args.models_dir, "tinyyolo_tswish", "model.onnx"), "images", (3, 320, 320), [1, 32], [])]
    rows = []
    for name, model, onnx_path, input_name, shape, batches, plugins in workloads:
        model = model.eval()
        for batch in batches:
            if args.quick and batch != 1:
                continue
            x = np.random.default_rng(batch).random((batch,) + shape, dtype=np.float32)
            # Accuracy only where kiln's ONNX file holds the same weights as the PyTorch model.
            same_weights = onnx_path == resnet_onnx
            t = torch_bench(model, x, args.iterations, args.warmup, same_weights)
            try:
                k = kiln_bench(args.kiln, onnx_path, input_name, x, args.iterations, args.warmup, work, cache, plugins,
                               args.profile)
            except RuntimeError as e:
                print(f"{name} batch {batch}: {e}", file=sys.stderr)
                k = None
            row = {"workload": name, "batch": batch,
                   "torch_eager_ms": statistics.median(t["eager"]), "torch_graph_ms": statistics.median(t["graph"]),
                   "torch_graph_p99_ms": percentile(t["graph"], 99), "torch_peak_mb": t["peak_mb"]}
            if k:
                row.update({"kiln_ms": k["plain"]["median"], "kiln_p99_ms": k["plain"]["p99"],
                            "kiln_graph_ms": k["graph"]["median"], "kiln_graph_p99_ms": k["graph"]["p99"],
                            "kiln_build_s": k["build_s"], "kiln_peak_mb": k["peak_mb"]})
                best = min(row["kiln_ms"], row["kiln_graph_ms"])
                row["ratio_vs_torch_graph"] = best / row["torch_graph_ms"]
                if same_weights:
                    ref = t["reference"]
                    row["torch_fp16_err"] = rel_to_max(t["output"], ref)
                    row["kiln_err"] = rel_to_max(k["output"], ref)
                    row["kiln_graph_err"] = rel_to_max(k["output_graph"], ref)
            rows.append(row)
            print(json.dumps(row), flush=True)

    lines = []
    import subprocess as sp
    gpu = sp.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True,
                 text=True).stdout.strip()
    lines.append(f"# kiln vs PyTorch {torch.__version__} on {gpu}, "
                 f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}\n")
    lines.append(f"fp16; {args.iterations} timed iterations after {args.warmup} warmup; latency = one inference + "
                 "stream sync, host clock; throughput = batch / median latency. Ratio = best kiln median / PyTorch "
                 "CUDA-graph median (< 1 means kiln is faster).\n")
    lines.append("Error = max |out - PyTorch fp32 output| / max |PyTorch fp32 output| on the same input (ResNet-50 "
                 "only: kiln's TinyYolo ONNX files come from the shared test models, with other random weights).\n")
    lines.append("| workload | batch | PyTorch eager ms | PyTorch graph ms (p99) | kiln ms (p99) | kiln graph ms (p99) "
                 "| kiln img/s | PyTorch graph img/s | ratio | kiln build s | peak MiB kiln / torch | error kiln / kiln graph / torch fp16 |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if "kiln_ms" in r:
            best = min(r["kiln_ms"], r["kiln_graph_ms"])
            lines.append(f"| {r['workload']} | {r['batch']} | {r['torch_eager_ms']:.3f} | {r['torch_graph_ms']:.3f} "
                         f"({r['torch_graph_p99_ms']:.3f}) | {r['kiln_ms']:.3f} ({r['kiln_p99_ms']:.3f}) | "
                         f"{r['kiln_graph_ms']:.3f} ({r['kiln_graph_p99_ms']:.3f}) | {r['batch'] * 1e3 / best:,.0f} | "
                         f"{r['batch'] * 1e3 / r['torch_graph_ms']:,.0f} | **{r['ratio_vs_torch_graph']:.2f}x** | "
                         f"{r['kiln_build_s']:.1f} | {r['kiln_peak_mb']:.0f} / {r['torch_peak_mb']:.0f} | " +
                         (f"{r['kiln_err']:.1e} / {r['kiln_graph_err']:.1e} / {r['torch_fp16_err']:.1e} |"
                          if "kiln_err" in r else "n/a |"))
        else:
            lines.append(f"| {r['workload']} | {r['batch']} | {r['torch_eager_ms']:.3f} | {r['torch_graph_ms']:.3f} "
                         f"({r['torch_graph_p99_ms']:.3f}) | failed | failed | | "
                         f"{r['batch'] * 1e3 / r['torch_graph_ms']:,.0f} | | | | |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
