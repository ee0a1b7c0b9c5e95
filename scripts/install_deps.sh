#!/usr/bin/env bash
# Installs what kiln needs on Debian 12 (as root, or with sudo): the compiler toolchain,
# protobuf and the ONNX library, oneDNN, the header libraries, GoogleTest, clang-format 14 (the
# source format's check), and the Python
# packages the tests and benchmarks use (onnx to make test models, onnxruntime as the peer, pytest
# for the suites in tests/python).
set -euo pipefail
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
PKGS="build-essential cmake libprotobuf-dev protobuf-compiler libonnx-dev libdnnl-dev nlohmann-json3-dev \
libcli11-dev libgtest-dev python3 python3-pip python3-dev nginx-light clang-format-14 libonnx-testdata"
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
