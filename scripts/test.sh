#!/usr/bin/env bash
# Everything scripts/demo.sh does, then kiln's test suite (unit, op harness, ONNX import, engine
# format, plugins, CLI and model tests). Slow suites run only with KILN_SLOW_TESTS=1.
# Usage: scripts/test.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
scripts/demo.sh "$BUILD"
cd "$BUILD"
ctest -j"$(nproc)" --output-on-failure --timeout 900
