#!/usr/bin/env bash
# Fills .dev/ (git-ignored) with what a GPU machine without a network needs from this one, so that
# `scripts/gpu_suite.sh` there builds and tests everything: the cudnn-frontend headers (from the
# pip package scripts/install_deps.sh installs; without them the cuDNN graph-API convolution
# tactics are left out of the build and their tests skip) in .dev/cudnn_frontend/include, and the
# shared test models (../shared/models, when present) and PyTorch model definitions
# (../shared/tools) in .dev/models and .dev/tools. Then carry `.dev` to the GPU machine.
# Usage: scripts/prepare_gpu_carry.sh
set -euo pipefail
cd "$(dirname "$0")/.."
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
  if [[ -d "../shared/$what" ]]; then
    rm -rf ".dev/$what" && cp -r "../shared/$what" ".dev/$what"
    echo "prepare_gpu_carry: ../shared/$what -> .dev/$what ($(du -sh ".dev/$what" | cut -f1))"
  fi
done
echo "prepare_gpu_carry: .dev is $(du -sh .dev | cut -f1) (a device call carries at most 64 MiB with the tree)"
