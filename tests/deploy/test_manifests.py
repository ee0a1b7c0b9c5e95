"""The deployment files (deploy/: the Dockerfile, the Kubernetes manifest, the KServe runtime) are
consistent with kiln and with each other, and their tritonserver command lines work: each is run
here, as written (only the ports and the model folder substituted), with the tritonserver of
PyPI's nvidia-pytriton and kiln's backend from the build tree and from an install of it (as the
image installs it), and its probes' paths must answer. The
files themselves are not deployed on a cluster or built into an image by this test (no cluster,
no Docker in CI); the Dockerfile's build steps are mirrored: every folder it copies exists and the
top-level CMakeLists.txt needs no other. Skipped without PyYAML or nvidia-pytriton."""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
pytriton = pytest.importorskip("pytriton")

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SERVER = Path(pytriton.__file__).parent / "tritonserver" / "bin" / "tritonserver"
# Where the image installs the backend (deploy/Dockerfile's install prefix /opt/kiln).
IMAGE_BACKENDS = "/opt/kiln/lib/triton/backends"


def docs(name):
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def by_kind(documents, kind):
    found = [d for d in documents if d["kind"] == kind]
    assert found, f"no {kind} in {[d['kind'] for d in documents]}"
    return found[0]


def flag(args, name):
    values = [a.split("=", 1)[1] for a in args if a.startswith(name + "=")]
    assert len(values) == 1, (name, args)
    return values[0]


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def demo_repository(tmp):
    """A model repository with the demo model (custom layers) as the docs describe it."""
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_demo_model.py"), str(tmp / "m")], check=True,
                   capture_output=True)
    repo = tmp / "repo"
    (repo / "demo" / "1").mkdir(parents=True)
    shutil.copy(tmp / "m" / "model.onnx", repo / "demo" / "1" / "model.onnx")
    (repo / "demo" / "config.pbtxt").write_text('backend: "kiln"\nmax_batch_size: 8\n')
    return repo


def run_server(args, http_port, probe_paths, log):
    """Starts tritonserver with `args`; returns once every probe path answers 200 (or fails)."""
    proc = subprocess.Popen([str(SERVER), *args], stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.time() + 120
        pending = list(probe_paths)
        while pending:
            assert proc.poll() is None, f"tritonserver exited ({proc.returncode}): {Path(log).read_text()[-3000:]}"
            assert time.time() < deadline, f"probes {pending} never answered: {Path(log).read_text()[-3000:]}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http_port}{pending[0]}", timeout=2) as r:
                    if r.status == 200:
                        pending.pop(0)
                        continue
            except OSError:
                pass
            time.sleep(0.3)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.fixture(scope="module", params=["build tree", "installed"])
