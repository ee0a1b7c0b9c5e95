#!/usr/bin/env bash
# Installs what kiln needs on Debian 12 (as root, or with sudo): the compiler toolchain,
# protobuf and the ONNX library, oneDNN, the header libraries, GoogleTest, and the Python
# packages the tests and benchmarks use (onnx to make test models, onnxruntime as the peer).
set -euo pipefail
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
PKGS="build-essential cmake libprotobuf-dev protobuf-compiler libonnx-dev libdnnl-dev nlohmann-json3-dev \
libcli11-dev libgtest-dev python3 python3-pip"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "kiln: installing Debian packages:$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
if ! python3 -c "import onnx, onnxruntime, numpy" >/dev/null 2>&1; then
  echo "kiln: installing Python packages onnx, onnxruntime, numpy"
  python3 -m pip install -q onnx onnxruntime numpy 2>/dev/null || python3 -m pip install -q --break-system-packages onnx onnxruntime numpy
fi
