#!/usr/bin/env bash
# Serves models with Triton Inference Server and kiln's backend (docs/serving.md), on 127.0.0.1:
# installs what is needed (scripts/install_deps.sh: nvidia-pytriton, which ships tritonserver,
# and tritonclient), builds kiln and libtriton_kiln.so, and starts tritonserver on MODEL_REPO. Without
# MODEL_REPO it makes an example repository: the demo CNN whose activations are custom layers
# (scripts/make_demo_model.py), served as model "demo" with dynamic batching and two instances.
# Usage: scripts/serve.sh [MODEL_REPO]   (HTTP_PORT / GRPC_PORT / METRICS_PORT, default 8000/8001/8002;
#        BUILD_DIR, default build; extra tritonserver flags in TRITON_ARGS)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
scripts/install_deps.sh
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release ${KILN_CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target triton_kiln kiln_cli
REPO=${1:-}
if [ -z "$REPO" ]; then
  REPO="$BUILD/triton-example"
  python3 scripts/make_demo_model.py "$BUILD/triton-example-model" >/dev/null
  mkdir -p "$REPO/demo/1"
  cp "$BUILD/triton-example-model/model.onnx" "$REPO/demo/1/model.onnx"
  cat > "$REPO/demo/config.pbtxt" <<'CONFIG'
backend: "kiln"
max_batch_size: 8
dynamic_batching { max_queue_delay_microseconds: 2000 }
instance_group [ { count: 2, kind: KIND_CPU } ]
CONFIG
  echo "kiln: example repository $REPO (model 'demo': input image [N,3,64,64] float32, output scores [N,10])"
fi
SERVER=$(python3 -c "import pytriton, os; print(os.path.join(os.path.dirname(pytriton.__file__), 'tritonserver', 'bin', 'tritonserver'))")
echo "kiln: starting $SERVER on 127.0.0.1 (HTTP ${HTTP_PORT:-8000}, gRPC ${GRPC_PORT:-8001}, metrics ${METRICS_PORT:-8002})"
exec "$SERVER" --model-repository="$REPO" --backend-directory="$BUILD/triton" \
  --http-address=127.0.0.1 --http-port="${HTTP_PORT:-8000}" --grpc-address=127.0.0.1 --grpc-port="${GRPC_PORT:-8001}" \
  --metrics-address=127.0.0.1 --metrics-port="${METRICS_PORT:-8002}" --allow-gpu-metrics=false ${TRITON_ARGS:-}
