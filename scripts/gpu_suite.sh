#!/usr/bin/env bash
# The GPU suite (never run by CI, which has no GPU): builds kiln with CUDA for the local GPU and
# runs, by step:
#   tests      the CUDA tests of kiln_tests: every op-harness case on every CUDA kernel in fp32
#              and fp16 against the CPU reference (CudaOps.*), the shared models on CUDA in fp32
#              and fp16 with a CUDA-graph replay (CudaModels.*; models from $KILN_TEST_MODELS_DIR),
#              the built-in plugins' CUDA kernels and the plugin conformance checks
#   plugins    `kiln plugin check --device cuda` on every built-in plugin
#              and the serving runtime on CUDA (ServingRuntime.*: shape schedules, rotating
#              buffers, N threads x N streams bit-identical, user-managed memory; CudaGraphAuto.*:
#              capture failure recovery, lazy set-up, graph updates)
#   sanitizer  compute-sanitizer memcheck, racecheck, synccheck and initcheck over the model tests
#              (kernel timing off) and over the multi-stream serving test
#   bench      bench/plugin_bandwidth (plugins vs a device copy) and bench/gpu_vs_pytorch.py
#              (needs --torch-models: $KILN_TORCH_MODELS, a folder with torch_models.py)
#   levels     bench/builder_levels.py: build and run time of ResNet-50 (batch 1, 32, 128), TinyYolo
#              and bert_tiny at builder levels 0-5, fp16, no timing cache, the run times in 3
#              alternating rounds; $KILN_LEVELS_ARGS replaces --models/--batches/--rounds
#   serving    bench/serving_vs_pytorch.py (kiln bench vs PyTorch under serving patterns; needs
#              $KILN_TORCH_MODELS too)
#   triton     kiln's Triton backend on the GPU: request data in GPU memory, 50 reloads of a CUDA
#              model without growing GPU or host memory (tests/triton/test_triton_gpu.py;
#              the server: $KILN_TRITON_SERVER, default nvidia-pytriton's, else the one
#              scripts/prepare_gpu_carry.sh --triton packed into .dev/triton, unpacked here)
#   triton_startup  bench/triton_startup.py: a new Triton replica's launch to readiness and first
#              answer, kiln's backend (compiled plans loaded, and built) against PyTorch through
#              the Python backend, empty and warm JIT cache; $KILN_TRITON_STARTUP_ARGS adds arguments
#   triton_bench  bench/triton_gpu.py: kiln's backend against PyTorch through Triton's Python
#              backend in one server (ResNet-50 fp16, perf_analyzer over HTTP, Triton's default
#              queue delay, 1-32 clients, throughput at equal p99, the server's overhead per
#              request, request data in GPU memory); needs torch + torchvision and the Python
#              backend (.dev/triton or an installed nvidia-pytriton) and perf_analyzer ($PATH or
#              .dev/triton); $KILN_TRITON_BENCH_ARGS replaces its load arguments
# KILN_GPU_TARGETS="kiln_cli triton_kiln" builds only those targets (the triton steps need no more).
#   python     the Python package on CUDA (tests/python/test_api_cuda.py: torch tensors in place,
#              torch streams, fp16, Python plugins with torch and Triton kernels; and the CPU
#              suite test_api.py) and bench/python_overhead.py (Python over C++ per call)
# Logs go to $OUT (default ./gpu-results).
# Usage: [KILN_GPU_STEPS="tests plugins sanitizer bench"] scripts/gpu_suite.sh [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-gpu}
OUT=${OUT:-gpu-results}
STEPS=${KILN_GPU_STEPS:-tests plugins sanitizer bench}
# The shared models: $KILN_TEST_MODELS_DIR, else ../shared/models, else the copy
# scripts/prepare_gpu_carry.sh put in .dev/models (the CudaModels tests skip without them).
MODELS=${KILN_TEST_MODELS_DIR:-../shared/models}
[[ -z "${KILN_TEST_MODELS_DIR:-}" && ! -d "$MODELS" && -d .dev/models ]] && MODELS=.dev/models
# Absolute: the tests run from inside the build folder.
[[ -d "$MODELS" ]] && MODELS=$(cd "$MODELS" && pwd)
export KILN_TEST_MODELS_DIR="$MODELS"
mkdir -p "$OUT"
JOBS=$(nproc)
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version | tail -1
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
t0=$(date +%s)
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DKILN_WITH_CUDA=ON -DKILN_WERROR=OFF \
  -DCMAKE_CUDA_ARCHITECTURES="${KILN_CUDA_ARCHS:-90}" -DPython3_EXECUTABLE="$(command -v python3)" > "$OUT/configure.log" 2>&1 \
  || { tail -30 "$OUT/configure.log"; exit 1; }
