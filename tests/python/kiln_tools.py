"""Shared helpers of kiln's Python test suites: find the `kiln` program and the test models, run
`kiln run` / `kiln build` on .npy files, run ONNX Runtime as the reference, and compare outputs
with per-type tolerances.

kiln has no Python module, so the suites drive the command line: inputs are written as .npy,
`kiln run ... --output-dir DIR` writes DIR/<output>.npy, and a failure is the exit code plus the
`kiln: error:` line on stderr.
"""
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]

# Tolerances: pass when |kiln - ref| <= rtol * |ref| + atol * max(1, max|ref|) (as `kiln run
# --compare-dir` does); NaN must meet NaN and infinities must be equal. Integers and bools: exact.
TOLERANCE = {"float32": (1e-3, 1e-5), "float64": (1e-6, 1e-9), "float16": (1e-2, 2e-3)}


def find_kiln():
    """The kiln executable: $KILN_CLI, else the usual build folders of the repository."""
    env = os.environ.get("KILN_CLI")
    if env:
        return env
    for rel in ("build/kiln", "build-cpu/kiln", "build/tools/kiln"):
        p = REPO / rel
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return shutil.which("kiln")


def models_dir():
    """Where the shared test models are: $KILN_TEST_MODELS_DIR, else ../shared/models next to the
    repository (the same rule as tests/models_test.cpp)."""
    return Path(os.environ.get("KILN_TEST_MODELS_DIR", str(REPO / ".." / "shared" / "models")))


def safe_name(name):
    """The file name `kiln run --output-dir` uses for an output (see docs/cli.md)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


class KilnError(Exception):
    """kiln exited with an error; `message` holds its `kiln: error:` text."""

    def __init__(self, returncode, message, command):
        super().__init__(f"kiln exited {returncode}: {message}")
        self.returncode, self.message, self.command = returncode, message, command


def _error_text(stderr):
    """From the `kiln: error:` line on (the lines after it list the nodes at fault)."""
    at = stderr.find("kiln: error:")
    return (stderr[at:] if at >= 0 else stderr).strip()[:3000]


def run_kiln(kiln, args, timeout=600):
    proc = subprocess.run([kiln] + [str(a) for a in args], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise KilnError(proc.returncode, _error_text(proc.stderr + proc.stdout), [kiln] + list(args))
    return proc


def kiln_run(kiln, workdir, feeds, output_names, onnx=None, engine=None, threads=None, timeout=600):
    """Runs `kiln run` once on `feeds` (name -> array) and returns {output name: array}."""
    workdir = Path(workdir)
    in_dir, out_dir = workdir / "inputs", workdir / "outputs"
    in_dir.mkdir(parents=True, exist_ok=True)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    args = ["run", "--onnx", onnx] if onnx else ["run", "--engine", engine]
    for name, value in feeds.items():
        path = in_dir / f"{safe_name(name)}.npy"
        np.save(path, np.array(value, order="C"))
        args += ["--input", f"{name}={path}"]
    args += ["--output-dir", out_dir, "--warmup", "0", "--iterations", "1"]
    if threads:
        args += ["--threads", threads]
    run_kiln(kiln, args, timeout)
    return {name: np.load(out_dir / f"{safe_name(name)}.npy") for name in output_names}


def kiln_build(kiln, onnx, engine, min_shapes=None, opt_shapes=None, max_shapes=None, extra=(), timeout=600):
    """`kiln build`; the *_shapes are {input name: [dims]}."""
    def flag(shapes):
        return ",".join(f"{k}:{'x'.join(str(v) for v in dims)}" for k, dims in shapes.items())

    args = ["build", "--onnx", onnx, "--save-engine", engine]
    if min_shapes:
        args += ["--min-shapes", flag(min_shapes), "--opt-shapes", flag(opt_shapes), "--max-shapes", flag(max_shapes)]
    return run_kiln(kiln, args + list(extra), timeout)


def ort_session(model_or_path, threads=1):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 4
    data = str(model_or_path) if isinstance(model_or_path, (str, Path)) else model_or_path.SerializeToString()
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def compare(actual, expected, dtype=None, tol=None):
    """Returns None when `actual` matches `expected`, else a one-line description of the worst
    element. `tol` = (rtol, atol) overrides the per-type default."""
    expected = np.asarray(expected)
    actual = np.asarray(actual)
    if actual.dtype != expected.dtype:
        return f"type {actual.dtype}, expected {expected.dtype}"
    if actual.shape != expected.shape:
        return f"shape {list(actual.shape)}, expected {list(expected.shape)}"
    if actual.size == 0:
        return None
    name = dtype or str(expected.dtype)
    if name not in TOLERANCE:
        bad = actual != expected
        if not bad.any():
            return None
        i = np.unravel_index(np.argmax(bad), bad.shape)
        return f"{int(bad.sum())} of {bad.size} differ; at {list(map(int, i))}: {actual[i]} vs {expected[i]}"
    rtol, atol = tol or TOLERANCE[name]
    a, b = actual.astype(np.float64), expected.astype(np.float64)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    inf_b = np.isinf(b)
    finite = ~nan_b & ~inf_b
    scale = max(1.0, float(np.max(np.abs(b[finite]))) if finite.any() else 1.0)
    with np.errstate(invalid="ignore"):
        err = np.abs(a - b)
        bad = np.where(finite, ~(err <= rtol * np.abs(b) + atol * scale), False)
    bad |= nan_a != nan_b
    bad |= inf_b & (a != b)
    if not bad.any():
        return None
    with np.errstate(invalid="ignore"):
        rel = np.where(finite, err / np.maximum(np.abs(b), 1e-3), np.inf)
    score = np.where(bad, np.nan_to_num(rel, nan=np.inf, posinf=np.inf), -1)
    i = np.unravel_index(np.argmax(score), bad.shape)
    where = list(map(int, i))
    return (f"{int(bad.sum())} of {bad.size} out of tolerance (rtol {rtol}, atol {atol}); worst at {where}: "
            f"kiln {actual[i]!r} vs ort {expected[i]!r}")
