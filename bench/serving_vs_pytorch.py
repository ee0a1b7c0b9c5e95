#!/usr/bin/env python3
"""kiln and PyTorch side by side under serving patterns, in one run, with ratios.

kiln's engines beat PyTorch with CUDA graphs in the steady state (one shape, one buffer set, a graph
replayed); this benchmark checks that kiln keeps that speed under what servers do. Workloads (fp16 on
the GPU, fp32 on the CPU):

  * resnet50         torchvision ResNet-50, random weights (seed 0), exported in this run to ONNX with
                     a dynamic batch axis; kiln and PyTorch run the same weights.
  * tinyyolo_tswish  kiln: <models-dir>/tinyyolo_tswish/model.onnx (custom op TemperatureSwish through
                     kiln's built-in plugin); PyTorch: TinyYolo(act="tswish") of <torch-models>/torch_models.py,
                     its weights re-created as the export script made them (same seeds, same order).
  * bert_tiny        kiln: <models-dir>/bert_tiny/model.onnx (input_ids, attention_mask: int64 [N, S]);
                     PyTorch: a BERT encoder defined here (the exported transformers BertModel's
                     architecture: 2 layers, hidden 128, 2 heads, eager attention, erf GELU) loaded with
                     the ONNX file's weights.
  For the two shared models, PyTorch fp32 is checked against the model's reference output
  (test_data_set_0) first; then kiln's output (`kiln run`) and PyTorch fp16's are compared with
  PyTorch fp32 on the same input, for all three workloads.

Scenarios (each for kiln and PyTorch):
  steady    one shape, one buffer set, CUDA graph, at every batch the schedule uses (1..8);
  schedule  the batch size changes on every call, cycling 1..8 (kiln: bench --shape-schedule; PyTorch:
            eager, and per-shape CUDA graphs captured on first sight of a shape);
  buffers   2 and 4 input/output buffer sets used in turn, batch 1 (kiln --buffers K);
  nograph   no CUDA graphs: kiln --no-cuda-graph against PyTorch eager, batch 1 and 8;
  streams   1, 2, 4, 8 streams at batch 1 (kiln --streams N; PyTorch: N threads, each with its own
            stream and graph): throughput and its ratio to 1 stream;
  seqlen    bert_tiny: the sequence length changes on every call (16..128) at batch 1 and 4, plus the
            steady state at each shape.

kiln runs through `kiln bench --json --no-data-transfers` (its JSON is saved under --raw-dir); PyTorch
is timed here: each call is one inference plus a synchronization, host clock. See bench/README.md for
how to read the ratios and the targets.

Usage: python3 bench/serving_vs_pytorch.py --kiln build-gpu/kiln --models-dir .dev/models \\
           --torch-models .dev/tools --out bench/results/DATE_h200_serving_vs_pytorch.md
       python3 bench/serving_vs_pytorch.py --kiln build/kiln --device cpu --quick --max-batch 2 ...  (smoke)
"""
import argparse
import datetime
import json
import math
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict

import numpy as np

from _common import export_resnet50, kiln_build, percentile, rel_to_max

SCENARIOS = ["steady", "schedule", "buffers", "nograph", "streams", "seqlen"]
CUDA_ONLY_SCENARIOS = {"nograph", "streams"}
WORKLOADS = ["resnet50", "tinyyolo_tswish", "bert_tiny"]
TITLES = {"resnet50": "ResNet-50", "tinyyolo_tswish": "TinyYolo TemperatureSwish", "bert_tiny": "bert_tiny"}

# Targets (kiln against its own steady state, except where PyTorch is named).
SCHEDULE_TARGET = 1.3   # schedule mean latency / mean steady-state latency of the same shapes
BUFFERS_TARGET = 1.1    # K buffer sets / one buffer set, batch 1
NOGRAPH_TARGET = 2.0    # ResNet-50 batch 1 without graphs / with graphs (and below PyTorch eager)
STREAMS_TARGET = 2.5    # throughput of 4 streams / 1 stream, batch 1
GOAL = 1.1              # every scenario within this factor of steady state


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def summarize(samples):
    """Statistics of a list of latencies in ms, with kiln bench's STATS keys."""
    if not samples:
        return None
    return {"count": len(samples), "min": min(samples), "max": max(samples), "mean": statistics.fmean(samples),
            "median": statistics.median(samples), "p50": statistics.median(samples),
            "p90": percentile(samples, 90), "p95": percentile(samples, 95), "p99": percentile(samples, 99)}


def fmt(v, digits=3):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{v:.{digits}f}"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def fr(v):
    """A ratio for a table cell."""
    return "n/a" if v is None else f"{v:.2f}x"


def parse_shape_key(text, rank2):
    """kiln bench's per-shape label ('input:1x3x224x224' or 'input_ids:1x16+attention_mask:1x16', inputs
    joined by '+', ',' or spaces) -> the workload's shape key: the first input's batch (CNNs) or
    (batch, sequence) (BERT)."""
    m = re.search(r"[^:+,\s]+:(\d+(?:x\d+)*)", text)
    if not m:
        return None
    dims = [int(d) for d in m.group(1).split("x")]
    return (dims[0], dims[1]) if rank2 and len(dims) >= 2 else dims[0]


def key_text(key):
    return f"{key[0]}x{key[1]}" if isinstance(key, tuple) else str(key)


# ------------------------------------------------------------------------------------------------ workloads

class Workload:
    """One model: its ONNX file, kiln engine, PyTorch module, shapes and request tensors."""

    def __init__(self, name, onnx_path, input_names, sample_shape, is_bert):
        self.name, self.title = name, TITLES[name]
        self.onnx, self.input_names = onnx_path, input_names
        self.sample_shape = sample_shape  # CNN: (C, H, W)
        self.is_bert = is_bert
        self.engine = None
        self.build_s = None
        self.model = None          # PyTorch module, CPU fp32 (reference), set by the loader
        self.torch_model = None    # on the benchmark device and precision
        self.accuracy = {}         # name -> value / note
        self.same_weights = False  # kiln's ONNX file and the PyTorch module hold the same weights
        self.profile = None        # kiln build's shape flags
        self.timing_cache = None
        self.tuned = {}            # streams -> engine built with --tune-for-streams (None: failed)

    def dims(self, key):
        """Per input, the dims of a shape key."""
        if self.is_bert:
            return [(key[0], key[1])] * 2
        return [(key,) + tuple(self.sample_shape)]

    def kiln_shapes(self, key, sep=","):
        return sep.join(f"{n}:{'x'.join(str(d) for d in dims)}" for n, dims in zip(self.input_names, self.dims(key)))

    def kiln_schedule(self, keys):
        return ",".join(self.kiln_shapes(k, "+") for k in keys)


def profile_args(wl, max_batch, opt_batch, bert_seq_range):
    if wl.is_bert:
        lo, opt, hi = bert_seq_range
        spec = lambda b, s: ",".join(f"{n}:{b}x{s}" for n in wl.input_names)
        mn, op, mx = spec(1, lo), spec(opt_batch, opt), spec(max_batch, hi)
    else:
        mn, op, mx = (wl.kiln_shapes(b) for b in (1, opt_batch, max_batch))
    return ["--min-shapes", mn, "--opt-shapes", op, "--max-shapes", mx]


# ------------------------------------------------------------------------------------------------ kiln side

