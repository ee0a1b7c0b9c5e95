#!/usr/bin/env bash
# Builds deploy/Dockerfile's CPU image and serves from it, without a Docker engine (this project's
# machines have none): buildah builds the Dockerfile as written, its RUN steps in chroot
# isolation, on a Debian 12 base made by debootstrap from Debian's mirror (the Dockerfile's
# `debian:12` lives on Docker Hub, which these machines cannot reach; --build-arg BASE points it
# at the local one). Then a container of the image runs the image's own ENTRYPOINT and CMD (plus
# loopback ports) on a model repository with the demo model (custom layers, dynamic batching, 2
# instances), and this script checks, from outside the container:
#   * the server gets ready and the image's HEALTHCHECK command succeeds inside the container;
#   * HTTP and gRPC inferences equal what the image's own `kiln run` computes with the engine the
#     backend built and cached beside the ONNX file;
#   * a request with a wrong shape gets an error naming the input, and the server still serves.
# A separate command (the image build compiles kiln: about 25 minutes on 2 cores), not part of
# scripts/test.sh. Needs root (buildah, debootstrap; both installed from Debian if missing).
# Usage: scripts/image_test.sh [--out REPORT.md]
# Environment: KILN_IMAGE_WORK (default /var/tmp/kiln-image-test: the base rootfs and the repository);
# KILN_IMAGE_CA_BUNDLE: a CA bundle the build's pip must trust (a TLS-inspecting proxy between the
# machine and PyPI, as on this project's machines); by default this machine's bundle when it holds
# local CAs (/usr/local/share/ca-certificates). It is mounted for the build only, with a pip.conf
# pointing at it: nothing of it enters the image.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_FILE=""
if [[ "${1:-}" == "--out" ]]; then OUT_FILE=$2; fi
WORK=${KILN_IMAGE_WORK:-/var/tmp/kiln-image-test}
BASE=localhost/kiln-debian:12
IMAGE=localhost/kiln-triton:cpu
mkdir -p "$WORK"
missing=""
for tool in buildah debootstrap; do command -v $tool > /dev/null || missing="$missing $tool"; done
if [[ -n "$missing" ]]; then
  echo "image_test: installing$missing"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing > /dev/null
fi
python3 -c "import tritonclient.http, tritonclient.grpc, numpy" 2> /dev/null ||
  { echo "image_test: needs tritonclient and numpy (scripts/install_deps.sh)" >&2; exit 1; }

# 1. The base image: Debian 12 (minbase) from Debian's mirror.
if ! buildah inspect --type image "$BASE" > /dev/null 2>&1; then
  if [[ ! -x "$WORK/rootfs/usr/bin/apt-get" ]]; then
    echo "image_test: debootstrap Debian 12 into $WORK/rootfs"
    rm -rf "$WORK/rootfs"
    debootstrap --variant=minbase bookworm "$WORK/rootfs" http://deb.debian.org/debian > "$WORK/debootstrap.log" 2>&1 ||
      { tail -20 "$WORK/debootstrap.log"; exit 1; }
  fi
  ctr=$(buildah from scratch)
  mnt=$(buildah mount "$ctr")
  cp -a "$WORK/rootfs/." "$mnt/"
  buildah umount "$ctr" > /dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd /bin/bash "$ctr"
  buildah commit -q "$ctr" "$BASE" > /dev/null
  buildah rm "$ctr" > /dev/null
fi

# 2. The image, from the Dockerfile as written.
t0=$(date +%s)
echo "image_test: building $IMAGE from deploy/Dockerfile (buildah, chroot isolation; log: $WORK/build.log)"
ca=${KILN_IMAGE_CA_BUNDLE:-}
if [[ -z "$ca" ]] && compgen -G "/usr/local/share/ca-certificates/*.crt" > /dev/null; then
  ca=/etc/ssl/certs/ca-certificates.crt
fi
mounts=()
if [[ -n "$ca" ]]; then
  printf '[global]\ncert = /run/kiln-build-ca.crt\n' > "$WORK/pip.conf"
  mounts=(-v "$ca:/run/kiln-build-ca.crt:ro" -v "$WORK/pip.conf:/etc/pip.conf:ro")
  echo "image_test: the build's pip trusts $ca (mounted for the build only)"
