#!/usr/bin/env bash
# The GPU suite (never run by CI, which has no GPU): builds kiln with CUDA for the local GPU,
# runs the CUDA tests (built-in plugins' CUDA kernels vs their CPU references in fp32 and fp16,
# the plugin conformance suite on CUDA including the stream-capture checks, the deliberately
# broken CUDA plugins), `kiln plugin check --device cuda` on every built-in, and the plugin
# bandwidth benchmark against a device-to-device copy. Logs go to $OUT (default ./gpu-results).
# Usage: scripts/gpu_suite.sh [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-gpu}
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
JOBS=$(nproc)
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version | tail -1
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DKILN_WITH_CUDA=ON -DKILN_WERROR=OFF \
  -DCMAKE_CUDA_ARCHITECTURES="${KILN_CUDA_ARCHS:-90}" -DPython3_EXECUTABLE="$(command -v python3)" > "$OUT/configure.log" 2>&1 \
  || { tail -30 "$OUT/configure.log"; exit 1; }
grep "kiln:" "$OUT/configure.log"
cmake --build "$B" -j"$JOBS" > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -40; exit 1; }
echo "build: ok"
rc=0
(cd "$B" && ./tests/kiln_tests --gtest_filter='*Cuda*:*CUDA*:*Gpu*:*GPU*') > "$OUT/gpu_tests.log" 2>&1 || rc=1
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" "$OUT/gpu_tests.log"
for p in TemperatureSwish ThresholdReLU GELU Mish; do
  "$B/kiln" plugin check --name "$p" --device cuda || rc=1
done > "$OUT/plugin_check_cuda.log" 2>&1
tail -60 "$OUT/plugin_check_cuda.log"
"$B/bench/kiln_plugin_bandwidth" > "$OUT/plugin_bandwidth.log" 2>&1 || rc=1
cat "$OUT/plugin_bandwidth.log"
exit $rc