class KilnSide:
    """Runs `kiln bench --json` and keeps every result (memoized by command line)."""

    def __init__(self, exe, device, raw_dir, duration, min_iters, warmup_ms, schedule_warmup_ms, graph_mode, extra):
        self.exe, self.device, self.raw_dir, self.min_iters = exe, device, raw_dir, min_iters
        self.duration, self.warmup_ms, self.schedule_warmup_ms = duration, warmup_ms, schedule_warmup_ms
        self.graph_mode, self.extra = graph_mode, list(extra)
        self.memo = {}
        self.runs = []      # (workload, tag, cmd, json or None)
        self.errors = []

    def bench(self, wl, tag, shapes=None, schedule=None, streams=1, buffers=1, graph=True, extra_args=()):
        if wl.engine is None:
            return None
        cmd = [self.exe, "bench", "--engine", wl.engine, "--json", "--duration", f"{self.duration:g}",
               "--iterations", str(self.min_iters),
               "--warmup", f"{self.schedule_warmup_ms if schedule else self.warmup_ms}ms"]
        if shapes:
            cmd += ["--shapes", shapes]
        if schedule:
            cmd += ["--shape-schedule", schedule]
        if streams != 1:
            cmd += ["--streams", str(streams)]
        if buffers != 1:
            cmd += ["--buffers", str(buffers)]
        if self.device == "cuda":
            cmd.append("--no-data-transfers")
            if not graph:
                cmd.append("--no-cuda-graph")
            elif self.graph_mode == "on":
                cmd.append("--cuda-graph")
        cmd += list(extra_args)
        cmd += self.extra
        key = tuple(cmd)
        if key in self.memo:
            return self.memo[key]
        log(f"kiln  {wl.name} {tag}")
        t0 = time.perf_counter()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=max(120.0, 20 * self.duration + 90))
        except subprocess.TimeoutExpired:
            r = None
        result = None
        if r is None:
            self.errors.append(f"{wl.name} {tag}: kiln bench timed out: {' '.join(cmd)}")
        elif r.returncode != 0:
            self.errors.append(f"{wl.name} {tag}: kiln bench exit {r.returncode}: {' '.join(cmd)}\n"
                               + (r.stdout[-1500:] + r.stderr[-1500:]).strip())
        else:
            try:
                result = parse_json_object(r.stdout)
            except ValueError as e:
                self.errors.append(f"{wl.name} {tag}: cannot parse kiln bench JSON ({e}): {r.stdout[:500]}")
        if result is not None:
            safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{wl.name}__{tag}")
            with open(os.path.join(self.raw_dir, safe + ".json"), "w") as f:
                json.dump(result, f, indent=1)
            lat = (result.get("latency_ms") or {})
            log(f"       median {fmt(lat.get('median'))} ms, mean {fmt(lat.get('mean'))} ms, "
                f"{fmt(result.get('throughput_qps'), 1)} qps ({time.perf_counter() - t0:.1f} s)")
        elif self.errors:
            log("       FAILED: " + self.errors[-1].splitlines()[0][:300])
        self.runs.append({"workload": wl.name, "tag": tag, "command": cmd, "ok": result is not None})
        self.memo[key] = result
        return result

    def steady(self, wl, key, graph=True):
        return self.bench(wl, f"steady_{key_text(key)}" + ("" if graph else "_nograph"), shapes=wl.kiln_shapes(key),
                          graph=graph)

    def capture_failures(self):
        total, seen = 0, 0
        for j in self.memo.values():
            cs = (j or {}).get("context_stats") or {}
            if "graph_capture_failures" in cs:
                total += int(cs["graph_capture_failures"])
                seen += 1
        return total, seen


def parse_json_object(text):
    text = text.strip()
    try:
        return json.loads(text)
    except ValueError:
        a, b = text.find("{"), text.rfind("}")
        if a < 0 or b <= a:
            raise ValueError("no JSON object on stdout")
        return json.loads(text[a:b + 1])


def kstat(j, field="median", what="latency_ms"):
    if not j:
        return None
    return (j.get(what) or {}).get(field)


def kper_shape(j, rank2):
    """kiln bench per_shape -> {key: entry}."""
    out = {}
    for e in (j or {}).get("per_shape") or []:
        k = parse_shape_key(str(e.get("shapes", "")), rank2)
        if k is not None:
            out[k] = e
    return out


# ------------------------------------------------------------------------------------------------ PyTorch side

