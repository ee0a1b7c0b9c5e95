"""Pieces the GPU benchmarks share (gpu_vs_pytorch.py, serving_vs_pytorch.py): statistics, the error
measure, the ResNet-50 export and the `kiln build` call. Imported by the scripts in this folder (their
own folder is on sys.path when run as `python3 bench/NAME.py`)."""
import subprocess
import time

import numpy as np


def cpu_description():
    """The CPU's model name and its widest x86 vector ISA (results differ between an AVX2 and an
    AVX-512 machine of the same name), from /proc/cpuinfo; 'unknown' elsewhere."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError:
        return "unknown"
    model = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), "unknown")
    flags = next((l.split(":", 1)[1].split() for l in info.splitlines() if l.startswith("flags")), [])
    isa = "AVX-512F" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{model}, {isa}"


def kiln_bench_profiled(kiln, model, threads, duration, disabled, workdir):
    """`kiln bench --onnx model` with KILN_DISABLE_TACTICS=disabled: (its median latency in ms,
    its per-layer profile rows); exits naming the model when it fails."""
    import json
    import os
    import re
    import sys
    prof = os.path.join(workdir, "profile.json")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), KILN_DISABLE_TACTICS=disabled)
    r = subprocess.run([kiln, "bench", "--onnx", model, "--threads", str(threads), "--duration", str(duration),
                        "--export-profile", prof], env=env, capture_output=True, text=True)
    median = re.search(r"^Latency: .*median = ([0-9.]+) ms", r.stdout, re.M)
    if r.returncode != 0 or not median:
        sys.exit("kiln bench failed on " + model + ":\n" + r.stdout[-1500:] + r.stderr[-1500:])
    with open(prof) as f:
        return float(median.group(1)), json.load(f)


def ort_profiled_events(model, threads, iterations, workdir):
    """ONNX Runtime's profiler events for 3 untimed and then `iterations` runs of `model` (its
    first input random, float32) on `threads` threads."""
    import json
    import os
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(workdir, "ort")
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    first = sess.get_inputs()[0]
    x = np.random.default_rng(1).standard_normal(first.shape).astype(np.float32)
    for _ in range(3 + iterations):
        sess.run(None, {first.name: x})
    path = sess.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    return events


def percentile(samples, q):
    """Nearest-rank percentile of a list of numbers (q in 0..100)."""
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(q / 100.0 * (len(s) - 1))))]


def rel_to_max(a, ref):
    """max |a - ref| / max |ref|: the error relative to the output's scale."""
    return float(np.max(np.abs(a.astype(np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-3))


def export_resnet50(path):
    """torchvision ResNet-50, random weights (seed 0), eval mode, exported to ONNX (opset 17) with a
    dynamic batch axis N on input 'input' and output 'logits'. Returns the PyTorch model (CPU, fp32)."""
    import torch
    import torchvision
    torch.manual_seed(0)
    m = torchvision.models.resnet50(weights=None).eval()
    torch.onnx.export(m, (torch.rand(1, 3, 224, 224),), path, opset_version=17, dynamo=False,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}})
    return m


def kiln_build(kiln, onnx_path, engine, shape_args, device="cuda", fp16=True, timing_cache=None, extra=()):
    """Runs `kiln build` and returns its wall time in seconds; raises RuntimeError with the tail of its
    output on failure. shape_args: the shape flags, e.g. ["--shapes", "input:1x3x224x224"]."""
    cmd = [kiln, "build", "--onnx", onnx_path, "--save-engine", engine, "--device", device] + list(shape_args)
    if fp16:
        cmd.append("--fp16")
    if timing_cache:
        cmd += ["--timing-cache", timing_cache]
    cmd += list(extra)
    t0 = time.perf_counter()
    b = subprocess.run(cmd, capture_output=True, text=True)
    if b.returncode != 0:
        raise RuntimeError("kiln build failed (" + " ".join(cmd) + "):\n" + b.stdout[-2000:] + b.stderr[-2000:])
    return time.perf_counter() - t0