grep "kiln:" "$OUT/configure.log"
if grep -q "cudnn-frontend not found" "$OUT/configure.log"; then
  echo "WARNING: built without cudnn-frontend: the cuDNN graph-API tactics are left out and their tests skip;"
  echo "WARNING: on a machine without pip, run scripts/prepare_gpu_carry.sh where kiln was set up and carry .dev"
fi
# shellcheck disable=SC2086  # KILN_GPU_TARGETS is a list of targets
cmake --build "$B" -j"$JOBS" ${KILN_GPU_TARGETS:+--target $KILN_GPU_TARGETS} > "$OUT/build.log" 2>&1 ||
  { grep -E "error" -A3 "$OUT/build.log" | head -80; exit 1; }
echo "build: ok in $(( $(date +%s) - t0 )) s"
rc=0
has() { [[ " $STEPS " == *" $1 "* ]]; }
if has tests; then
  (cd "$B" && ./tests/kiln_tests --gtest_filter='*Cuda*:*CUDA*:*Gpu*:*GPU*:DataDependent*:ServingRuntime*:*FaultInjection*:PluginBoundary*:BoundaryLibrary*') > "$OUT/gpu_tests.log" 2>&1 || rc=1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran|^fp(16|32):|failures in|max rel err|built in|^\[       OK|^\[  FAILED" "$OUT/gpu_tests.log" | head -150
fi
if has plugins; then
  for p in TemperatureSwish ThresholdReLU GELU Mish; do
    "$B/kiln" plugin check --name "$p" --device cuda || rc=1
  done > "$OUT/plugin_check_cuda.log" 2>&1
  grep -E "PASS|FAIL|plugin" "$OUT/plugin_check_cuda.log" | tail -20
fi
if has sanitizer; then
  : > "$OUT/sanitizer.log"
  for tool in memcheck racecheck synccheck initcheck; do
    for filter in 'CudaModels.Squeezenet*:CudaModels.TinyYoloTemperatureSwishFp16' 'ServingRuntime.ParallelContexts*:ServingRuntime.WarmedUpInOneThreadServedFromOthers'; do
      echo "== compute-sanitizer --tool $tool: $filter" >> "$OUT/sanitizer.log"
      t1=$(date +%s)
      KILN_TEST_NO_TIMING=1 timeout "${KILN_SANITIZER_TIMEOUT:-240}" compute-sanitizer --tool $tool --error-exitcode 9 \
        "$B/tests/kiln_tests" --gtest_filter="$filter" >> "$OUT/sanitizer.log" 2>&1
      st=$?
      [[ $st == 0 ]] || { rc=1; echo "== exit status $st ($tool; 124 = timed out)" >> "$OUT/sanitizer.log"; }
      echo "== $tool took $(( $(date +%s) - t1 )) s" >> "$OUT/sanitizer.log"
    done
  done
  grep -E "^== |ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED)" "$OUT/sanitizer.log"
fi
if has bench; then
  "$B/bench/kiln_plugin_bandwidth" > "$OUT/plugin_bandwidth.log" 2>&1 || rc=1
  cat "$OUT/plugin_bandwidth.log"
  if [[ -n "${KILN_TORCH_MODELS:-}" ]]; then
    PYTHONUNBUFFERED=1 python3 bench/gpu_vs_pytorch.py --kiln "$B/kiln" --models-dir "$MODELS" \
      --torch-models "$KILN_TORCH_MODELS" ${KILN_BENCH_ARGS:-} --out "$OUT/gpu_vs_pytorch.md" > "$OUT/gpu_vs_pytorch.log" 2>&1 || rc=1
    tail -20 "$OUT/gpu_vs_pytorch.log"
  fi
fi
if has levels; then
  # shellcheck disable=SC2086  # KILN_LEVELS_ARGS is a list of arguments
  PYTHONUNBUFFERED=1 python3 bench/builder_levels.py --device cuda --kiln "$B/kiln" --models-dir "$MODELS" \
    --workdir /tmp/kiln-levels ${KILN_LEVELS_ARGS:---rounds 3} --out "$OUT/builder_levels.md" > "$OUT/builder_levels.log" 2>&1 || rc=1
  tail -30 "$OUT/builder_levels.log"
  rm -f /tmp/kiln-levels/*.kiln
fi
if has serving && [[ -n "${KILN_TORCH_MODELS:-}" ]]; then
  PYTHONUNBUFFERED=1 python3 bench/serving_vs_pytorch.py --kiln "$B/kiln" --models-dir "$MODELS" \
    --torch-models "$KILN_TORCH_MODELS" --workdir "$OUT/serving" ${KILN_SERVING_ARGS:-} \
    --out "$OUT/serving_vs_pytorch.md" --raw-dir "$OUT/serving_raw" > "$OUT/serving_vs_pytorch.log" 2>&1 || rc=1
  tail -60 "$OUT/serving_vs_pytorch.log"
fi
# The Triton server, its Python backend and perf_analyzer: installed ones first, else the ones
# scripts/prepare_gpu_carry.sh --triton packed into .dev/triton (unpacked into /tmp/kiln-triton).
TRITON_PYB=""
triton_setup() {
  local site
  site=$(python3 -c "import os, pytriton; print(os.path.dirname(os.path.dirname(pytriton.__file__)))" 2>/dev/null || true)
  if [[ -z "$site" && -f .dev/triton/tritonserver.tar.xz ]]; then
    site=/tmp/kiln-triton
    if [[ ! -x $site/pytriton/tritonserver/bin/tritonserver ]]; then
      mkdir -p $site && tar -C $site -xJf .dev/triton/tritonserver.tar.xz && tar -C $site -xJf .dev/triton/perf_analyzer.tar.xz
    fi
    export LD_LIBRARY_PATH=$site/nvidia_pytriton.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
  [[ -n "$site" ]] || return 0
  local stubs=$site/pytriton/tritonserver/python_backend_stubs
  local py
  py=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  TRITON_PYB=$site/pytriton/tritonserver/backends/python
  if [[ -x $stubs/$py/triton_python_backend_stub && ! -e $TRITON_PYB/triton_python_backend_stub ]]; then
    cp "$stubs/$py/triton_python_backend_stub" "$TRITON_PYB/" 2>/dev/null
  fi
  [[ -e $TRITON_PYB/triton_python_backend_stub ]] || TRITON_PYB=""  # no stub for this Python
  KILN_TRITON_SERVER=${KILN_TRITON_SERVER:-$site/pytriton/tritonserver/bin/tritonserver}
  if ! command -v perf_analyzer > /dev/null && [[ -x $site/perf_analyzer/perf_analyzer ]]; then
    mkdir -p /tmp/kiln-triton/bin
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' \
      "$site/perf_analyzer" "$site/perf_analyzer/perf_analyzer" > /tmp/kiln-triton/bin/perf_analyzer
    chmod +x /tmp/kiln-triton/bin/perf_analyzer
    export PATH=/tmp/kiln-triton/bin:$PATH
  fi
}
if has triton || has triton_bench || has triton_startup; then
  triton_setup
fi
if has triton; then
  python3 tests/triton/test_triton_gpu.py --build "$B" ${KILN_TRITON_SERVER:+--server "$KILN_TRITON_SERVER"} \
    > "$OUT/triton_gpu.log" 2>&1
  st=$?
  [[ $st == 0 || $st == 77 ]] || rc=1
  cat "$OUT/triton_gpu.log"
fi
if has triton_bench; then
  if [[ -z "${KILN_TRITON_SERVER:-}" || -z "$TRITON_PYB" ]] || ! command -v perf_analyzer > /dev/null; then
    echo "triton_bench: needs tritonserver with its Python backend and perf_analyzer (scripts/prepare_gpu_carry.sh --triton)"
    rc=1
  else
    # shellcheck disable=SC2086  # the arguments are a list
    PYTHONUNBUFFERED=1 python3 bench/triton_gpu.py --build "$B" --server "$KILN_TRITON_SERVER" --torchvision-resnet50 \
      --fp16 --max-batch 4 --python-backend "$TRITON_PYB" --cuda-shm --load-generator perf_analyzer \
      ${KILN_TRITON_BENCH_ARGS:---queue-delay-us 0 --duration 2 --rounds 2 --concurrency 1,2,4,8,16,32} \
      --out "$OUT/triton_gpu.md" > "$OUT/triton_gpu_bench.log" 2>&1 || rc=1
    tail -60 "$OUT/triton_gpu_bench.log"
  fi
fi
if has triton_startup; then
  # shellcheck disable=SC2086  # the arguments are a list
  PYTHONUNBUFFERED=1 python3 bench/triton_startup.py --build "$B" --server "$KILN_TRITON_SERVER" \
    ${TRITON_PYB:+--python-backend "$TRITON_PYB"} ${KILN_TRITON_STARTUP_ARGS:-} \
    --out "$OUT/triton_startup.md" > "$OUT/triton_startup.log" 2>&1 || rc=1
  tail -30 "$OUT/triton_startup.log"
fi
if has python; then
  if [[ -d "$B/python/kiln" ]]; then
    PYTHONPATH="$B/python" python3 -m pytest -q -rfEs -p no:cacheprovider tests/python/test_api_cuda.py tests/python/test_api.py \
      > "$OUT/python_tests.log" 2>&1 || rc=1
    tail -15 "$OUT/python_tests.log"
    PYTHONPATH="$B/python" PYTHONUNBUFFERED=1 python3 bench/python_overhead.py --models-dir "$MODELS" \
      --out "$OUT/python_overhead.md" > "$OUT/python_overhead.log" 2>&1 || rc=1
    cat "$OUT/python_overhead.md" 2>/dev/null || tail -20 "$OUT/python_overhead.log"
  else
    echo "python: $B/python/kiln was not built (nanobind missing?)"; rc=1
  fi
fi
exit $rc
