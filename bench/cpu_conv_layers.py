#!/usr/bin/env python3
"""Per-layer CPU convolution times: kiln's chosen kernel, kiln without some of its tactics, and
ONNX Runtime, on one-convolution models (Conv + ReLU or SiLU, or none) shaped like the layers of
ResNet-50, TinyYolo and SqueezeNet, in alternating rounds.

Each engine's own profiler gives the convolution's time alone (kiln: `kiln bench --export-profile`,
the Convolution layer's mean; ONNX Runtime: its profiling output, the Conv node's median), so the
layout conversions around a single layer (NCHW <-> channels-last in kiln, NCHWc in ORT) are left
out, as inside a whole network (ORT's SiLU is a node of its own, QuickGelu, and not counted; kiln's
is fused into the convolution and counted). The table gives the median of the rounds for each
and the ratios.

Example:
  python3 bench/cpu_conv_layers.py --kiln build-cpu/kiln --rounds 5 --without igemm_avx2,winograd_avx2
"""
import argparse
import os
import statistics
import sys
import tempfile

import numpy as np

from _common import kiln_bench_profiled, ort_profiled_events

# name, batch, C, H, W, K, kernel, stride, pad, activation
LAYERS = [
    ("tinyyolo_stem_6x6_s2", 1, 3, 320, 320, 16, 6, 2, 2, "silu"),
    ("tinyyolo_16_32_s2", 1, 16, 160, 160, 32, 3, 2, 1, "silu"),
    ("tinyyolo_16_16_s1", 1, 16, 80, 80, 16, 3, 1, 1, "silu"),
    ("tinyyolo_32_64_s2", 1, 32, 80, 80, 64, 3, 2, 1, "silu"),
    ("tinyyolo_64_128_s2", 1, 64, 40, 40, 128, 3, 2, 1, "silu"),
    ("tinyyolo_128_256_s2", 1, 128, 20, 20, 256, 3, 2, 1, "silu"),
    ("tinyyolo_1x1_32_16_80", 1, 32, 80, 80, 16, 1, 1, 0, "silu"),
    ("tinyyolo_1x1_16_16_80", 1, 16, 80, 80, 16, 1, 1, 0, "silu"),
    ("tinyyolo_1x1_32_32_80", 1, 32, 80, 80, 32, 1, 1, 0, "silu"),
    ("tinyyolo_1x1_64_32_40", 1, 64, 40, 40, 32, 1, 1, 0, "silu"),
    ("tinyyolo_1x1_64_64_40", 1, 64, 40, 40, 64, 1, 1, 0, "silu"),
    ("tinyyolo_1x1_128_64_20", 1, 128, 20, 20, 64, 1, 1, 0, "silu"),
    ("tinyyolo_det_64_255_40", 1, 64, 40, 40, 255, 1, 1, 0, "none"),
    ("resnet_stem_7x7_s2", 1, 3, 224, 224, 64, 7, 2, 3, "relu"),
    ("resnet_stem_7x7_s2_b8", 8, 3, 224, 224, 64, 7, 2, 3, "relu"),
    ("squeezenet_stem_3x3_s2_b8", 8, 3, 224, 224, 64, 3, 2, 0, "relu"),
    ("mobilenet_stem_3x3_s2", 1, 3, 224, 224, 16, 3, 2, 1, "hardswish"),
    ("mobilenet_stem_3x3_s2_b8", 8, 3, 224, 224, 16, 3, 2, 1, "hardswish"),
    ("tinyyolo_stem_6x6_s2_b8", 8, 3, 320, 320, 16, 6, 2, 2, "silu"),
    ("resnet_64_64_56", 1, 64, 56, 56, 64, 3, 1, 1, "relu"),
    ("resnet_128_128_s2", 1, 128, 56, 56, 128, 3, 2, 1, "relu"),
    ("resnet_256_256_s2", 1, 256, 28, 28, 256, 3, 2, 1, "relu"),
    ("resnet_512_512_s2", 1, 512, 14, 14, 512, 3, 2, 1, "relu"),
    ("resnet_512_512_7x7", 1, 512, 7, 7, 512, 3, 1, 1, "relu"),
    ("resnet_128_128_s2_b8", 8, 128, 56, 56, 128, 3, 2, 1, "relu"),
    ("resnet_256_256_s2_b8", 8, 256, 28, 28, 256, 3, 2, 1, "relu"),
    ("resnet_512_512_s2_b8", 8, 512, 14, 14, 512, 3, 2, 1, "relu"),
    ("squeezenet_16_64_55", 1, 16, 55, 55, 64, 3, 1, 1, "relu"),
    ("squeezenet_16_64_55_b8", 8, 16, 55, 55, 64, 3, 1, 1, "relu"),
    ("squeezenet_32_128_27_b8", 8, 32, 27, 27, 128, 3, 1, 1, "relu"),
    ("squeezenet_1x1_64_16_55_b8", 8, 64, 55, 55, 16, 1, 1, 0, "relu"),
    ("squeezenet_1x1_128_16_55_b8", 8, 128, 55, 55, 16, 1, 1, 0, "relu"),
    ("squeezenet_1x1_128_32_27_b8", 8, 128, 27, 27, 32, 1, 1, 0, "relu"),
    ("squeezenet_1x1_256_32_27_b8", 8, 256, 27, 27, 32, 1, 1, 0, "relu"),
    ("squeezenet_1x1_16_64_55_b8", 8, 16, 55, 55, 64, 1, 1, 0, "relu"),
]


