#!/usr/bin/env python3
"""Build time and run time of kiln engines at every builder optimization level (issue 18), in one table.

For each model and batch size and each level (default 0..5), without a timing cache:
  * `kiln build --builder-optimization-level L` (a fresh process per build); the build time is the
    `build: ... in X s` line kiln prints (the builder alone: passes, kernel choice, planning, no ONNX
    import), the wall time of the whole command is kept too;
  * `kiln bench --engine E --json` for --duration seconds after a warm-up; the run time is its median
    latency (CUDA: --no-data-transfers, so the number is the engine's, not PCIe's);
  * the build's own counts: layers timed, kernels timed, kernels stopped early, layers that reused an
    identical layer's timing (the `kernel timing:` line);
  * how many layers run another kernel than at level 3 (`kiln inspect`'s `kernel=`): where none does,
    a run-time difference between the two levels is measurement noise, not a choice;
  * level 5's whole-engine check (`kiln build`'s `level 5 check:` line): how many layers level 3
    would have given another kernel, both engines' latency as the builder timed them, which it kept.
With --rounds R > 1 the engines of one model and batch are benchmarked in R alternating rounds (the
order rotates each round) after all of them are built, and the run time is the median of the
rounds' medians; the rounds' values are listed too.

--cold-jit-cache gives every build an empty CUDA driver JIT cache (CUDA_CACHE_PATH, a fresh folder):
the first build of a shape on a fresh host, which compiles cuDNN's runtime-compiled engines
(CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION); without it, later builds in the run find earlier builds'
kernels in the machine's cache (~/.nv/ComputeCache). --variant "LABEL:VAR=VALUE[,VAR=VALUE]" adds
rows built at the --variant-levels (default 0) with those environment variables, e.g.
`--variant "runtime-compiled:KILN_DISABLE_TACTICS=cudnn_graph_precompiled"` for level 0 as it was
before it took precompiled cuDNN engines; ratios are to the plain level 3.
Prints one markdown table with the ratio of each level's build and run time to level 3's (the
default), and writes it to --out.

GPU (the H200; ResNet-50 batch 1/32/128, TinyYolo and bert_tiny, fp16), one line:

    python3 bench/builder_levels.py --device cuda --kiln build-cuda/kiln --out bench/results/DATE_h200_builder_levels.md

CPU (checkable on a development machine: squeezenet, TinyYolo and bert_tiny at batch 1, fp32; on
the CPU kernels are chosen by priority at every level, only plugin implementations are timed):

    python3 bench/builder_levels.py --device cpu --kiln build-cpu/kiln --threads 2 --out bench/out/levels_cpu.md

Models: squeezenet1_1, tinyyolo_silu and bert_tiny from --models-dir (default ../shared/models,
or $KILN_TEST_MODELS_DIR); ResNet-50 v1.5 with random weights is generated on first use by
scripts/make_resnet50.py into --workdir (onnx + numpy only, no torch). --models picks a subset by
name (resnet50, squeezenet1_1, tinyyolo_silu, tinyyolo_tswish, bert_tiny).
"""
import argparse
import datetime
import glob
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name -> (ONNX input shapes as a function of the batch, default batches per device)
MODELS = {
    "resnet50": (lambda n: f"input:{n}x3x224x224", {"cuda": [1, 32, 128], "cpu": [1]}),
    "squeezenet1_1": (lambda n: f"input:{n}x3x224x224", {"cuda": [1], "cpu": [1]}),
    "tinyyolo_silu": (lambda n: f"images:{n}x3x320x320", {"cuda": [1], "cpu": [1]}),
    "tinyyolo_tswish": (lambda n: f"images:{n}x3x320x320", {"cuda": [1], "cpu": [1]}),
    "bert_tiny": (lambda n: f"input_ids:{n}x128,attention_mask:{n}x128", {"cuda": [1], "cpu": [1]}),
}
DEFAULT_MODELS = {"cuda": ["resnet50", "tinyyolo_silu", "bert_tiny"], "cpu": ["squeezenet1_1", "tinyyolo_silu", "bert_tiny"]}