class TorchSide:
    """Times PyTorch calls: eager, per-shape CUDA graphs (static input/output tensors, the request
    copied in, replay, the output copied out), rotating buffers and several streams."""

    def __init__(self, device, duration, warmup_s, min_iters):
        import torch
        self.torch, self.cuda = torch, device == "cuda"
        self.device, self.dtype = torch_placement(device)
        self.duration, self.warmup_s, self.min_iters = duration, warmup_s, min_iters

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def request(self, wl, key, seed=0):
        """Request tensors already on the device (the host->device transfer is not timed on either side)."""
        torch = self.torch
        g = torch.Generator().manual_seed(1000 + seed)
        if wl.is_bert:
            b, s = key
            ids = torch.randint(0, 1000, (b, s), generator=g, dtype=torch.int64)
            mask = torch.ones(b, s, dtype=torch.int64)
            return [ids.to(self.device), mask.to(self.device)]
        x = torch.rand((key,) + tuple(wl.sample_shape), generator=g)
        return [x.to(self.device, dtype=self.dtype).contiguous(memory_format=torch.channels_last)]

    def capture(self, model, static_inputs):
        """Capture one inference into a CUDA graph (warm-up on a side stream first, as PyTorch's docs do)."""
        torch = self.torch
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                model(*static_inputs)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = model(*static_inputs)
        torch.cuda.synchronize()
        return g, out

    def graph_entry(self, cache, wl, key):
        """Per-shape graph cache of a careful server: capture on first sight of a shape."""
        if key not in cache:
            static = [t.clone() for t in self.request(wl, key, seed=99)]
            g, out = self.capture(wl.torch_model, static)
            cache[key] = (g, static, out)
        return cache[key]

    def loop(self, call, keys, duration=None, sync=None, min_cycles=2):
        """Runs call(key) over keys in turn: warm-up (at least min_cycles rounds and warmup_s), then timed
        calls for `duration` seconds (at least min_iters). Each timed call = call + sync, host clock.
        Returns (samples in ms, {key: samples})."""
        duration = self.duration if duration is None else duration
        min_iters = self.min_iters
        sync = sync or self.sync
        n, i = len(keys), 0
        t_end = time.perf_counter() + self.warmup_s
        while i < min_cycles * n or time.perf_counter() < t_end:
            call(keys[i % n])
            sync()
            i += 1
        samples, per = [], defaultdict(list)
        i = 0
        t_end = time.perf_counter() + duration
        while i < min_iters or time.perf_counter() < t_end:
            k = keys[i % n]
            t0 = time.perf_counter()
            call(k)
            sync()
            dt = (time.perf_counter() - t0) * 1e3
            samples.append(dt)
            per[k].append(dt)
            i += 1
        return samples, dict(per)

    # -- scenarios
    def eager(self, wl, keys, duration=None):
        reqs = {k: self.request(wl, k) for k in keys}
        m = wl.torch_model
        with self.torch.inference_mode():
            return self.loop(lambda k: m(*reqs[k]), keys, duration)

    def graphs(self, wl, keys, cache, duration=None):
        """Per-shape CUDA graphs; keys in turn (one key = the steady state)."""
        reqs = {k: self.request(wl, k) for k in keys}

        def call(k):
            g, static, out = self.graph_entry(cache, wl, k)
            for s, r in zip(static, reqs[k]):
                s.copy_(r)
            g.replay()
            return out.clone()

        with self.torch.inference_mode():
            return self.loop(call, keys, duration)

    def buffers(self, wl, key, k_sets, graph, duration=None):
        """K request/buffer sets used in turn at one shape. Eager: K request tensors; graph: K graphs,
        each with its own static input/output tensors (kiln --buffers K binds K address sets)."""
        reqs = [self.request(wl, key, seed=i) for i in range(k_sets)]
        m = wl.torch_model
        with self.torch.inference_mode():
            if not graph:
                return self.loop(lambda i: m(*reqs[i]), list(range(k_sets)), duration)
            entries = []
            for i in range(k_sets):
                static = [t.clone() for t in self.request(wl, key, seed=50 + i)]
                g, out = self.capture(m, static)
                entries.append((g, static, out))

            def call(i):
                g, static, out = entries[i]
                for s, r in zip(static, reqs[i]):
                    s.copy_(r)
                g.replay()
                return out.clone()

            return self.loop(call, list(range(k_sets)), duration)

    def streams(self, wl, key, n_streams, duration=None):
        """N threads, each with its own CUDA stream and its own graph (captured first, one after another),
        each timing its calls (copy in, replay, copy out, stream synchronize). Returns (qps, samples)."""
        torch = self.torch
        duration = self.duration if duration is None else duration
        with torch.inference_mode():
            workers = []
            for i in range(n_streams):
                static = [t.clone() for t in self.request(wl, key, seed=70 + i)]
                g, out = self.capture(wl.torch_model, static)
                workers.append({"stream": torch.cuda.Stream(), "g": g, "static": static, "out": out,
                                "req": self.request(wl, key, seed=i), "samples": [], "error": None})
        torch.cuda.synchronize()   # the requests are on the device before other streams read them
        window = {}
        # Every thread warms up, then waits here; the timed window opens when the last one arrives.
        barrier = threading.Barrier(n_streams, action=lambda: window.__setitem__("start", time.perf_counter()))

        def run(w):
            try:
                with torch.inference_mode(), torch.cuda.stream(w["stream"]):
                    def call():
                        for s, r in zip(w["static"], w["req"]):
                            s.copy_(r)
                        w["g"].replay()
                        w["out"].clone()
                        w["stream"].synchronize()
                    t_end = time.perf_counter() + self.warmup_s
                    while time.perf_counter() < t_end:
                        call()
                    barrier.wait()
                    t_end = window["start"] + duration
                    while time.perf_counter() < t_end:
                        t0 = time.perf_counter()
                        call()
                        w["samples"].append((time.perf_counter() - t0) * 1e3)
                    w["end"] = time.perf_counter()
            except Exception as e:  # reported by the caller
                w["error"] = repr(e)
                try:
                    barrier.abort()
                except Exception:
                    pass

        threads = [threading.Thread(target=run, args=(w,)) for w in workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        errs = [w["error"] for w in workers if w["error"]]
        if errs:
            raise RuntimeError("PyTorch stream worker failed: " + errs[0])
        count = sum(len(w["samples"]) for w in workers)
        wall = max(w["end"] for w in workers) - window["start"]
        samples = [s for w in workers for s in w["samples"]]
        torch.cuda.synchronize()
        return count / wall, samples


# ------------------------------------------------------------------------------------------------ models

def torch_placement(device):
    """(torch device, dtype) of the PyTorch side: fp16 on the GPU, fp32 on the CPU."""
    import torch
    return device, (torch.float16 if device == "cuda" else torch.float32)


def load_torch_models(path):
    sys.path.insert(0, path)
    import torch_models  # noqa: E402  (from --torch-models)
    return torch_models


def tinyyolo_as_exported(tm):
    """TinyYolo(act='tswish') with the weights tools/export_models.py gave it, when the same PyTorch RNG
    sequence reproduces them (seed 0, the 320x320 input drawn first, the SiLU model, then this one);
    the caller checks the result against the model's reference output before relying on it."""
    import torch
    torch.manual_seed(0)
    torch.rand(1, 3, 320, 320)
    tm.init_random(tm.TinyYolo(w=16, act="silu"), seed=1)
    return tm.init_random(tm.TinyYolo(w=16, act="tswish"), seed=1).eval()


def bert_module(num_layers=2, hidden=128, heads=2, intermediate=512, vocab=1000, max_pos=128, type_vocab=2,
                eps=1e-12):
    """The architecture of transformers' BertModel (eager attention, absolute positions, erf GELU) as
    exported to bert_tiny/model.onnx, with the same parameter names (without the 'm.' prefix)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Embeddings(nn.Module):
        def __init__(self):
            super().__init__()
            self.word_embeddings = nn.Embedding(vocab, hidden)
            self.position_embeddings = nn.Embedding(max_pos, hidden)
            self.token_type_embeddings = nn.Embedding(type_vocab, hidden)
            self.LayerNorm = nn.LayerNorm(hidden, eps=eps)
            self.register_buffer("position_ids", torch.arange(max_pos), persistent=False)

        def forward(self, ids):
            s = ids.shape[1]
            x = self.word_embeddings(ids) + self.token_type_embeddings(torch.zeros_like(ids))
            x = x + self.position_embeddings(self.position_ids[:s])
            return self.LayerNorm(x)

    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))

        def forward(self, x, bias):
            b, s, _ = x.shape
            d = hidden // heads
            split = lambda t: t.view(b, s, heads, d).transpose(1, 2)
            q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) * (d ** -0.5) + bias
            ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
            return ctx.transpose(1, 2).reshape(b, s, hidden)

    class DenseLN(nn.Module):
        def __init__(self, cin):
            super().__init__()
            self.dense = nn.Linear(cin, hidden)
            self.LayerNorm = nn.LayerNorm(hidden, eps=eps)

        def forward(self, x, residual):
            return self.LayerNorm(self.dense(x) + residual)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            setattr(self, "self", SelfAttention())
            self.output = DenseLN(hidden)

        def forward(self, x, bias):
            return self.output(getattr(self, "self")(x, bias), x)

    class Intermediate(nn.Module):
        def __init__(self):
            super().__init__()
            self.dense = nn.Linear(hidden, intermediate)

        def forward(self, x):
            return F.gelu(self.dense(x))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention, self.intermediate, self.output = Attention(), Intermediate(), DenseLN(intermediate)

        def forward(self, x, bias):
            a = self.attention(x, bias)
            return self.output(self.intermediate(a), a)

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.ModuleList(Layer() for _ in range(num_layers))

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.embeddings, self.encoder = Embeddings(), Encoder()

        def forward(self, ids, mask):
            x = self.embeddings(ids)
            bias = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
            for layer in self.encoder.layer:
                x = layer(x, bias)
            return x

    return Bert()


def bert_from_onnx(onnx_path):
    """bert_module() with the weights of the exported ONNX file: initializers by name (through the
    exporter's Identity aliases), and each Linear weight from the MatMul node named after its module
    (/m/encoder/layer.0/attention/self/query/MatMul: the [in, out] initializer, transposed)."""
    import onnx
    import torch
    from onnx import numpy_helper
    m = onnx.load(onnx_path)
    init = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    alias = {n.output[0]: n.input[0] for n in m.graph.node if n.op_type == "Identity"}

    def value(name):
        while name not in init and name in alias:
            name = alias[name]
        return init.get(name)

    sd = {}
    for name in list(init) + list(alias):
        if name.startswith("m.") and value(name) is not None:
            sd[name[2:]] = torch.from_numpy(np.array(value(name)))
    for n in m.graph.node:
        if n.op_type == "MatMul" and n.name.startswith("/m/") and n.name.endswith("/MatMul"):
            w = value(n.input[1])
            if w is not None:
                module = n.name[3:-len("/MatMul")].replace("/", ".")
                sd[module + ".weight"] = torch.from_numpy(np.ascontiguousarray(np.array(w).T))
    model = bert_module()
    model.load_state_dict(sd, strict=True)
    return model.eval()


def read_test_data(folder):
    """test_data_set_0: [inputs], [outputs] as numpy arrays (ONNX TensorProto files)."""
    import onnx
    from onnx import numpy_helper
    ins, outs = [], []
    for prefix, dst in (("input", ins), ("output", outs)):
        i = 0
        while os.path.exists(os.path.join(folder, f"{prefix}_{i}.pb")):
            t = onnx.TensorProto()
            with open(os.path.join(folder, f"{prefix}_{i}.pb"), "rb") as f:
                t.ParseFromString(f.read())
            dst.append(numpy_helper.to_array(t))
            i += 1
    return ins, outs


def kiln_run_outputs(kiln, engine, input_args, outdir):
    """`kiln run` once on given inputs; returns the first output as float32."""
    cmd = [kiln, "run", "--engine", engine, "--output-dir", outdir, "--json"] + input_args
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError("kiln run failed: " + " ".join(cmd) + "\n" + r.stdout[-1500:] + r.stderr[-1500:])
    j = parse_json_object(r.stdout)
    return np.load(j["outputs"][0]["file"]).astype(np.float32)


def check_accuracy(args, wl, workdir):
    """kiln's output and PyTorch's on the same input, where both hold the same weights."""
    import torch
    tdev, dtype = torch_placement(args.device)
    folder = os.path.join(workdir, "accuracy", wl.name)
    os.makedirs(folder, exist_ok=True)
    if wl.name == "resnet50":
        x = np.random.default_rng(0).random((2,) + tuple(wl.sample_shape), dtype=np.float32)
        np.save(os.path.join(folder, "input.npy"), x)
        inputs, input_args, ref_expected = [x], ["--input", f"input={os.path.join(folder, 'input.npy')}"], None
    else:
        data = os.path.join(args.models_dir, wl.name, "test_data_set_0")
        inputs, outs = read_test_data(data)
        input_args, ref_expected = ["--inputs-dir", data], outs[0]
    with torch.inference_mode():
        ref_model = wl.model.to(tdev).float().eval()
        t_in = [torch.from_numpy(np.array(a)).to(tdev) for a in inputs]
        ref = ref_model(*t_in).float().cpu().numpy().astype(np.float64)
        wl.model = ref_model.cpu()
        if ref_expected is not None:
            wl.accuracy["torch_fp32_vs_reference"] = rel_to_max(ref.astype(np.float32), ref_expected.astype(np.float64))
            wl.same_weights = wl.accuracy["torch_fp32_vs_reference"] < 1e-3
        else:
            wl.same_weights = True
        if not wl.is_bert:
            t_in = [t.to(dtype).contiguous(memory_format=torch.channels_last) for t in t_in]
        low = wl.torch_model(*t_in).float().cpu().numpy()
        wl.accuracy["torch_vs_fp32"] = rel_to_max(low, ref)
    if wl.engine and wl.same_weights:
        out = kiln_run_outputs(args.kiln, wl.engine, input_args, os.path.join(folder, "kiln_out"))
        wl.accuracy["kiln_vs_fp32"] = rel_to_max(out, ref)
    log(f"accuracy {wl.name}: " + ", ".join(f"{k} {v:.2e}" for k, v in wl.accuracy.items())
        + ("" if wl.same_weights else " (PyTorch's weights differ from the ONNX file's: no kiln comparison)"))


def prepare_torch_model(args, wl):
    import copy
    import torch
    tdev, dtype = torch_placement(args.device)
    m = copy.deepcopy(wl.model).to(device=tdev, dtype=dtype).eval()   # floating parameters and buffers only
    if not wl.is_bert:
        m = m.to(memory_format=torch.channels_last)
    wl.torch_model = m


# ------------------------------------------------------------------------------------------------ the run

class Results:
    def __init__(self):
        self.tables = []         # (title, note, header, rows)
        self.targets = []        # (name, value text, PASS/FAIL/n/a, detail)
        self.goal = []           # (name, ratio)
        self.notes = []
        self.errors = []
        self.engines = []        # per workload: engine, build time, accuracy

    def table(self, title, note, header, rows):
        self.tables.append((title, note, header, rows))

    def target(self, name, ok, value, detail=""):
        self.targets.append((name, value, "n/a" if ok is None else ("PASS" if ok else "FAIL"), detail))

    def goal_item(self, name, r):
        self.goal.append((name, r))


def run_cnn(args, wl, kiln, ts, res, scenarios):
    cuda = args.device == "cuda"
    batches = args.batch_list
    bmax = max(batches)
    graph_cache = {}
    # Steady state: every shape another scenario compares with.
    steady_keys = set()
    if "steady" in scenarios or "schedule" in scenarios:
        steady_keys.update(batches)
    if "buffers" in scenarios or "streams" in scenarios:
        steady_keys.add(1)
    if "nograph" in scenarios:
        steady_keys.update({1, bmax})
    steady_keys = sorted(steady_keys)
    k_steady = {b: kiln.steady(wl, b) for b in steady_keys}
    t_graph, t_eager = {}, {}
    if ts:
        for b in steady_keys:
            if cuda:
                log(f"torch {wl.name} steady graph batch {b}")
                t_graph[b] = summarize(ts.graphs(wl, [b], graph_cache)[0])
            log(f"torch {wl.name} steady eager batch {b}")
            t_eager[b] = summarize(ts.eager(wl, [b], duration=args.eager_duration)[0])

    def tg(b, f="median"):
        return (t_graph.get(b) or {}).get(f)

    def te(b, f="median"):
        return (t_eager.get(b) or {}).get(f)

    if "steady" in scenarios:
        rows = []
        for b in steady_keys:
            km = kstat(k_steady[b])
            rows.append([b, fmt(km), fmt(kstat(k_steady[b], "p99")), fmt(te(b)), fmt(tg(b)), fmt(tg(b, "p99")),
                         fr(ratio(km, tg(b))), fr(ratio(km, te(b))),
                         fmt(b * 1e3 / km, 0) if km else "n/a", fmt(b * 1e3 / tg(b), 0) if tg(b) else "n/a",
                         graph_use(k_steady[b])])
        res.table(f"{wl.title}: 1. steady state (one shape, one buffer set{', CUDA graph' if cuda else ''})",
                  "Medians over the timed calls. kiln/graph = kiln median / PyTorch CUDA-graph median; kiln/eager = "
                  "kiln median / PyTorch eager median (below 1: kiln is faster).",
                  ["batch", "kiln ms", "kiln p99", "PyTorch eager ms", "PyTorch graph ms", "PyTorch graph p99",
                   "kiln/graph", "kiln/eager", "kiln items/s", "PyTorch graph items/s", "kiln graph replays"], rows)

    if "schedule" in scenarios:
        keys = list(batches)
        kj = kiln.bench(wl, "schedule", schedule=wl.kiln_schedule(keys))
        t_sched_g = t_sched_e = None
        if ts:
            if cuda:
                log(f"torch {wl.name} schedule graph")
                t_sched_g = ts.graphs(wl, keys, graph_cache)
            log(f"torch {wl.name} schedule eager")
            t_sched_e = ts.eager(wl, keys, duration=args.eager_duration)
        schedule_tables(res, wl, keys, kj, k_steady, t_sched_g, t_sched_e, t_graph, "2. batch size changing every call",
                        "batch")

    if "buffers" in scenarios:
        base = kstat(k_steady.get(1))
        rows = [[1, fmt(base), "1.00x" if base else "n/a", fmt(te(1)), fmt(tg(1)), fr(ratio(base, tg(1))),
                 fr(ratio(base, te(1)))]]
        for k_sets in args.buffer_list:
            kj = kiln.bench(wl, f"buffers{k_sets}_1", shapes=wl.kiln_shapes(1), buffers=k_sets)
            km = kstat(kj)
            pe = pg = None
            if ts:
                log(f"torch {wl.name} buffers {k_sets} eager")
                pe = summarize(ts.buffers(wl, 1, k_sets, graph=False, duration=args.eager_duration)[0])["median"]
                if cuda:
                    log(f"torch {wl.name} buffers {k_sets} graph")
                    pg = summarize(ts.buffers(wl, 1, k_sets, graph=True)[0])["median"]
            r = ratio(km, base)
            rows.append([k_sets, fmt(km), fr(r), fmt(pe), fmt(pg), fr(ratio(km, pg)), fr(ratio(km, pe))])
            res.target(f"{wl.title}: {k_sets} buffer sets within {BUFFERS_TARGET}x of one (batch 1, kiln medians)",
                       None if r is None else r <= BUFFERS_TARGET, fr(r))
            res.goal_item(f"{wl.title}: {k_sets} buffer sets / one", r)
        if cuda:
            # The other way to follow new addresses: one cached graph, captured again and updated
            # in place (cudaGraphExecUpdate) on every call, against K graphs replayed from the cache.
            kj = kiln.bench(wl, "buffers2_update_1", shapes=wl.kiln_shapes(1), buffers=2,
                            extra_args=["--graph-cache", "1"])
            km = kstat(kj)
            cs = (kj or {}).get("context_stats", {})
            upd = cs.get("graph_updates", 0)
            rows.append([f"2, one graph updated per call ({upd} updates)", fmt(km), fr(ratio(km, base)), "", "", "", ""])
        res.table(f"{wl.title}: 3. rotating buffer sets, batch 1",
                  "K input/output buffer sets used in turn (kiln --buffers K; PyTorch eager: K request tensors; PyTorch "
                  "graph: K graphs, each bound to its own static tensors). kiln/1 set = kiln median with K sets / with "
                  "one (the target: at most 1.1x).",
                  ["buffer sets", "kiln ms", "kiln / 1 set", "PyTorch eager ms", "PyTorch graph ms", "kiln/graph",
                   "kiln/eager"], rows)

    if "nograph" in scenarios and cuda:
        rows = []
        for b in sorted({1, bmax}):
            kj = kiln.steady(wl, b, graph=False)
            kn, kg = kstat(kj), kstat(k_steady.get(b))
            r = ratio(kn, kg)
            rows.append([b, fmt(kn), fmt(kstat(kj, "p99")), fmt(kg), fr(r), fmt(te(b)), fr(ratio(kn, te(b))), fmt(tg(b)),
                         fr(ratio(kn, tg(b)))])
            res.goal_item(f"{wl.title}: no graph / graph, batch {b}", r)
            if wl.name == "resnet50" and b == 1:
                ok = None if r is None or te(1) is None else (r <= NOGRAPH_TARGET and kn < te(1))
                res.target(f"ResNet-50 batch 1 without CUDA graph at most {NOGRAPH_TARGET}x kiln's graph latency and "
                           "below PyTorch eager", ok, f"{fr(r)} of graph; {fmt(kn)} ms vs PyTorch eager {fmt(te(1))} ms")
        res.table(f"{wl.title}: 4. no CUDA graphs",
                  "kiln --no-cuda-graph against PyTorch eager. no-graph/graph = kiln without graphs / kiln's own steady "
                  "state with graphs at the same shape; kiln/eager = kiln without graphs / PyTorch eager (below 1: kiln "
                  "is faster).",
                  ["batch", "kiln no-graph ms", "kiln no-graph p99", "kiln graph ms", "no-graph/graph",
                   "PyTorch eager ms", "kiln/eager", "PyTorch graph ms", "kiln no-graph / PyTorch graph"], rows)

    if "streams" in scenarios and cuda:
        rows, k1, p1 = [], None, None
        for n in args.stream_list:
            kj = kiln.bench(wl, f"streams{n}_1", shapes=wl.kiln_shapes(1), streams=n)
            kq = (kj or {}).get("throughput_qps")
            # The same model built for n streams at once (kiln build --tune-for-streams n: kernels
            # timed as n concurrent copies, the highest throughput wins), run with n streams.
            tq = tlat = None
            if n > 1 and not args.no_tuned_streams:
                tuned = tuned_engine(args, wl, n)
                if tuned:
                    default_engine, wl.engine = wl.engine, tuned
                    tj = kiln.bench(wl, f"streams{n}_1_tuned", shapes=wl.kiln_shapes(1), streams=n)
                    wl.engine = default_engine
                    tq, tlat = (tj or {}).get("throughput_qps"), kstat(tj)
            pq = plat = None
            if ts:
                log(f"torch {wl.name} {n} streams")
                try:
                    pq, samples = ts.streams(wl, 1, n)
                    plat = summarize(samples)["median"]
                except RuntimeError as e:
                    res.errors.append(f"{wl.title}, PyTorch {n} streams: {e}")
            if n == 1:
                k1, p1 = kq, pq
            rows.append([n, fmt(kq, 0), fr(ratio(kq, k1)), fmt(kstat(kj)), fmt(tq, 0), fr(ratio(tq, k1)), fmt(tlat),
                         fmt(pq, 0), fr(ratio(pq, p1)), fmt(plat), fr(ratio(pq, max(kq or 0, tq or 0) or None))])
            if n == 4:
                r = ratio(kq, k1)
                res.target(f"{wl.title}: 4 streams at least {STREAMS_TARGET}x the throughput of 1 stream (batch 1, "
                           "the default engine)", None if r is None else r >= STREAMS_TARGET, fr(r))
                if tq is not None:
                    r = ratio(tq, k1)
                    res.target(f"{wl.title}: 4 streams on the engine built with --tune-for-streams 4 at least "
                               f"{STREAMS_TARGET}x the throughput of 1 stream on the default engine (batch 1)",
                               None if r is None else r >= STREAMS_TARGET, fr(r))
        res.table(f"{wl.title}: 5. streams, batch 1",
                  "Throughput over all streams (inferences/s). xN/x1 = throughput with N streams / with 1 stream of "
                  "the default engine (higher is better). *tuned*: the engine built with `--tune-for-streams N` "
                  "(kernels timed as N concurrent copies) run with N streams. PyTorch/kiln time per inference = "
                  "PyTorch qps / kiln's best qps: below 1, kiln does more inferences per second. Latency = median "
                  "per call on one stream.",
                  ["streams", "kiln qps", "kiln xN/x1", "kiln ms", "kiln tuned qps", "tuned xN/x1", "tuned ms",
                   "PyTorch graph qps", "PyTorch xN/x1", "PyTorch ms", "PyTorch/kiln time per inference"], rows)
    del graph_cache


def tuned_engine(args, wl, n):
    """The workload's engine built with --tune-for-streams n (built once per run), or None."""
    if wl.engine is None or not wl.profile:
        return None
    if n in wl.tuned:
        return wl.tuned[n]
    path = wl.engine[:-len(".kiln")] + f"_streams{n}.kiln"
    if not (args.reuse_engines and os.path.exists(path)):
        log(f"kiln build {wl.name} --tune-for-streams {n}")
        try:
            s = kiln_build(args.kiln, wl.onnx, path, wl.profile, device=args.device, fp16=True,
                           timing_cache=wl.timing_cache, extra=list(args.kiln_build_arg) + ["--tune-for-streams", str(n)])
            log(f"       built in {s:.1f} s")
        except RuntimeError as e:
            log(f"       FAILED: {str(e).splitlines()[0]}")
            path = None
    wl.tuned[n] = path
    return path


def graph_use(j):
    cs = (j or {}).get("context_stats") or {}
    if "graph_replays" not in cs or "inferences" not in cs:
        return "n/a"
    return f"{cs['graph_replays']}/{cs['inferences']}"


def schedule_tables(res, wl, keys, kj, k_steady, t_sched_g, t_sched_e, t_graph, label, key_name):
    """Summary and per-shape tables of one schedule, and its targets."""
    per = kper_shape(kj, wl.is_bert)
    counts = [((per.get(k) or {}).get("count") or 1) for k in keys] if per else [1] * len(keys)
    steady_means = [kstat(k_steady.get(k), "mean") for k in keys]
    steady_mean = None
    if all(v is not None for v in steady_means):
        steady_mean = sum(c * v for c, v in zip(counts, steady_means)) / sum(counts)
    sched_mean = kstat(kj, "mean")
    r = ratio(sched_mean, steady_mean)
    tg_all = summarize(t_sched_g[0]) if t_sched_g else None
    te_all = summarize(t_sched_e[0]) if t_sched_e else None
    tg_steady = None
    if t_graph and all(t_graph.get(k) for k in keys):
        tg_steady = statistics.fmean(t_graph[k]["mean"] for k in keys)
    cs = (kj or {}).get("context_stats") or {}
    stats_text = ", ".join(f"{k} {cs[k]}" for k in ("shape_plans_built", "shape_plans_evicted", "graph_captures",
                                                     "graph_updates", "graph_capture_failures", "plain_inferences")
                           if k in cs)
    sched_text = " -> ".join(key_text(k) for k in keys)
    res.table(f"{wl.title}: {label} ({sched_text}, cycled)",
              "Means over all calls of the schedule. kiln sched/steady = kiln's schedule mean / the mean of kiln's "
              "steady-state means at the same shapes (weighted by how often each shape ran; target at most "
              f"{SCHEDULE_TARGET}x, goal {GOAL}x). kiln/graph = kiln schedule mean / PyTorch per-shape-graph schedule "
              "mean; kiln/eager = kiln / PyTorch eager (below 1: kiln is faster)."
              + (f" kiln context: {stats_text}." if stats_text else ""),
              ["kiln mean ms", "kiln p99", "kiln steady mean ms", "kiln sched/steady", "PyTorch eager mean ms",
               "PyTorch graph mean ms", "PyTorch graph steady mean ms", "PyTorch graph sched/steady", "kiln/graph",
               "kiln/eager"],
              [[fmt(sched_mean), fmt(kstat(kj, "p99")), fmt(steady_mean), fr(r), fmt((te_all or {}).get("mean")),
                fmt((tg_all or {}).get("mean")), fmt(tg_steady), fr(ratio((tg_all or {}).get("mean"), tg_steady)),
                fr(ratio(sched_mean, (tg_all or {}).get("mean"))), fr(ratio(sched_mean, (te_all or {}).get("mean")))]])
    rows, worst = [], None
    for k in keys:
        e = per.get(k) or {}
        km = (e.get("latency_ms") or {}).get("median")
        ks = kstat(k_steady.get(k))
        rk = ratio(km, ks)
        if rk is not None:
            worst = rk if worst is None else max(worst, rk)
        pg = statistics.median(t_sched_g[1][k]) if t_sched_g and k in t_sched_g[1] else None
        pe = statistics.median(t_sched_e[1][k]) if t_sched_e and k in t_sched_e[1] else None
        pgs = (t_graph.get(k) or {}).get("median") if t_graph else None
        rows.append([key_text(k), e.get("count", "n/a"), fmt(km), fmt(ks), fr(rk), fmt(pe), fmt(pg), fmt(pgs),
                     fr(ratio(km, pg))])
    res.table(f"{wl.title}: {label}, per shape",
              "Medians per shape inside the schedule. kiln sched/steady = kiln's median at this shape inside the "
              "schedule / kiln's steady-state median at the same shape (1.00x: changing shapes costs nothing).",
              [key_name, "kiln calls", "kiln ms", "kiln steady ms", "kiln sched/steady", "PyTorch eager ms",
               "PyTorch graph ms", "PyTorch graph steady ms", "kiln/graph"], rows)
    res.target(f"{wl.title}: {label}: schedule mean within {SCHEDULE_TARGET}x of the steady-state mean (kiln)",
               None if r is None else r <= SCHEDULE_TARGET, fr(r))
    res.goal_item(f"{wl.title}: {label}, mean / steady mean", r)
    res.goal_item(f"{wl.title}: {label}, worst shape / its steady median", worst)


def run_bert(args, wl, kiln, ts, res, scenarios):
    cuda = args.device == "cuda"
    keys = [(b, s) for b in args.bert_batch_list for s in args.bert_seq_list]
    graph_cache = {}
    k_steady = {k: kiln.steady(wl, k) for k in keys}
    t_graph, t_eager = {}, {}
    if ts:
        for k in keys:
            if cuda:
                log(f"torch {wl.name} steady graph {key_text(k)}")
                t_graph[k] = summarize(ts.graphs(wl, [k], graph_cache)[0])
            log(f"torch {wl.name} steady eager {key_text(k)}")
            t_eager[k] = summarize(ts.eager(wl, [k], duration=args.eager_duration)[0])
    rows = []
    for k in keys:
        km = kstat(k_steady[k])
        tg, te = (t_graph.get(k) or {}).get("median"), (t_eager.get(k) or {}).get("median")
        rows.append([key_text(k), fmt(km), fmt(kstat(k_steady[k], "p99")), fmt(te), fmt(tg), fr(ratio(km, tg)),
                     fr(ratio(km, te)), graph_use(k_steady[k])])
    res.table(f"{wl.title}: 6a. steady state per batch x sequence",
              "Medians. kiln/graph = kiln / PyTorch CUDA graph, kiln/eager = kiln / PyTorch eager (below 1: kiln is "
              "faster).",
              ["batch x seq", "kiln ms", "kiln p99", "PyTorch eager ms", "PyTorch graph ms", "kiln/graph", "kiln/eager",
               "kiln graph replays"], rows)
    if "seqlen" not in scenarios:
        return
    for b in args.bert_batch_list:
        sk = [(b, s) for s in args.bert_seq_list]
        kj = kiln.bench(wl, f"seqlen_b{b}", schedule=wl.kiln_schedule(sk))
        t_sched_g = t_sched_e = None
        if ts:
            if cuda:
                log(f"torch {wl.name} sequence schedule graph batch {b}")
                t_sched_g = ts.graphs(wl, sk, graph_cache)
            log(f"torch {wl.name} sequence schedule eager batch {b}")
            t_sched_e = ts.eager(wl, sk, duration=args.eager_duration)
        schedule_tables(res, wl, sk, kj, k_steady, t_sched_g, t_sched_e, t_graph,
                        f"6b. sequence length changing every call, batch {b}", "batch x seq")


def parse_list(text):
    out = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        if ".." in part:
            a, b = part.split("..")
            out.extend(range(int(a), int(b) + 1))
        else:
            out.append(int(part))
    return out


def find_kiln(arg):
    if arg:
        return arg
    if os.environ.get("KILN"):
        return os.environ["KILN"]
    import glob
    cands = [p for p in glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build*", "kiln"))
             if os.access(p, os.X_OK)]
    return max(cands, key=os.path.getmtime) if cands else "kiln"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", help="the kiln binary ($KILN, else the newest build*/kiln)")
    ap.add_argument("--models-dir", default=os.path.join(here, "..", "..", "shared", "models"),
                    help="folder with tinyyolo_tswish/ and bert_tiny/")
    ap.add_argument("--torch-models", default=os.path.join(here, "..", "..", "shared", "tools"),
                    help="folder with torch_models.py")
    ap.add_argument("--workdir", default=os.path.join(here, "out"), help="engines, exports, timing cache")
    ap.add_argument("--out", help="write the markdown report here too")
    ap.add_argument("--raw-dir", help="kiln bench JSON of every run (default: next to --out, else WORKDIR/raw)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="subset of " + ",".join(WORKLOADS))
    ap.add_argument("--scenarios", default=",".join(SCENARIOS),
                    help="subset of " + ",".join(SCENARIOS) + " (nograph, streams: CUDA only)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--duration", type=float, default=2.0, help="seconds timed per run and side (default 2)")
    ap.add_argument("--eager-duration", type=float, help="seconds per PyTorch eager run (default duration / 2)")
    ap.add_argument("--warmup-ms", type=int, default=200, help="kiln bench warm-up per run")
    ap.add_argument("--schedule-warmup-ms", type=int, default=1000,
                    help="kiln bench warm-up for schedules (every shape's first capture falls in it)")
    ap.add_argument("--torch-warmup", type=float, default=0.2, help="PyTorch warm-up seconds per run")
    ap.add_argument("--max-batch", type=int, default=8, help="CNN and BERT engines: batch profile 1..MAX")
    ap.add_argument("--opt-batch", type=int, default=4, help="the profile's opt batch")
    ap.add_argument("--batches", default="1..8", help="CNN steady/schedule batches (capped at --max-batch)")
    ap.add_argument("--buffers", default="2,4", help="buffer-set counts (scenario buffers)")
    ap.add_argument("--streams", default="1,2,4,8", help="stream counts (scenario streams)")
    ap.add_argument("--bert-seqs", default="16,32,48,64,128", help="bert_tiny sequence lengths (schedule and steady)")
    ap.add_argument("--bert-batches", default="1,4", help="bert_tiny batches, one sequence schedule each")
    ap.add_argument("--bert-seq-range", default="8,64,128", help="BERT profile's sequence min,opt,max")
    ap.add_argument("--cuda-graph", default="auto", choices=["auto", "on"],
                    help="kiln graph scenarios: kiln bench's default (auto: graphs where possible) or --cuda-graph")
    ap.add_argument("--reuse-engines", action="store_true", help="skip kiln build where the engine file exists")
    ap.add_argument("--no-tuned-streams", action="store_true",
                    help="streams scenario: skip the engines built with --tune-for-streams N")
    ap.add_argument("--kiln-build-arg", action="append", default=[], help="extra kiln build flag (repeatable)")
    ap.add_argument("--kiln-bench-arg", action="append", default=[], help="extra kiln bench flag (repeatable)")
    ap.add_argument("--threads", type=int, default=0,
                    help="CPU threads for both sides (kiln bench --threads, torch.set_num_threads); 0: their defaults")
    ap.add_argument("--no-torch", action="store_true", help="kiln side only (no PyTorch columns, no accuracy)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 0.3 s per run, short warm-ups")
    args = ap.parse_args()

    if args.quick:
        args.duration = min(args.duration, 0.3)
        args.warmup_ms = min(args.warmup_ms, 50)
        args.schedule_warmup_ms = min(args.schedule_warmup_ms, 200)
        args.torch_warmup = min(args.torch_warmup, 0.05)
    args.min_iters = 5 if args.quick else 10   # timed calls at least, per run (kiln: per stream)
    if args.eager_duration is None:
        args.eager_duration = args.duration / 2
    args.kiln = find_kiln(args.kiln)
    args.batch_list = [b for b in parse_list(args.batches) if 1 <= b <= args.max_batch] or [1]
    args.buffer_list = [k for k in parse_list(args.buffers) if k > 1]
    args.stream_list = sorted(set([1] + parse_list(args.streams)))
    args.bert_seq_list = parse_list(args.bert_seqs)
    args.bert_batch_list = [b for b in parse_list(args.bert_batches) if b <= args.max_batch] or [1]
    seq_range = parse_list(args.bert_seq_range)
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    for w in workloads:
        if w not in WORKLOADS:
            ap.error(f"unknown workload '{w}' (known: {', '.join(WORKLOADS)})")
    for s in scenarios:
        if s not in SCENARIOS:
            ap.error(f"unknown scenario '{s}' (known: {', '.join(SCENARIOS)})")
    if args.device == "cpu":
        skipped = [s for s in scenarios if s in CUDA_ONLY_SCENARIOS]
        scenarios = [s for s in scenarios if s not in CUDA_ONLY_SCENARIOS]
        if skipped:
            log(f"--device cpu: skipping {', '.join(skipped)} (they need CUDA)")
    cuda = args.device == "cuda"
    t_start = time.perf_counter()

    os.makedirs(args.workdir, exist_ok=True)
    raw_dir = args.raw_dir or (os.path.splitext(args.out)[0] + "_raw" if args.out else os.path.join(args.workdir, "raw"))
    os.makedirs(raw_dir, exist_ok=True)
    errors = []

    torch_version, device_name = "n/a", args.device
    ts = None
    tm = None
    if not args.no_torch:
        import torch
        torch_version = torch.__version__
        if args.threads > 0:
            torch.set_num_threads(args.threads)
        torch.backends.cudnn.allow_tf32 = False   # the fp32 reference must be fp32
        torch.backends.cuda.matmul.allow_tf32 = False
        if cuda:
            if not torch.cuda.is_available():
                sys.exit("error: --device cuda but torch.cuda.is_available() is False")
            device_name = torch.cuda.get_device_name(0)
        ts = TorchSide(args.device, args.duration, args.torch_warmup, args.min_iters)
        if "tinyyolo_tswish" in workloads:
            tm = load_torch_models(args.torch_models)
    kv = subprocess.run([args.kiln, "version"], capture_output=True, text=True)
    kiln_version = (kv.stdout.strip().splitlines() or ["?"])[0] if kv.returncode == 0 else "?"
    log(f"kiln {args.kiln} ({kiln_version}); PyTorch {torch_version}; device {device_name}")

    kiln = KilnSide(args.kiln, args.device, raw_dir, args.duration, args.min_iters, args.warmup_ms, args.schedule_warmup_ms,
                    args.cuda_graph, args.kiln_bench_arg + (["--threads", str(args.threads)] if args.threads > 0 else []))
    res = Results()
    cache = os.path.join(args.workdir, "timing.cache")
    for name in workloads:
        wanted = {"steady", "seqlen"} if name == "bert_tiny" else set(SCENARIOS) - {"seqlen"}
        if not wanted & set(scenarios):
            log(f"{name}: none of its scenarios ({', '.join(sorted(wanted))}) is selected; skipped")
            continue
        try:
            if name == "resnet50":
                onnx_path = os.path.join(args.workdir, "resnet50", "model.onnx")
                os.makedirs(os.path.dirname(onnx_path), exist_ok=True)
                wl = Workload(name, onnx_path, ["input"], (3, 224, 224), False)
                if ts:
                    log("exporting ResNet-50 to ONNX")
                    wl.model = export_resnet50(onnx_path)
                elif not os.path.exists(onnx_path):
                    raise RuntimeError(f"{onnx_path} is missing and --no-torch cannot export it")
            elif name == "tinyyolo_tswish":
                wl = Workload(name, os.path.join(args.models_dir, name, "model.onnx"), ["images"], (3, 320, 320), False)
                if ts:
                    wl.model = tinyyolo_as_exported(tm)
            else:
                wl = Workload(name, os.path.join(args.models_dir, name, "model.onnx"), ["input_ids", "attention_mask"],
                              None, True)
                if ts:
                    wl.model = bert_from_onnx(wl.onnx)
            # Engine: one dynamic profile, reused by every scenario.
            wl.engine = os.path.join(args.workdir, f"{name}_{args.device}_b{args.max_batch}.kiln")
            wl.profile = profile_args(wl, args.max_batch, min(args.opt_batch, args.max_batch), seq_range)
            wl.timing_cache = cache if cuda else None
            if args.reuse_engines and os.path.exists(wl.engine):
                log(f"reusing {wl.engine}")
            else:
                log(f"kiln build {name}")
                try:
                    wl.build_s = kiln_build(args.kiln, wl.onnx, wl.engine, wl.profile,
                                            device=args.device, fp16=cuda, timing_cache=wl.timing_cache,
                                            extra=args.kiln_build_arg)
                    log(f"       built in {wl.build_s:.1f} s")
                except RuntimeError as e:
                    errors.append(f"{name}: {e}")
                    log(f"       FAILED: {str(e).splitlines()[0]}")
                    wl.engine = None
            if ts:
                prepare_torch_model(args, wl)
                try:
                    check_accuracy(args, wl, args.workdir)
                except Exception as e:  # an accuracy problem must not hide the timings
                    errors.append(f"{name}: accuracy check failed: {e!r}")
                    log(f"       accuracy check FAILED: {e!r}")
            if wl.is_bert:
                run_bert(args, wl, kiln, ts, res, scenarios)
            else:
                run_cnn(args, wl, kiln, ts, res, scenarios)
            acc = lambda k: f"{wl.accuracy[k]:.1e}" if k in wl.accuracy else "n/a"
            res.engines.append([wl.title, os.path.basename(wl.engine) if wl.engine else "not built",
                                fmt(wl.build_s, 1), acc("torch_fp32_vs_reference"), acc("torch_vs_fp32"),
                                acc("kiln_vs_fp32") if wl.same_weights or not ts else "n/a (other weights)"])
            wl.torch_model = wl.model = None
            if ts and cuda:
                import torch
                torch.cuda.empty_cache()
        except Exception as e:
            import traceback
            traceback.print_exc()
            errors.append(f"{name}: {e!r}")

    # Targets that span workloads.
    fails, seen = kiln.capture_failures()
    res.target("zero failed CUDA graph captures (kiln context_stats.graph_capture_failures, all runs)",
               None if seen == 0 or not cuda else fails == 0, f"{fails} in {seen} runs")
    errors += kiln.errors + res.errors
    text = report(args, res, kiln_version, torch_version, device_name, errors, time.perf_counter() - t_start, raw_dir)
    print(text, flush=True)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            f.write(text)
        log(f"report: {args.out}; kiln JSON: {raw_dir}")
    with open(os.path.join(raw_dir, "runs.json"), "w") as f:
        json.dump(kiln.runs, f, indent=1)
    sys.exit(1 if errors else 0)


def md_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def report(args, res, kiln_version, torch_version, device_name, errors, elapsed, raw_dir):
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cuda = args.device == "cuda"
    out = [f"# kiln vs PyTorch under serving patterns: {device_name}, {now}", "",
           f"kiln: `{args.kiln}` ({kiln_version}); PyTorch {torch_version}; "
           f"{'fp16 (CNNs channels-last)' if cuda else 'fp32 on the CPU'}; {args.duration:g} s timed per run "
           f"(PyTorch eager {args.eager_duration:g} s), after warm-up (kiln {args.warmup_ms} ms, schedules "
           f"{args.schedule_warmup_ms} ms; PyTorch {args.torch_warmup:g} s and at least two rounds of every shape). "
           f"Engines: one dynamic profile per model, batch 1..{args.max_batch} (opt {min(args.opt_batch, args.max_batch)})"
           f", BERT sequence {args.bert_seq_range}; total run time {elapsed:.0f} s.", "",
           "Command: `" + " ".join([os.path.basename(sys.executable)] + sys.argv) + "`", "",
           "## How to read this", "",
           "* **Latency** is host wall time per call, including the wait for the GPU: kiln's `latency_ms` from "
           "`kiln bench --json` (enqueue + stream synchronization; not `gpu_compute_ms`), and for PyTorch one "
           "inference plus `torch.cuda.synchronize()` timed with `time.perf_counter`. Medians unless a table says "
           "mean; p99 by nearest rank.",
           "* **Data transfers are excluded on both sides**: kiln runs with `--no-data-transfers` (inputs stay in "
           "device memory); PyTorch's requests are already device tensors. PyTorch's CUDA-graph call does include "
           "copying the request into the graph's static input and copying the output out of the static output "
           "(two small device-to-device copies, what a server does); kiln's call has neither."
           if cuda else "* On the CPU there are no graphs, streams or transfers: kiln and PyTorch run fp32 on host memory.",
           "* **kiln/graph**, **kiln/eager**: kiln's time / PyTorch's time (with CUDA graphs, eager). **Below 1 kiln is "
           "faster**, above 1 slower (1.25 = kiln takes 25% longer).",
           "* **sched/steady**, **K sets / 1 set**, **no-graph/graph**: kiln against *its own* steady state at the same "
           "shapes (one shape, one buffer set, graph replay): 1.00x means the serving pattern costs nothing; the "
           f"targets below allow {SCHEDULE_TARGET}x for changing shapes, {BUFFERS_TARGET}x for rotating buffers, "
           f"{NOGRAPH_TARGET}x without graphs; the goal is every one within {GOAL}x.",
           "* **xN/x1** (streams): throughput with N streams / with one; higher is better.",
           f"* Raw `kiln bench` JSON of every run: `{raw_dir}` (file per workload and scenario, `runs.json` lists the "
           "command lines).", ""]
    for title, note, header, rows in res.tables:
        out += [f"## {title}", "", note, "", md_table(header, rows), ""]
    out += ["## Targets", "", md_table(["target", "value", "result"], [[n, v, f"**{r}**"] for n, v, r, _ in res.targets]),
            ""]
    goal_items = [(n, r) for n, r in res.goal if r is not None]
    missing = [n for n, r in res.goal if r is None]
    goal_ok = None if not goal_items else all(r <= GOAL for _, r in goal_items)
    out += [f"**Goal: every scenario within {GOAL}x of kiln's steady state: "
            f"{'n/a' if goal_ok is None else ('PASS' if goal_ok else 'FAIL')}**", ""]
    if goal_items:
        out += [md_table(["scenario", "ratio to steady state", f"within {GOAL}x"],
                         [[n, fr(r), "yes" if r <= GOAL else "**no**"] for n, r in goal_items]), ""]
    if missing:
        out += ["Not measured (counted neither way): " + "; ".join(missing) + ".", ""]
    out += ["Streams are not in the goal: more streams trade per-call latency for throughput; their target is the "
            "4-stream throughput above.", ""]
    if res.engines:
        low = "fp16" if cuda else "fp32"
        out += ["## Engines and accuracy", "",
                "Errors are max |out - ref| / max |ref| on one input (ResNet-50: a fixed batch-2 input saved under "
                "the work folder; the shared models: their test_data_set_0). *PyTorch fp32 vs reference*: PyTorch's "
                "module against the model's stored reference output (shows it holds the ONNX file's weights); "
                f"*PyTorch {low} vs fp32* and *kiln vs PyTorch fp32* (`kiln run` on the benchmark's engine): the two "
                "engines under test against PyTorch fp32 on the same input.", "",
                md_table(["workload", "engine", "build s", "PyTorch fp32 vs reference", f"PyTorch {low} vs fp32",
                          "kiln vs PyTorch fp32"], res.engines), ""]
    if res.notes:
        out += ["## Notes", ""] + [f"* {n}" for n in res.notes] + [""]
    if errors:
        out += ["## Errors", ""] + ["```\n" + e.strip() + "\n```" for e in errors] + [""]
    return "\n".join(out)


if __name__ == "__main__":
    main()
