#!/usr/bin/env bash
# Everything scripts/demo.sh does, then kiln's test suite (unit, op harness, ONNX import, engine
# format, plugins, CLI and model tests). Slow suites run only with KILN_SLOW_TESTS=1.
# KILN_ASAN=1: then the same tests again under ASan + UBSan (scripts/asan.sh; not yet in CI).
# Usage: scripts/test.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
# CI has no GPU: it compiles and links every CUDA source once, for sm_90 machine code only, which
# keeps the 2-core run short (the default build is the sm_80 + sm_90 + PTX fat binary).
export KILN_CMAKE_ARGS=${KILN_CMAKE_ARGS:--DCMAKE_CUDA_ARCHITECTURES=90-real}
scripts/demo.sh "$BUILD"
(cd "$BUILD" && ctest -j"$(nproc)" --output-on-failure --timeout 900)
# KILN_ASAN=1: the same tests again under AddressSanitizer + UBSan (issue 16), a second,
# instrumented build. Not on by default yet: its whole list has not passed once (see docs/status.md).
if [[ "${KILN_ASAN:-0}" == 1 ]]; then
  scripts/asan.sh
fi