def find_kiln(explicit):
    if explicit:
        return explicit
    if os.environ.get("KILN"):
        return os.environ["KILN"]
    found = sorted(glob.glob(os.path.join(REPO, "build*", "kiln")), key=os.path.getmtime)
    return found[-1] if found else "kiln"


def model_path(name, models_dir, workdir):
    if name == "resnet50":
        out = os.path.join(workdir, "resnet50")
        path = os.path.join(out, "model.onnx")
        if not os.path.exists(path):
            print(f"generating ResNet-50 into {out} (scripts/make_resnet50.py)", flush=True)
            subprocess.run([sys.executable, os.path.join(REPO, "scripts", "make_resnet50.py"), out], check=True)
        return path
    path = os.path.join(models_dir, name, "model.onnx")
    if not os.path.exists(path):
        raise SystemExit(f"model {name}: {path} not found (--models-dir or KILN_TEST_MODELS_DIR)")
    return path


def build(kiln, onnx, engine, shapes, level, args, env_extra=None):
    env = dict(os.environ)
    env.update(env_extra or {})
    if args.cold_jit_cache:
        os.makedirs(os.path.join(args.workdir, "jit_cache"), exist_ok=True)
        env["CUDA_CACHE_PATH"] = tempfile.mkdtemp(prefix="build", dir=os.path.join(args.workdir, "jit_cache"))
    cmd = [kiln, "build", "--onnx", onnx, "--save-engine", engine, "--device", args.device, "--shapes", shapes,
           "--builder-optimization-level", str(level)]
    if args.device == "cuda" and not args.fp32:
        cmd.append("--fp16")
    if args.device == "cpu":
        cmd += ["--threads", str(args.threads)]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError("kiln build failed (" + " ".join(cmd) + "):\n" + r.stdout[-2000:] + r.stderr[-2000:])
    m = re.search(r"^build: .* in ([0-9.]+) s$", r.stdout, re.M)
    if not m:
        raise RuntimeError("no 'build: ... in X s' line in kiln build's output:\n" + r.stdout[-2000:])
    info = {"build_s": float(m.group(1)), "wall_s": wall, "timed": 0, "kernels": 0, "stopped": 0, "reused": 0}
    t = re.search(r"kernel timing: (\d+) layer\(s\) timed \((\d+) kernel\(s\), (\d+) stopped early\).*?, (\d+) reused",
                  r.stdout)
    if t:
        info.update(timed=int(t.group(1)), kernels=int(t.group(2)), stopped=int(t.group(3)), reused=int(t.group(4)))
    # Level 5's whole-engine check against level 3's kernels (the `level 5 check:` line).
    c = re.search(r"^level 5 check: (\d+) layer\(s\) .*?; whole engine ([0-9.e+-]+) ms with level 5's, ([0-9.e+-]+) ms "
                  r"with level 3's: level (\d)'s kept \(checked in ([0-9.]+) s\)", r.stdout, re.M)
    if c:
        info["check"] = (f"{c.group(1)} layers differ; whole {float(c.group(2)):.3f} / {float(c.group(3)):.3f} ms: "
                         f"L{c.group(4)}'s kept ({float(c.group(5)):.1f} s)")
    elif re.search(r"^level 5 check: level 3 would choose the same kernels", r.stdout, re.M):
        info["check"] = "same kernels as L3"
    return info


