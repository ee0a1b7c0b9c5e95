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
#   serving    bench/serving_vs_pytorch.py (kiln bench vs PyTorch under serving patterns; needs
#              $KILN_TORCH_MODELS too)
#   triton     kiln's Triton backend on the GPU: request data in GPU memory, 50 reloads of a CUDA
#              model without growing GPU or host memory (tests/triton/test_triton_gpu.py;
#              the server: $KILN_TRITON_SERVER, default nvidia-pytriton's; an unzipped wheel needs its
#              nvidia_pytriton.libs on LD_LIBRARY_PATH)
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
MODELS=${KILN_TEST_MODELS_DIR:-../shared/models}
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
cmake --build "$B" -j"$JOBS" > "$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -80; exit 1; }
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
if has serving && [[ -n "${KILN_TORCH_MODELS:-}" ]]; then
  PYTHONUNBUFFERED=1 python3 bench/serving_vs_pytorch.py --kiln "$B/kiln" --models-dir "$MODELS" \
    --torch-models "$KILN_TORCH_MODELS" --workdir "$OUT/serving" ${KILN_SERVING_ARGS:-} \
    --out "$OUT/serving_vs_pytorch.md" --raw-dir "$OUT/serving_raw" > "$OUT/serving_vs_pytorch.log" 2>&1 || rc=1
  tail -60 "$OUT/serving_vs_pytorch.log"
fi
if has triton; then
  python3 tests/triton/test_triton_gpu.py --build "$B" ${KILN_TRITON_SERVER:+--server "$KILN_TRITON_SERVER"} \
    > "$OUT/triton_gpu.log" 2>&1
  st=$?
  [[ $st == 0 || $st == 77 ]] || rc=1
  cat "$OUT/triton_gpu.log"
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
