#!/usr/bin/env bash
# Installs what kiln needs on Debian 12 (as root, or with sudo): the compiler toolchain,
# protobuf and the ONNX library, oneDNN, the header libraries, GoogleTest, clang-format 14 (the
# source format's check), clang (the libFuzzer targets; a test compiles the kernels' instruction-
# set regions with it, scripts/check_clang_isa.sh), and the Python
# packages the tests and benchmarks use (onnx to make test models, onnxruntime as the peer, pytest
# for the suites in tests/python).
set -euo pipefail
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
PKGS="build-essential cmake libprotobuf-dev protobuf-compiler libonnx-dev libdnnl-dev nlohmann-json3-dev \
libcli11-dev libgtest-dev python3 python3-pip python3-dev nginx-light clang-format-14 clang libonnx-testdata libb64-0d"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "kiln: installing Debian packages:$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
# Python: the tests' and benchmarks' packages, and what building the Python package needs
# (nanobind and scikit-build-core; python3-dev's headers come with the interpreter or the apt
# package below) and its ONNX helpers use (onnx-graphsurgeon).
# nvidia-pytriton ships a working tritonserver (the Triton backend's tests and scripts/serve.sh;
# 55 MB) and brings tritonclient. PyYAML reads the deployment manifests in their test.
PY_PKGS="onnx onnxruntime numpy pytest nanobind scikit-build-core onnx-graphsurgeon nvidia-pytriton pyyaml"
if ! python3 -c "import onnx, onnxruntime, numpy, pytest, nanobind, scikit_build_core, onnx_graphsurgeon, pytriton, tritonclient.http, tritonclient.grpc, yaml" >/dev/null 2>&1; then
  echo "kiln: installing Python packages $PY_PKGS"
  python3 -m pip install -q $PY_PKGS 2>/dev/null || python3 -m pip install -q --break-system-packages $PY_PKGS
fi
# cudnn-frontend's C++ headers (header-only) for the CUDA backend's cuDNN graph-API convolution
# tactics; CMake finds them beside the pip package. --no-deps: only the headers are needed, not the
# package's Python dependencies (CUTLASS DSL etc.).
if ! python3 -c "import importlib.util as u, os, sys; s = u.find_spec('cudnn'); sys.exit(0 if s and s.origin and os.path.isfile(os.path.join(os.path.dirname(os.path.dirname(s.origin)), 'include', 'cudnn_frontend.h')) else 1)" >/dev/null 2>&1; then
  echo "kiln: installing Python package nvidia-cudnn-frontend (headers only)"
  python3 -m pip install -q --no-deps nvidia-cudnn-frontend==1.32.0 2>/dev/null ||
    python3 -m pip install -q --no-deps --break-system-packages nvidia-cudnn-frontend==1.32.0
fi
# perf_analyzer, Triton's load generator (the scale-out test and bench/triton_serving.py): PyPI's
# perf-analyzer package is an empty placeholder, but the tritonclient 2.51.0 wheel (the release of
# the tritonserver 2.51 that nvidia-pytriton 0.7.0 ships) carries the program. It is taken from that
# wheel without installing the older tritonclient, with the CUDA 12 runtime it links (from the
# nvidia-cuda-runtime-cu12 wheel; no GPU is needed for HTTP and gRPC) and libb64 (Debian's
# libb64-0d, above), and installed as /usr/local/bin/perf_analyzer, a wrapper that finds them.
PA_DIR=/usr/local/lib/kiln-perf-analyzer-2.51.0
if ! perf_analyzer --version >/dev/null 2>&1; then
  echo "kiln: installing perf_analyzer 2.51.0 (from PyPI's tritonclient 2.51.0 wheel)"
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux1_x86_64 -d "$tmp" tritonclient==2.51.0
  python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 -d "$tmp" \
    "nvidia-cuda-runtime-cu12==12.9.79"
  python3 - "$tmp" <<'PY'
import glob, sys, zipfile
tmp = sys.argv[1]
with zipfile.ZipFile(glob.glob(f"{tmp}/tritonclient-2.51.0-*.whl")[0]) as z:
    z.extract("tritonclient-2.51.0.data/data/bin/perf_analyzer", tmp)
with zipfile.ZipFile(glob.glob(f"{tmp}/nvidia_cuda_runtime_cu12-*.whl")[0]) as z:
    z.extract("nvidia/cuda_runtime/lib/libcudart.so.12", tmp)
PY
  $SUDO mkdir -p "$PA_DIR"
  $SUDO install -m 755 "$tmp/tritonclient-2.51.0.data/data/bin/perf_analyzer" "$PA_DIR/perf_analyzer"
  $SUDO install -m 644 "$tmp/nvidia/cuda_runtime/lib/libcudart.so.12" "$PA_DIR/libcudart.so.12"
  printf '#!/bin/sh\n# perf_analyzer 2.51.0 from the tritonclient wheel (installed by kiln scripts/install_deps.sh)\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s/perf_analyzer "$@"\n' \
    "$PA_DIR" "$PA_DIR" > "$tmp/wrapper"
  $SUDO install -m 755 "$tmp/wrapper" /usr/local/bin/perf_analyzer
  rm -rf "$tmp"
  perf_analyzer --version >/dev/null 2>&1 || echo "kiln: WARNING: perf_analyzer does not start (see $PA_DIR)"
fi