def bench(kiln, engine, shapes, args):
    cmd = [kiln, "bench", "--engine", engine, "--shapes", shapes, "--json", "--duration", f"{args.duration:g}",
           "--warmup", args.warmup]
    if args.device == "cuda":
        cmd.append("--no-data-transfers")
    else:
        cmd += ["--threads", str(args.threads)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("kiln bench failed (" + " ".join(cmd) + "):\n" + r.stdout[-2000:] + r.stderr[-2000:])
    return float(json.loads(r.stdout)["latency_ms"]["median"])


def kernels_of(kiln, engine):
    """Layer name -> kernel, from `kiln inspect`."""
    r = subprocess.run([kiln, "inspect", "--engine", engine], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"kiln inspect --engine {engine} failed:\n" + r.stdout[-2000:] + r.stderr[-2000:])
    return dict(re.findall(r"^\s*\[\d+\] (\S+) : .*kernel=(\S+)", r.stdout, re.M))


def label_of(key):
    return str(key) if isinstance(key, int) else f"{key[0]} ({key[1]})"


def ratio(x, ref):
    return f"{x / ref:.2f}x" if ref else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", help="the kiln binary (default: $KILN, else the newest build*/kiln)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--models", help="comma-separated subset (default: resnet50,tinyyolo_silu,bert_tiny on cuda; "
                                     "squeezenet1_1,tinyyolo_silu,bert_tiny on cpu)")
    ap.add_argument("--batches", help="comma-separated batch sizes for every model (default: ResNet-50 1,32,128 on "
                                      "cuda; 1 otherwise)")
    ap.add_argument("--levels", default="0,1,2,3,4,5")
    ap.add_argument("--models-dir", default=os.environ.get("KILN_TEST_MODELS_DIR",
                                                           os.path.join(os.path.dirname(REPO), "shared", "models")))
    ap.add_argument("--workdir", default=os.path.join(REPO, "bench", "out", "builder_levels"))
    ap.add_argument("--threads", type=int, default=2, help="CPU: engine threads")
    ap.add_argument("--fp32", action="store_true", help="CUDA: build without --fp16")
    ap.add_argument("--duration", type=float, default=3.0, help="kiln bench seconds per engine")
    ap.add_argument("--warmup", default="500ms", help="kiln bench warm-up per engine")
    ap.add_argument("--rounds", type=int, default=1,
                    help="benchmark the levels' engines in this many alternating rounds (run time: the median of "
                         "the rounds' medians)")
    ap.add_argument("--cold-jit-cache", action="store_true",
                    help="every build with an empty CUDA driver JIT cache (a fresh CUDA_CACHE_PATH)")
    ap.add_argument("--variant", action="append", default=[],
                    help="LABEL:VAR=VALUE[,VAR=VALUE]: also build the --variant-levels with these environment "
                         "variables (repeatable)")
    ap.add_argument("--variant-levels", default="0")
    ap.add_argument("--out", help="also write the table (markdown) here")
    args = ap.parse_args()
    variants = []
    for v in args.variant:
        label, _, assigns = v.partition(":")
        env = dict(a.split("=", 1) for a in assigns.split(",") if "=" in a)
        if not label or not env:
            raise SystemExit(f"--variant {v!r}: expected LABEL:VAR=VALUE[,VAR=VALUE]")
        variants.append((label, env))
    variant_levels = [int(x) for x in args.variant_levels.split(",")]

    kiln = find_kiln(args.kiln)
    os.makedirs(args.workdir, exist_ok=True)
    levels = [int(x) for x in args.levels.split(",")]
    if 3 not in levels:
        raise SystemExit("--levels must include 3: the table gives ratios to level 3")
    models = args.models.split(",") if args.models else DEFAULT_MODELS[args.device]
    for m in models:
        if m not in MODELS:
            raise SystemExit(f"unknown model {m} (known: {', '.join(MODELS)})")
    rows, errors = [], []
    for name in models:
        shapes_of, default_batches = MODELS[name]
        onnx = model_path(name, args.models_dir, args.workdir)
        batches = [int(b) for b in args.batches.split(",")] if args.batches else default_batches[args.device]
        for n in batches:
            shapes = shapes_of(n)
            results, engines = {}, {}
            # Keys: the level, or (level, label) for a variant's build.
            keys = list(levels) + [(lv, label) for label, _ in variants for lv in variant_levels]
            env_of = {(lv, label): env for label, env in variants for lv in variant_levels}
            for level in keys:
                tag = level if isinstance(level, int) else f"{level[0]}_{re.sub(r'[^A-Za-z0-9]+', '_', level[1])}"
                engine = os.path.join(args.workdir, f"{name}_b{n}_L{tag}_{args.device}.kiln")
                try:
                    info = build(kiln, onnx, engine, shapes, level if isinstance(level, int) else level[0], args,
                                 env_of.get(level))
                    info["kernel_of"] = kernels_of(kiln, engine)
                except RuntimeError as e:
                    errors.append(f"{name} batch {n} level {label_of(level)}: {e}")
                    print(errors[-1], file=sys.stderr, flush=True)
                    continue
                results[level], engines[level] = info, engine
            built = [lv for lv in keys if lv in results]
            for i in range(max(1, args.rounds)):
                order = built[i % len(built):] + built[:i % len(built)] if built else []
                for level in order:
                    try:
                        results[level].setdefault("rounds", []).append(bench(kiln, engines[level], shapes, args))
                    except RuntimeError as e:
                        errors.append(f"{name} batch {n} level {label_of(level)}: {e}")
                        print(errors[-1], file=sys.stderr, flush=True)
            for level in built:
                info = results[level]
                if not info.get("rounds"):
                    del results[level]
                    continue
                info["run_ms"] = statistics.median(info["rounds"])
                ref_kernels = results[3]["kernel_of"] if 3 in results else {}
                info["differ"] = sum(1 for k, v in info["kernel_of"].items() if ref_kernels.get(k) != v)
                print(f"{name} batch {n} level {label_of(level)}: build {info['build_s']:.2f} s, run {info['run_ms']:.3f} ms "
                      f"({info['timed']} layers timed, {info['kernels']} kernels, {info['stopped']} stopped early, "
                      f"{info['reused']} reused; {info['differ']} layers with another kernel than level 3)", flush=True)
            ref = results.get(3)
            for level in keys:
                if level in results:
                    rows.append((name, n, level, results[level], ref))

    head = ["model", "batch", "level", "build s", "build / L3", "run median ms", "run / L3", "layers timed",
            "kernels timed", "stopped early", "reused", "layers with another kernel than L3", "kiln build wall s",
            "level-5 check (whole engine: L5's / L3's kernels)"]
    if args.rounds > 1:
        head.append("run ms per round")
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name, n, level, r, ref in rows:
        lines.append("| " + " | ".join([
            name, str(n), label_of(level), f"{r['build_s']:.2f}", ratio(r["build_s"], ref["build_s"]) if ref else "-",
            f"{r['run_ms']:.3f}", ratio(r["run_ms"], ref["run_ms"]) if ref else "-", str(r["timed"]), str(r["kernels"]),
            str(r["stopped"]), str(r["reused"]), str(r["differ"]), f"{r['wall_s']:.2f}", r.get("check", "-")]
            + ([" ".join(f"{v:.3f}" for v in r["rounds"])] if args.rounds > 1 else [])) + " |")
    table = "\n".join(lines)
    ver = subprocess.run([kiln, "--version"], capture_output=True, text=True).stdout.strip()
    header = (f"# kiln builder optimization levels, {args.device}\n\n"
              f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {ver}, {platform.node()}, "
              f"{os.cpu_count()} CPUs; command: `python3 bench/builder_levels.py {' '.join(sys.argv[1:])}`\n\n"
              f"Build s: the builder's time (`kiln build`'s `build: ... in X s`), no timing cache. Run: `kiln bench` "
              f"median latency over {args.duration:g} s"
              + (f", the median of {args.rounds} alternating rounds" if args.rounds > 1 else "")
              + (", --no-data-transfers" if args.device == "cuda" else f", {args.threads} threads")
              + (", fp32" if args.device == "cpu" or args.fp32 else ", fp16") + "."
              + (" Every build with an empty CUDA JIT cache (a fresh CUDA_CACHE_PATH)." if args.cold_jit_cache else "")
              + "".join(f" Level \"L ({label})\": built with {', '.join(f'{k}={v}' for k, v in env.items())}."
                        for label, env in variants) + "\n\n")
    text = header + table + "\n" + ("\nErrors:\n\n" + "\n".join("    " + e.replace("\n", "\n    ") for e in errors) + "\n"
                                    if errors else "")
    print()
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