fi
# --format docker: as `docker build` makes it (the OCI format has no HEALTHCHECK).
buildah bud --isolation chroot --layers --force-rm --format docker "${mounts[@]}" -f deploy/Dockerfile --build-arg BASE="$BASE" -t "$IMAGE" . \
  > "$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log"; exit 1; }
build_s=$(($(date +%s) - t0))
size=$(buildah images --format '{{.Size}}' "$IMAGE" | head -1)
echo "image_test: built in ${build_s} s ($size)"

# 3. A model repository: the demo model, as scripts/serve.sh makes it.
REPO="$WORK/repo"
rm -rf "$REPO" "$WORK/model"
python3 scripts/make_demo_model.py "$WORK/model" > /dev/null
mkdir -p "$REPO/demo/1"
cp "$WORK/model/model.onnx" "$REPO/demo/1/model.onnx"
cat > "$REPO/demo/config.pbtxt" << 'CONFIG'
backend: "kiln"
max_batch_size: 8
dynamic_batching { max_queue_delay_microseconds: 2000 }
instance_group [ { count: 2, kind: KIND_CPU } ]
CONFIG

# 4. A container running the image's ENTRYPOINT + CMD, on loopback ports.
read -r HTTP GRPC METRICS < <(python3 -c "
import socket
s = [socket.socket() for _ in range(3)]
for x in s: x.bind(('127.0.0.1', 0))
print(*[x.getsockname()[1] for x in s])")
buildah inspect --type image "$IMAGE" > "$WORK/image.json"
mapfile -t argv < <(python3 -c "
import json, sys
c = json.load(open(sys.argv[1]))['Docker']['config']
for a in (c.get('Entrypoint') or []) + (c.get('Cmd') or []): print(a)" "$WORK/image.json")
HEALTH=$(python3 -c "
import json, sys
print(json.dumps((json.load(open(sys.argv[1]))['Docker']['config'].get('Healthcheck') or {}).get('Test') or []))" "$WORK/image.json")
[[ ${#argv[@]} -gt 0 ]] || { echo "image_test: the image has no ENTRYPOINT/CMD"; exit 1; }
[[ "$HEALTH" != "[]" ]] || { echo "image_test: the image has no HEALTHCHECK"; exit 1; }
argv+=("--http-address=127.0.0.1" "--http-port=$HTTP" "--grpc-address=127.0.0.1" "--grpc-port=$GRPC"
  "--metrics-address=127.0.0.1" "--metrics-port=$METRICS")
CTR=$(buildah from "$IMAGE")
cleanup() {
  if [[ -n "${SERVER_PID:-}" ]]; then
    kill -TERM -- "-$SERVER_PID" 2> /dev/null || true
    for _ in $(seq 60); do kill -0 "$SERVER_PID" 2> /dev/null || break; sleep 0.5; done
    kill -KILL -- "-$SERVER_PID" 2> /dev/null || true
    wait "$SERVER_PID" 2> /dev/null || true
  fi
  buildah rm "$CTR" > /dev/null 2>&1 || echo "image_test: could not remove container $CTR (buildah rm $CTR)"
}
trap cleanup EXIT
echo "image_test: container $CTR runs: ${argv[*]}"
setsid buildah run --isolation chroot -v "$REPO:/models" "$CTR" -- "${argv[@]}" > "$WORK/server.log" 2>&1 &
SERVER_PID=$!

# 5. The checks, from outside the container.
python3 - "$HTTP" "$GRPC" "$WORK" "$SERVER_PID" << 'PY' || { echo "server log:"; tail -30 "$WORK/server.log"; exit 1; }
import os, sys, time
import numpy as np
import tritonclient.http as http
import tritonclient.grpc as grpc
from tritonclient.utils import InferenceServerException
http_port, grpc_port, work, pid = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
h = http.InferenceServerClient(f"127.0.0.1:{http_port}")
deadline = time.time() + 300
while True:
    try:
        if h.is_server_ready():
            break
    except Exception:  # noqa: BLE001
        pass
    if time.time() > deadline or not os.path.exists(f"/proc/{pid}"):
        sys.exit("image_test: the server in the container did not get ready")
    time.sleep(0.5)
x = np.random.default_rng(3).standard_normal((2, 3, 64, 64)).astype(np.float32)
np.save(os.path.join(work, "repo", "x.npy"), x)
i = http.InferInput("image", list(x.shape), "FP32"); i.set_data_from_numpy(x)
y_http = h.infer("demo", [i]).as_numpy("scores")
g = grpc.InferenceServerClient(f"127.0.0.1:{grpc_port}")
j = grpc.InferInput("image", list(x.shape), "FP32"); j.set_data_from_numpy(x)
y_grpc = g.infer("demo", [j]).as_numpy("scores")
np.save(os.path.join(work, "y_http.npy"), y_http)
np.save(os.path.join(work, "y_grpc.npy"), y_grpc)
bad = http.InferInput("image", [1, 3, 32, 32], "FP32"); bad.set_data_from_numpy(x[:1, :, :32, :32].copy())
try:
    h.infer("demo", [bad])
    sys.exit("image_test: a wrong shape was accepted")
except InferenceServerException as e:
    msg = str(e)
    if "image" not in msg:
        sys.exit(f"image_test: the wrong-shape error does not name the input: {msg}")
    print(f"ok: a [1,3,32,32] request: {msg[:200]}")
again = h.infer("demo", [i]).as_numpy("scores")
if not np.array_equal(again, y_http):
    sys.exit("image_test: after the bad request the server answered differently")
print(f"ok: HTTP and gRPC answered {list(y_http.shape)}; the server still serves after the bad request")
PY
# The image's HEALTHCHECK command, inside the container (its port is the image's default 8000:
# run with this test's port instead).
health_cmd=$(python3 -c "
import json, sys
t = json.loads(sys.argv[1]); print(t[1] if t and t[0] == 'CMD-SHELL' else ' '.join(t[1:]))" "$HEALTH")
health_cmd=${health_cmd//127.0.0.1:8000/127.0.0.1:$HTTP}
buildah run --isolation chroot "$CTR" -- sh -c "$health_cmd" > /dev/null && echo "ok: HEALTHCHECK ($health_cmd) passes"
# The reference: the image's kiln on the engine the backend cached beside the ONNX file.
engine=$(cd "$REPO/demo/1" && ls model.onnx.*.kiln | head -1)
[[ -n "$engine" ]] || { echo "image_test: no cached engine beside the ONNX file"; exit 1; }
buildah run --isolation chroot -v "$REPO:/models" "$CTR" -- kiln run --engine "/models/demo/1/$engine" \
  --input image=/models/x.npy --output-dir /models/ref > "$WORK/kiln_run.log" 2>&1 || { tail "$WORK/kiln_run.log"; exit 1; }
python3 - "$WORK" << 'PY'
import sys
import numpy as np
w = sys.argv[1]
ref = np.load(f"{w}/repo/ref/scores.npy")
for proto in ("http", "grpc"):
    got = np.load(f"{w}/y_{proto}.npy")
    d = float(np.max(np.abs(got - ref)))
    if d != 0:
        sys.exit(f"image_test: {proto} answer differs from the image's kiln run by {d}")
print("ok: HTTP and gRPC answers equal the image's `kiln run` on the cached engine (max abs difference 0)")
PY
summary="image_test: $IMAGE built from deploy/Dockerfile in ${build_s} s ($size); served the demo model over HTTP and gRPC; all checks passed"
echo "$summary"
if [[ -n "$OUT_FILE" ]]; then
  {
    echo "# deploy/Dockerfile's CPU image, built and served without a Docker engine ($(date -u +%Y-%m-%d), $(nproc) cores)"
    echo
    echo "$summary."
    echo
    echo "Base: Debian 12 minbase by debootstrap; build: $(buildah --version); RUN steps in chroot isolation."
    echo "Server command (the image's ENTRYPOINT + CMD + loopback ports): ${argv[*]}"
    echo
    grep -E "^STEP|COMMIT|Successfully" "$WORK/build.log" | head -40 | sed 's/^/    /'
  } > "$OUT_FILE"
fi
