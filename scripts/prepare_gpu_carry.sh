#!/usr/bin/env bash
# Fills .dev/ (git-ignored) with what a GPU machine without a network needs from this one, so that
# `scripts/gpu_suite.sh` there builds and tests everything: the cudnn-frontend headers (from the
# pip package scripts/install_deps.sh installs; without them the cuDNN graph-API convolution
# tactics are left out of the build and their tests skip) in .dev/cudnn_frontend/include, and the
# shared test models (../shared/models, when present) and PyTorch model definitions
# (../shared/tools) in .dev/models and .dev/tools. Then carry `.dev` to the GPU machine.
# --triton also packs what the suite's triton and triton_bench steps need and a GPU machine without
# pip lacks, in .dev/triton (about 40 MB): tritonserver 2.51 with its Python backend, the Python
# 3.12 stub and its libraries (from the nvidia-pytriton wheel scripts/install_deps.sh installs),
# and perf_analyzer with the libcudart.so.12 and libb64.so.0d it links (from its installation).
# --no-models leaves the models and tools out (a device call carries at most 64 MiB with the tree).
# Usage: scripts/prepare_gpu_carry.sh [--triton] [--no-models]
set -euo pipefail
cd "$(dirname "$0")/.."
triton=0 models=1
for arg in "$@"; do
  case $arg in
    --triton) triton=1 ;;
    --no-models) models=0 ;;
    *) echo "prepare_gpu_carry: unknown option $arg (options: --triton, --no-models)" >&2; exit 2 ;;
  esac
done
mkdir -p .dev
inc=$(python3 -c "import importlib.util as u, os; s = u.find_spec('cudnn'); d = os.path.dirname(s.origin) if s and s.origin else ''; print(next((p for p in (os.path.join(os.path.dirname(d), 'include'), os.path.join(d, 'include')) if d and os.path.isfile(os.path.join(p, 'cudnn_frontend.h'))), ''))" 2>/dev/null || true)
if [[ -z "$inc" ]]; then
  echo "prepare_gpu_carry: no cudnn-frontend headers here (run scripts/install_deps.sh first)" >&2
  exit 1
fi
rm -rf .dev/cudnn_frontend && mkdir -p .dev/cudnn_frontend/include
cp -r "$inc"/cudnn_frontend* "$inc"/cudnn_backend_base.h .dev/cudnn_frontend/include/
echo "prepare_gpu_carry: cudnn-frontend headers -> .dev/cudnn_frontend/include ($(du -sh .dev/cudnn_frontend | cut -f1))"
for what in models tools; do
  if [[ $models == 0 ]]; then
    rm -rf ".dev/$what"
  elif [[ -d "../shared/$what" ]]; then
    rm -rf ".dev/$what" && cp -r "../shared/$what" ".dev/$what"
    echo "prepare_gpu_carry: ../shared/$what -> .dev/$what ($(du -sh ".dev/$what" | cut -f1))"
  fi
done
if [[ $triton == 1 ]]; then
  site=$(python3 -c "import os, pytriton; print(os.path.dirname(os.path.dirname(pytriton.__file__)))" 2>/dev/null || true)
  pa=$(sed -n 's|.*exec \(/[^ ]*/perf_analyzer\) .*|\1|p' "$(command -v perf_analyzer 2>/dev/null || echo /dev/null)" | head -1)
  b64=$(ldconfig -p | sed -n 's|.*libb64\.so\.0d .*=> \(.*\)|\1|p' | head -1)
  if [[ -z "$site" || ! -x "$site/pytriton/tritonserver/bin/tritonserver" || -z "$pa" || -z "$b64" ]]; then
    echo "prepare_gpu_carry: --triton needs nvidia-pytriton, perf_analyzer and libb64 (run scripts/install_deps.sh)" >&2
    exit 1
  fi
  rm -rf .dev/triton && mkdir -p .dev/triton
  excludes=()
  for v in "$site"/pytriton/tritonserver/python_backend_stubs/*; do
    [[ "$(basename "$v")" == 3.12 ]] || excludes+=("--exclude=pytriton/tritonserver/python_backend_stubs/$(basename "$v")")
  done
  tar -C "$site" -cJf .dev/triton/tritonserver.tar.xz "${excludes[@]}" --exclude=__pycache__ \
    pytriton/tritonserver nvidia_pytriton.libs
  tmp=$(mktemp -d)
  mkdir "$tmp/perf_analyzer"
  cp -L "$(dirname "$pa")"/* "$b64" "$tmp/perf_analyzer/"
  tar -C "$tmp" -cJf .dev/triton/perf_analyzer.tar.xz perf_analyzer
  rm -rf "$tmp"
  echo "prepare_gpu_carry: tritonserver, its Python backend (3.12 stub) and perf_analyzer -> .dev/triton ($(du -sh .dev/triton | cut -f1))"
fi
echo "prepare_gpu_carry: .dev is $(du -sh .dev | cut -f1) (a device call carries at most 64 MiB with the tree)"