def backend_dir(request, tmp_path_factory):
    """The backend folder of the build tree, and of the build installed into a fresh prefix as the
    image does (cmake --install; the backend must find libkiln through its RUNPATH there)."""
    d = os.environ.get("KILN_TRITON_BACKEND_DIR")
    if not d or not (Path(d) / "kiln" / "libtriton_kiln.so").exists():
        pytest.skip("KILN_TRITON_BACKEND_DIR (<build>/triton) is not set or holds no kiln/libtriton_kiln.so")
    if request.param == "build tree":
        return d
    prefix = tmp_path_factory.mktemp("prefix")
    done = subprocess.run(["cmake", "--install", str(Path(d).parent), "--prefix", str(prefix)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    found = list(prefix.glob("lib*/**/triton/backends/kiln/libtriton_kiln.so"))
    assert len(found) == 1, found
    return str(found[0].parent.parent)


def test_the_dockerfile_copies_what_the_build_needs_and_installs_the_backend_where_the_manifests_look():
    text = (DEPLOY / "Dockerfile").read_text()
    copied = set()
    for line in text.splitlines():
        m = re.match(r"COPY\s+(.+)\s+\S+$", line)
        if m and not line.startswith("COPY --from"):
            for src in m.group(1).split():
                assert (ROOT / src).exists(), f"the Dockerfile copies {src}, which is not in the repository"
                copied.add(src.rstrip("/"))
    cmake = (ROOT / "CMakeLists.txt").read_text()
    # Folders the top-level CMakeLists.txt reads whatever the options (tests and fuzzers are off).
    for sub in re.findall(r"add_subdirectory\((\S+)\)", cmake):
        if sub.startswith("tests"):
            continue
        assert sub.split("/")[0] in copied, f"CMakeLists.txt adds {sub}, which the Dockerfile does not copy"
    for sub in re.findall(r"\$\{CMAKE_SOURCE_DIR\}/([A-Za-z_]+)/", cmake):
        if sub in ("tests", "examples", "docs"):
            continue
        assert sub in copied, f"CMakeLists.txt reads {sub}/, which the Dockerfile does not copy"
    assert "-DCMAKE_INSTALL_PREFIX=/opt/kiln" in text
    triton_cmake = (ROOT / "serving" / "triton" / "CMakeLists.txt").read_text()
    assert "${CMAKE_INSTALL_LIBDIR}/triton/backends/kiln" in triton_cmake
    assert f"--backend-directory={IMAGE_BACKENDS}" in text
    assert "/v2/health/ready" in text


def test_the_kubernetes_manifest_is_consistent(tmp_path, backend_dir):
    d = docs("kubernetes/kiln-triton.yaml")
    deployment, service, hpa = by_kind(d, "Deployment"), by_kind(d, "Service"), by_kind(d, "HorizontalPodAutoscaler")
    template = deployment["spec"]["template"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    (container,) = template["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    args = container["args"]
    assert int(flag(args, "--http-port")) == ports["http"]
    assert int(flag(args, "--grpc-port")) == ports["grpc"]
    assert int(flag(args, "--metrics-port")) == ports["metrics"]
    assert template["metadata"]["annotations"]["prometheus.io/port"] == str(ports["metrics"])
    for p in service["spec"]["ports"]:
        assert p["targetPort"] in ports, p
    volumes = {v["name"] for v in template["spec"]["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert set(mounts) <= volumes
    assert flag(args, "--model-repository") in mounts.values()
    probes = {k: container[k]["httpGet"] for k in ("startupProbe", "livenessProbe", "readinessProbe")}
    for probe in probes.values():
        assert probe["port"] in ports
    # The container's command line, as written, with the image's entrypoint flags, serves the demo
    # model and answers the probes (ports and the model folder substituted).
    http_port, grpc_port, metrics_port = free_ports(3)
    repo = demo_repository(tmp_path)
    run_args = [f"--backend-directory={backend_dir}", "--allow-gpu-metrics=false"]
    for a in args:
        a = a.replace(f"={ports['http']}", f"={http_port}").replace(f"={ports['grpc']}", f"={grpc_port}")
        a = a.replace(f"={ports['metrics']}", f"={metrics_port}")
        a = a.replace(f"={mounts['models']}", f"={repo}")
        run_args.append(a)
    run_args += ["--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1"]
    run_server(run_args, http_port, [p["path"] for p in probes.values()] + ["/v2/models/demo/ready"],
               tmp_path / "k8s_server.log")


def test_the_kserve_runtime_is_consistent(tmp_path, backend_dir):
    d = docs("kserve/kiln-triton-runtime.yaml")
    runtime, service = by_kind(d, "ServingRuntime"), by_kind(d, "InferenceService")
    model = service["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    formats = {(f["name"], f.get("version")) for f in runtime["spec"]["supportedModelFormats"]}
    assert (model["modelFormat"]["name"], model["modelFormat"].get("version")) in formats
    (container,) = runtime["spec"]["containers"]
    assert container["name"] == "kserve-container"  # the name KServe looks for
    args = container["args"]
    # KServe mounts the model at /mnt/models and sends the v2 protocol to 8080 (HTTP) / 9000 (gRPC).
    assert flag(args, "--model-store") == "/mnt/models"
    assert flag(args, "--http-port") == "8080" and flag(args, "--grpc-port") == "9000"
    assert {p["containerPort"] for p in container["ports"]} == {8080}
    assert flag(args, "--backend-directory") == IMAGE_BACKENDS
    assert runtime["spec"]["annotations"]["prometheus.kserve.io/port"] == flag(args, "--metrics-port")
    assert container["command"] == ["tritonserver"]
    http_port, grpc_port, metrics_port = free_ports(3)
    repo = demo_repository(tmp_path)
    run_args = []
    for a in args:
        a = a.replace("=/mnt/models", f"={repo}").replace(f"={IMAGE_BACKENDS}", f"={backend_dir}")
        a = a.replace("=8080", f"={http_port}").replace("=9000", f"={grpc_port}").replace(
            "=" + flag(args, "--metrics-port"), f"={metrics_port}")
        run_args.append(a)
    run_args += ["--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1"]
    run_server(run_args, http_port, ["/v2/health/ready", "/v2/models/demo/ready"], tmp_path / "kserve_server.log")