def make_model(path, batch, c, h, w, k, kernel, stride, pad, act):
    import onnx
    from onnx import helper, numpy_helper
    rng = np.random.default_rng(0)
    weights = numpy_helper.from_array((rng.standard_normal((k, c, kernel, kernel)) * 0.1).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(k).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[kernel, kernel], strides=[stride, stride],
                              pads=[pad] * 4, name="conv")]
    if act == "relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    elif act == "hardswish":
        nodes.append(helper.make_node("HardSwish", ["c"], ["y"]))
    elif act == "none":
        nodes[0].output[0] = "y"
    else:
        nodes += [helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    graph = helper.make_graph(nodes, "layer", [helper.make_tensor_value_info("x", 1, [batch, c, h, w])],
                              [helper.make_tensor_value_info("y", 1, None)], [weights, bias])
    # IR version 8: what ONNX Runtimes older than the onnx package read too.
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


def kiln_time(kiln, model, threads, duration, disabled, workdir):
    """(ms, kernel) of the Convolution layer, with the Reformat of the NCHW input into channels-last
    before it where there is one (ORT's Conv reads the NCHW input too): the means of `kiln bench
    --export-profile`."""
    _, rows = kiln_bench_profiled(kiln, model, threads, duration, disabled, workdir)
    conv = [row for row in rows if row["type"] == "Convolution"][0]
    reformat = sum(row["mean_ms"] for row in rows if row["type"] == "Reformat" and row["name"].startswith("x.nhwc"))
    return conv["mean_ms"] + reformat, conv["kernel"] + (" + Reformat" if reformat else "")


def ort_time(model, threads, iterations, workdir):
    """ms of the Conv node: the median of ONNX Runtime's profiled runs (after 3 untimed ones)."""
    events = ort_profiled_events(model, threads, iterations, workdir)
    times = [e["dur"] / 1000.0 for e in events
             if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["args"].get("op_name") == "Conv"]
    return statistics.median(times[3:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.environ.get("KILN", "build-cpu/kiln"), help="the kiln binary")
    ap.add_argument("--threads", type=int, default=2, help="threads for both engines (default 2)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    ap.add_argument("--duration", type=float, default=0.7, help="seconds of kiln timing per round (default 0.7)")
    ap.add_argument("--iterations", type=int, default=20, help="ORT timed runs per round (default 20)")
    ap.add_argument("--without", default="igemm_avx2,winograd_avx2",
                    help="tactic-name prefixes left out for the 'kiln without' column (KILN_DISABLE_TACTICS)")
    ap.add_argument("--layers", default="", help="comma-separated layer names (default: all)")
    ap.add_argument("--out", help="also write the table to this Markdown file")
    args = ap.parse_args()
    if not os.path.exists(args.kiln):
        sys.exit(f"no kiln binary at {args.kiln}: build it (cmake --build build-cpu --target kiln_cli) or pass --kiln")
    wanted = set(filter(None, args.layers.split(",")))
    workdir = tempfile.mkdtemp(prefix="kiln-conv-layers-")
    lines = [f"threads {args.threads}, {args.rounds} alternating rounds; medians of the rounds; "
             f"'without': KILN_DISABLE_TACTICS={args.without}", "",
             "| layer | GFLOP | kiln kernel | kiln ms | without: kernel | without ms | ORT ms | kiln/ORT | "
             "without/ORT | kiln/without |", "|---|---:|---|---:|---|---:|---:|---:|---:|---:|"]
    print("\n".join(lines), flush=True)
    for name, n, c, h, w, k, kernel, stride, pad, act in LAYERS:
        if wanted and name not in wanted:
            continue
        model = os.path.join(workdir, name + ".onnx")
        make_model(model, n, c, h, w, k, kernel, stride, pad, act)
        oh, ow = (h + 2 * pad - kernel) // stride + 1, (w + 2 * pad - kernel) // stride + 1
        gflop = 2.0 * n * k * c * kernel * kernel * oh * ow / 1e9
        kiln_ms, without_ms, ort_ms = [], [], []
        for _ in range(args.rounds):
            ort_ms.append(ort_time(model, args.threads, args.iterations, workdir))
            ms, kernel_name = kiln_time(args.kiln, model, args.threads, args.duration, "", workdir)
            kiln_ms.append(ms)
            ms, without_kernel = kiln_time(args.kiln, model, args.threads, args.duration, args.without, workdir)
            without_ms.append(ms)
        km, wm, om = (statistics.median(v) for v in (kiln_ms, without_ms, ort_ms))
        line = (f"| {name} | {gflop:.3f} | {kernel_name} | {km:.3f} | {without_kernel} | {wm:.3f} | {om:.3f} | "
                f"{km / om:.2f} | {wm / om:.2f} | {km / wm:.2f} |")
        lines.append(line)
        print(line, flush=True)
    lines += ["", "Ratios under 1: the first named is faster."]
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
