#!/usr/bin/env python3
"""CPU fully connected layers: kiln's MatrixMultiply tactics (packed_avx512, packed_avx2, oneDNN)
against ONNX Runtime, on one-layer models shaped like bert_tiny's and BERT-base's (MatMul with a
constant weight matrix, the bias Add, and GELU written out as exporters write it where the layer
has one), in alternating rounds.

Each engine runs the whole one-layer model: kiln's time is `kiln bench`'s median latency with the
tactics named in a column left out (KILN_DISABLE_TACTICS; a CPU build fuses the bias and the GELU
into the product where a packed tactic runs it, and leaves them as layers of their own where
oneDNN does); ONNX Runtime's is the median of its profiler's model_run events (its own fusions:
MatMul + Add, BiasGelu). GFLOP/s counts the product's 2 M K N operations only.

Example:
  python3 bench/cpu_matmul_layers.py --kiln build-cpu/kiln --threads 1 --rounds 3
"""
import argparse
import os
import statistics
import sys
import tempfile

import numpy as np

from _common import cpu_description, kiln_bench_profiled, ort_profiled_events

# name, M (rows: batch x sequence), K, N, GELU after the bias
LAYERS = [
    ("bert_tiny_b8_qkv", 128, 128, 128, False),
    ("bert_tiny_b8_intermediate", 128, 128, 512, True),
    ("bert_tiny_b8_output", 128, 512, 128, False),
    ("bert_base_b1_intermediate", 128, 768, 3072, True),
    ("bert_base_b1_output", 128, 3072, 768, False),
    # SqueezeNet's squeeze layers at batch 8 as products (a channels-last 1x1 convolution is one):
    # pixels x C by C x 16.
    ("squeezenet_b8_fire4_squeeze", 24200, 128, 16, False),
    ("squeezenet_b8_fire3_squeeze", 24200, 64, 16, False),
]

# column name, KILN_DISABLE_TACTICS
COLUMNS = [("kiln", ""), ("packed_avx2", "packed_avx512"), ("onednn", "packed_")]


def make_model(path, m, k, n, gelu):
    import onnx
    from onnx import helper, numpy_helper
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", ["p", "b"], ["h"])]
    if gelu:
        inits += [numpy_helper.from_array(np.array(v, np.float32), name)
                  for v, name in ((1.4142135, "sqrt2"), (1.0, "one"), (0.5, "half"))]
        nodes += [helper.make_node("Div", ["h", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
                  helper.make_node("Add", ["e", "one"], ["s"]), helper.make_node("Mul", ["h", "s"], ["t"]),
                  helper.make_node("Mul", ["t", "half"], ["y"])]
    else:
        nodes[-1].output[0] = "y"
    graph = helper.make_graph(nodes, "fc", [helper.make_tensor_value_info("x", 1, [m // 16, 16, k])],
                              [helper.make_tensor_value_info("y", 1, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


def kiln_time(kiln, model, threads, duration, disabled, workdir):
    """(median ms, MatrixMultiply kernel) of `kiln bench` with KILN_DISABLE_TACTICS=disabled."""
    median, rows = kiln_bench_profiled(kiln, model, threads, duration, disabled, workdir)
    kernel = [row["kernel"] for row in rows if row["type"] == "MatrixMultiply"]
    return median, kernel[0] if kernel else "?"


def ort_time(model, threads, iterations, workdir):
    """Median ms of ONNX Runtime's model_run events (after 3 untimed runs)."""
    events = ort_profiled_events(model, threads, iterations, workdir)
    runs = [e["dur"] / 1000.0 for e in events if e.get("name") == "model_run"]
    return statistics.median(runs[3:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.environ.get("KILN", "build-cpu/kiln"), help="the kiln binary")
    ap.add_argument("--threads", type=int, default=1, help="threads for both engines (default 1)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    ap.add_argument("--duration", type=float, default=0.7, help="seconds of kiln timing per round (default 0.7)")
    ap.add_argument("--iterations", type=int, default=50, help="ORT timed runs per round (default 50)")
    ap.add_argument("--layers", default="", help="comma-separated layer names (default: all)")
    ap.add_argument("--out", help="also write the table to this Markdown file")
    args = ap.parse_args()
    if not os.path.exists(args.kiln):
        sys.exit(f"no kiln binary at {args.kiln}: build it (cmake --build build-cpu --target kiln_cli) or pass --kiln")
    wanted = set(filter(None, args.layers.split(",")))
    workdir = tempfile.mkdtemp(prefix="kiln-matmul-layers-")
    head = " | ".join(f"{c} kernel | {c} ms | {c} GFLOP/s" for c, _ in COLUMNS)
    lines = [f"{cpu_description()}; threads {args.threads}, {args.rounds} alternating rounds, medians of the rounds; "
             "columns: kiln as built, then with packed_avx512 left out, then with both packed tactics left out", "",
             f"| layer | M x K x N | GELU | {head} | ORT ms | ORT GFLOP/s | kiln/ORT | packed_avx2/ORT | onednn/ORT |",
             "|---|---|---|" + "---|---:|---:|" * len(COLUMNS) + "---:|---:|---:|---:|---:|"]
    print("\n".join(lines), flush=True)
    for name, m, k, n, gelu in LAYERS:
        if wanted and name not in wanted:
            continue
        model = os.path.join(workdir, name + ".onnx")
        make_model(model, m, k, n, gelu)
        gflop = 2.0 * m * k * n / 1e9
        times = {c: [] for c, _ in COLUMNS}
        kernels = {}
        ort_ms = []
        for _ in range(args.rounds):
            ort_ms.append(ort_time(model, args.threads, args.iterations, workdir))
            for c, disabled in COLUMNS:
                ms, kernels[c] = kiln_time(args.kiln, model, args.threads, args.duration, disabled, workdir)
                times[c].append(ms)
        med = {c: statistics.median(v) for c, v in times.items()}
        om = statistics.median(ort_ms)
        cells = " | ".join(f"{kernels[c]} | {med[c]:.3f} | {gflop / med[c] * 1e3:.0f}" for c, _ in COLUMNS)
        line = (f"| {name} | {m} x {k} x {n} | {'yes' if gelu else 'no'} | {cells} | {om:.3f} | "
                f"{gflop / om * 1e3:.0f} | " + " | ".join(f"{med[c] / om:.2f}" for c, _ in COLUMNS) + " |")
        lines.append(line)
        print(line, flush=True)
    lines += ["", "Ratios under 1: kiln is faster."]
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
