#!/usr/bin/env bash
# kiln's main job on a fresh machine: install what is needed, build kiln (Release), make the demo
# model (a CNN whose activations are custom ops: TemperatureSwish, ThresholdReLU, Mish), build an
# engine from it through the ONNX plugin fallback, run it and compare with the reference that
# ONNX Runtime computes on the same network written in standard ops. Runs on the CPU unless
# KILN_DEVICE=cuda (a machine with an NVIDIA GPU; the engine is then built and run on the GPU).
# Usage: scripts/demo.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
DEVICE=${KILN_DEVICE:-cpu}
scripts/install_deps.sh
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release ${KILN_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
# The Python package (docs/python.md), installed from the build folder just built: scikit-build-core
# reuses it (same options), so nothing is compiled twice.
if [ -d "$BUILD/python/kiln" ]; then
  # The folder's own generator (scikit-build-core would pick Ninja, which cannot reuse a Makefile build).
  export CMAKE_GENERATOR="$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$BUILD/CMakeCache.txt")"
  PIP_ARGS="--no-build-isolation -q -C build-dir=$BUILD -C cmake.define.KILN_BUILD_TESTS=ON -C cmake.define.KILN_BUILD_TOOLS=ON"
  python3 -m pip install $PIP_ARGS . 2>/dev/null || python3 -m pip install --break-system-packages $PIP_ARGS .
  (cd /tmp && python3 -c "import kiln; print('kiln: Python package', kiln.__version__, 'installed from', kiln.__file__)")
fi
DEMO="$BUILD/demo"
python3 scripts/make_demo_model.py "$DEMO/model"
"$BUILD/kiln" inspect --onnx "$DEMO/model/model.onnx"
"$BUILD/kiln" build --onnx "$DEMO/model/model.onnx" --save-engine "$DEMO/demo.kiln" --device "$DEVICE" \
  --min-shapes image:1x3x64x64 --opt-shapes image:2x3x64x64 --max-shapes image:8x3x64x64
"$BUILD/kiln" run --engine "$DEMO/demo.kiln" --inputs-dir "$DEMO/model/test_data_set_0" \
  --output-dir "$DEMO/outputs" --compare-dir "$DEMO/model/test_data_set_0" --warmup 2 --iterations 20
echo "kiln demo: OK (engine $DEMO/demo.kiln, outputs in $DEMO/outputs)"
