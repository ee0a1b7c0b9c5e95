"""kiln's Triton backend (serving/triton, docs/serving.md) in a real tritonserver (the one PyPI's
nvidia-pytriton ships) on 127.0.0.1 with free ports, driven by tritonclient over HTTP and gRPC:
results against ONNX Runtime's reference, concurrent clients under dynamic batching, bad requests
that each get an error while the server keeps serving, a model whose configuration contradicts its
engine, explicit load/unload cycles without growing memory, the metrics endpoint, and large inputs
copied with the parameter input_copy_threads (answers equal to `kiln run`'s; a bad value fails the
load). Skipped when nvidia-pytriton or tritonclient is not installed (scripts/install_deps.sh
installs them). Every server is stopped by its PID. Needs KILN_TRITON_BACKEND_DIR (<build>/triton) and the kiln package
on PYTHONPATH (<build>/python), which ctest sets."""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

http = pytest.importorskip("tritonclient.http")
grpc = pytest.importorskip("tritonclient.grpc")
pytriton = pytest.importorskip("pytriton")
onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SERVER = Path(pytriton.__file__).parent / "tritonserver" / "bin" / "tritonserver"
BACKENDS = os.environ.get("KILN_TRITON_BACKEND_DIR", str(ROOT / "build" / "triton"))

CONFIG = """backend: "kiln"
max_batch_size: 8
dynamic_batching { max_queue_delay_microseconds: 3000 }
instance_group [ { count: 2, kind: KIND_CPU } ]
parameters { key: "threads" value { string_value: "1" } }
"""


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Server:
    def __init__(self, repo, log, extra=()):
        self.http_port, self.grpc_port, self.metrics_port = free_ports(3)
        self.log = open(log, "w")
        self.proc = subprocess.Popen(
            [str(SERVER), f"--model-repository={repo}", f"--backend-directory={BACKENDS}", "--http-address=127.0.0.1",
             f"--http-port={self.http_port}", "--grpc-address=127.0.0.1", f"--grpc-port={self.grpc_port}",
             "--metrics-address=127.0.0.1", f"--metrics-port={self.metrics_port}", "--allow-gpu-metrics=false",
             "--exit-timeout-secs=5", *extra],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.client = http.InferenceServerClient(f"127.0.0.1:{self.http_port}", concurrency=16)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tritonserver exited with {self.proc.returncode}: {Path(log).read_text()[-3000:]}")
            try:
                if self.client.is_server_ready():
                    return
            except Exception:  # noqa: BLE001 (not up yet)
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError("tritonserver did not become ready in 120 s: " + Path(log).read_text()[-3000:])

    def rss_kib(self):
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.log.close()


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    if not SERVER.exists():
        pytest.skip(f"no tritonserver at {SERVER}")
    if not (Path(BACKENDS) / "kiln" / "libtriton_kiln.so").exists():
        pytest.skip(f"the kiln backend is not built in {BACKENDS}")
    tmp = tmp_path_factory.mktemp("triton")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_demo_model.py"), str(tmp / "m")], check=True,
                   capture_output=True)
    repo = tmp / "repo"
    (repo / "demo" / "1").mkdir(parents=True)
    shutil.copy(tmp / "m" / "model.onnx", repo / "demo" / "1" / "model.onnx")
    (repo / "demo" / "config.pbtxt").write_text(CONFIG)
    x = numpy_helper.to_array(onnx.load_tensor(str(tmp / "m" / "test_data_set_0" / "input_0.pb")))
    ref = numpy_helper.to_array(onnx.load_tensor(str(tmp / "m" / "test_data_set_0" / "output_0.pb")))
    server = Server(repo, tmp / "server.log")
    yield {"server": server, "repo": repo, "x": x, "ref": ref, "tmp": tmp}
    server.stop()


def infer_http(server, x, name="image", dtype="FP32", model="demo", client=None):
    inp = http.InferInput(name, list(x.shape), dtype)
    inp.set_data_from_numpy(x)
    return (client or server.client).infer(model, [inp]).as_numpy("scores")


def test_http_and_grpc_match_onnx_runtime(demo):
    server = demo["server"]
    y = infer_http(server, demo["x"])
    np.testing.assert_allclose(y, demo["ref"], rtol=1e-4, atol=1e-5)
    g = grpc.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    inp = grpc.InferInput("image", list(demo["x"].shape), "FP32")
    inp.set_data_from_numpy(demo["x"])
    np.testing.assert_allclose(g.infer("demo", [inp]).as_numpy("scores"), demo["ref"], rtol=1e-4, atol=1e-5)
    config = server.client.get_model_config("demo")  # completed from the engine
    assert config["input"][0]["name"] == "image" and config["input"][0]["dims"] == [3, 64, 64]
    assert config["output"][0]["name"] == "scores" and config["max_batch_size"] == 8


def settled_counts(server, model="demo"):
    """(inference_count, execution_count) once they stop changing.

    The backend reports a request's statistics just after it sends the response, so a client can
    see its answer before the counters include it: read until two reads 0.2 s apart agree."""
    deadline = time.time() + 10
    last = None
    while True:
        stats = server.client.get_inference_statistics(model)["model_stats"][0]
        now = (int(stats["inference_count"]), int(stats["execution_count"]))
        if now == last or time.time() > deadline:
            return now
        last = now
        time.sleep(0.2)


def run_clients(client, count=8):
    """client(k) for k in 0..count-1, each in its own thread, all at once; returns when all are done."""
    threads = [threading.Thread(target=client, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def counts_since(server, before, expected):
    """(inferences, executions) since `before` (settled_counts), once at least `expected` inferences
    are counted (the last responses' statistics lag them; see settled_counts) or after 10 s."""
    deadline = time.time() + 10
    while True:
        after = settled_counts(server)
        if after[0] - before[0] >= expected or time.time() > deadline:
            return after[0] - before[0], after[1] - before[1]


def test_concurrent_clients_under_dynamic_batching(demo):
    server = demo["server"]
    rng = np.random.default_rng(5)
    singles = rng.standard_normal((24, 3, 64, 64)).astype(np.float32)
    expect = np.concatenate([infer_http(server, singles[i:i + 1]) for i in range(len(singles))])
    before = settled_counts(server)
    results, errors = {}, []

    def client(k):
        try:
            own = http.InferenceServerClient(f"127.0.0.1:{server.http_port}")  # tritonclient.http: one per thread
            for j in range(k, len(singles), 8):
                results[j] = infer_http(server, singles[j:j + 1], client=own)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    for _ in range(3):
        run_clients(client)
    assert not errors, errors
    got = np.concatenate([results[j] for j in range(len(singles))])
    np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-6)
    inferences, executions = counts_since(server, before, 3 * len(singles))
    assert inferences == 3 * len(singles)
    assert executions < inferences, f"no request was batched ({executions} executions for {inferences} inferences)"


def test_a_response_that_fails_in_a_batch_leaves_the_others_correct(demo):
    """Requests batched together where some ask for their output in a system shared memory region
    too small for it: those get an error from the server's allocator, and every other request of
    the same executions still gets its own result (a failed response must not shift the outputs
    the later requests of its batch receive)."""
    import tritonclient.utils.shared_memory as shm
    server = demo["server"]
    rng = np.random.default_rng(11)
    singles = rng.standard_normal((16, 3, 64, 64)).astype(np.float32)
    expect = np.concatenate([infer_http(server, singles[i:i + 1]) for i in range(len(singles))])
    key = f"/kiln_small_{os.getpid()}"
    handle = shm.create_shared_memory_region("kiln_small", key, 4)
    server.client.register_system_shared_memory("kiln_small", key, 4)
    results, failed, errors = {}, [], []

    def client(k):
        try:
            own = http.InferenceServerClient(f"127.0.0.1:{server.http_port}")
            for j in range(k, len(singles), 8):
                inp = http.InferInput("image", [1, 3, 64, 64], "FP32")
                inp.set_data_from_numpy(singles[j:j + 1])
                out = http.InferRequestedOutput("scores", binary_data=True)
                if j % 2:  # too small for the 1x10 scores
                    out.set_shared_memory("kiln_small", 4)
                    try:
                        own.infer("demo", [inp], outputs=[out])
                        errors.append(f"request {j} into a 4-byte region succeeded")
                    except Exception:  # noqa: BLE001 (the expected error)
                        failed.append(j)
                else:
                    results[j] = own.infer("demo", [inp], outputs=[out]).as_numpy("scores")
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    try:
        before = settled_counts(server)
        for _ in range(3):
            run_clients(client)
            assert not errors, errors
            for j, got in results.items():
                np.testing.assert_allclose(got, expect[j:j + 1], rtol=1e-5, atol=1e-6,
                                           err_msg=f"request {j} got another request's result")
        assert sorted(set(failed)) == list(range(1, len(singles), 2))
        inferences, executions = counts_since(server, before, 3 * len(singles))
        assert executions < inferences, "no request was batched"
    finally:
        server.client.unregister_system_shared_memory("kiln_small")
        shm.destroy_shared_memory_region(handle)
    np.testing.assert_allclose(infer_http(server, demo["x"]), demo["ref"], rtol=1e-4, atol=1e-5)


def test_bad_requests_get_errors_and_the_server_keeps_serving(demo):
    server = demo["server"]
    x = demo["x"]
    cases = {
        "wrong input name": lambda: infer_http(server, x, name="pixels"),
        "wrong type": lambda: infer_http(server, x.astype(np.float64), dtype="FP64"),
        "wrong shape": lambda: infer_http(server, np.zeros((1, 3, 32, 32), np.float32)),
        "batch above max_batch_size": lambda: infer_http(server, np.zeros((9, 3, 64, 64), np.float32)),
        "unknown model": lambda: infer_http(server, x, model="nosuch"),
        "no inputs": lambda: server.client.infer("demo", []),
    }
    for what, call in cases.items():
        with pytest.raises(Exception) as e:
            call()
        assert str(e.value), what
    url = f"http://127.0.0.1:{server.http_port}/v2/models/demo/infer"
    for body in (b"\x00\xff garbage", b'{"inputs": [{"name": "image", "shape": [1,3,64,64], "datatype": "FP32", "data": [1,2]}]}'):
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        message = e.value.read().decode(errors="replace")
        print(body[:24], e.value.code, message)
        assert e.value.code in (400, 500) and "error" in message, (body, e.value.code, message)
    assert server.client.is_server_live()
    np.testing.assert_allclose(infer_http(server, x), demo["ref"], rtol=1e-4, atol=1e-5)


def test_metrics_count_the_models_inferences(demo):
    server = demo["server"]
    infer_http(server, demo["x"])
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).read().decode()
    lines = [line for line in text.splitlines() if line.startswith("nv_inference_count{") and 'model="demo"' in line]
    assert lines and float(lines[0].split()[-1]) > 0, text[:2000]


def test_explicit_load_unload_reload_without_growing_and_a_contradicting_config(demo):
    tmp = demo["tmp"]
    repo = tmp / "repo2"
    shutil.copytree(demo["repo"], repo)
    (repo / "broken" / "1").mkdir(parents=True)
    shutil.copy(repo / "demo" / "1" / "model.onnx", repo / "broken" / "1" / "model.onnx")
    (repo / "broken" / "config.pbtxt").write_text(CONFIG + 'input [ { name: "image" data_type: TYPE_FP64 dims: [3, 64, 64] } ]\n')
    server = Server(repo, tmp / "server2.log", extra=["--model-control-mode=explicit", "--load-model=demo"])
    try:
        c = server.client
        with pytest.raises(Exception) as e:
            c.load_model("broken")
        assert "TYPE_FP64" in str(e.value) and "float32" in str(e.value), str(e.value)
        np.testing.assert_allclose(infer_http(server, demo["x"]), demo["ref"], rtol=1e-4, atol=1e-5)
        for _ in range(3):  # warm up the allocator's steady state
            c.unload_model("demo")
            c.load_model("demo")
        rss = server.rss_kib()
        cycles = 50  # issue 17: 50 reloads
        for _ in range(cycles):
            c.unload_model("demo")
            c.load_model("demo")
            infer_http(server, demo["x"][:1])
        grown = server.rss_kib() - rss
        print(f"server RSS grew {grown} KiB over {cycles} unload/load cycles")
        assert grown < 40 * 1024, f"{grown} KiB more after {cycles} reloads"
        np.testing.assert_allclose(infer_http(server, demo["x"]), demo["ref"], rtol=1e-4, atol=1e-5)
    finally:
        server.stop()


def test_warmup_runs_every_batch_size_at_load_and_a_bad_value_fails_the_load(demo):
    """parameter warmup "batch_sizes": each instance runs batch sizes 1..max_batch_size when it
    starts (the CUDA default; here on the CPU), and answers correctly afterwards; an unknown value
    fails the load naming the parameter and the allowed values."""
    tmp = demo["tmp"]
    repo = tmp / "repo_warm"
    for name, value in (("warm", "batch_sizes"), ("badwarm", "sometimes")):
        (repo / name / "1").mkdir(parents=True)
        shutil.copy(demo["repo"] / "demo" / "1" / "model.onnx", repo / name / "1" / "model.onnx")
        (repo / name / "config.pbtxt").write_text(
            CONFIG + f'parameters {{ key: "warmup" value {{ string_value: "{value}" }} }}\n')
    server = Server(repo, tmp / "server_warm.log", extra=["--model-control-mode=explicit", "--load-model=warm"])
    try:
        log = (tmp / "server_warm.log").read_text()
        warmed = [ln for ln in log.splitlines() if "model 'warm' instance" in ln and "warmed up" in ln]
        assert len(warmed) == 2, log[-3000:]  # two instances
        assert all("warmed up 8 batch size(s) (1..8)" in ln for ln in warmed), warmed
        np.testing.assert_allclose(infer_http(server, demo["x"], model="warm"), demo["ref"], rtol=1e-4, atol=1e-5)
        with pytest.raises(Exception) as e:
            server.client.load_model("badwarm")
        assert "warmup" in str(e.value) and "sometimes" in str(e.value) and "batch_sizes" in str(e.value), str(e.value)
        np.testing.assert_allclose(infer_http(server, demo["x"], model="warm"), demo["ref"], rtol=1e-4, atol=1e-5)
    finally:
        server.stop()


def test_build_parameters_name_the_cached_engine_and_bad_values_fail_the_load(demo):
    """ONNX models are built with the parameters precision and builder_optimization_level (and
    min_batch / opt_batch / max_batch_size), which name the cached engine: a level-0 build and a
    default one of the same ONNX file are two engines, built as asked. A value outside what a
    parameter accepts fails that model's load with a message naming the parameter, the value and
    what it accepts, and the server keeps serving."""
    kiln = pytest.importorskip("kiln")
    tmp = demo["tmp"]
    repo = tmp / "repo_build"
    models = {
        "level0": {"builder_optimization_level": "0", "min_batch": "2", "opt_batch": "4"},
        "default": {},
        "bad_precision": {"precision": "half"},
        "bad_level": {"builder_optimization_level": "7"},
        "bad_min_batch": {"min_batch": "0"},
        "bad_opt_batch": {"min_batch": "4", "opt_batch": "2"},
        "bad_bool": {"allow_compiled_plans": "yes"},
        "bad_device": {"device": "tpu"},
    }
    for name, params in models.items():
        (repo / name / "1").mkdir(parents=True)
        shutil.copy(demo["repo"] / "demo" / "1" / "model.onnx", repo / name / "1" / "model.onnx")
        (repo / name / "config.pbtxt").write_text(CONFIG + "".join(
            f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n' for k, v in params.items()))
    server = Server(repo, tmp / "server_build.log",
                    extra=["--model-control-mode=explicit", "--load-model=level0", "--load-model=default"])
    try:
        engines = {}
        for name, tag, level in (("level0", "fp32.level0.batch2-4-8", "0"), ("default", "fp32.level3.batch1-8-8", "3")):
            found = list((repo / name / "1").glob("model.onnx.*.kiln"))
            assert len(found) == 1 and found[0].name.endswith(f".cpu.{tag}.kiln"), found
            info = kiln.Runtime().load(str(found[0])).inspect()
            assert info["build_info"]["optimization_level"].startswith(level), info["build_info"]
            engines[name] = info
        assert engines["level0"]["profiles"] != engines["default"]["profiles"]
        np.testing.assert_allclose(infer_http(server, demo["x"][:2], model="level0"), demo["ref"][:2],
                                   rtol=1e-4, atol=1e-5)
        expected = {"bad_precision": ('"half"', '"fp32", "fp16"'), "bad_level": ('"7"', "0..5"),
                    "bad_min_batch": ('"0"', "1..8"), "bad_opt_batch": ('"2"', "4..8"),
                    "bad_bool": ('"yes"', '"true", "false"'), "bad_device": ('"tpu"', '"cpu" or "cuda"')}
        for name, (value, accepted) in expected.items():
            key = next(iter(models[name])) if name != "bad_opt_batch" else "opt_batch"
            with pytest.raises(Exception) as e:
                server.client.load_model(name)
            message = str(e.value)
            assert f"'{name}'" in message and f"parameter '{key}' is {value}" in message and accepted in message, message
        assert server.client.is_server_live()
        np.testing.assert_allclose(infer_http(server, demo["x"], model="default"), demo["ref"], rtol=1e-4, atol=1e-5)
    finally:
        server.stop()


def make_large_input_model(path):
    """A model whose request input is large (one image [3, 256, 256] fp32 = 768 KiB) and whose output
    depends on every input element where it is (a 3x3 convolution keeping the image's size): a chunk
    copied to the wrong place, or not at all, changes the output."""
    from onnx import TensorProto, helper
    rng = np.random.default_rng(3)
    w = rng.standard_normal((3, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["image", "w"], ["out"], pads=[1, 1, 1, 1])], "large_input",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, 256, 256])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 3, 256, 256])],
        [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


LARGE_CONFIG = """backend: "kiln"
max_batch_size: 8
dynamic_batching { max_queue_delay_microseconds: 20000 }
instance_group [ { count: 1, kind: KIND_CPU } ]
parameters { key: "threads" value { string_value: "1" } }
"""


@pytest.fixture(scope="module")
def large(demo):
    """A server (explicit model control) with the large-input model served with
    input_copy_threads 2, and models whose input_copy_threads is not a number of threads."""
    tmp = demo["tmp"]
    repo = tmp / "repo_copy"
    models = {"copy2": "2", "badcopy_word": "many", "badcopy_negative": "-1", "badcopy_huge": "1000"}
    for name, value in models.items():
        (repo / name / "1").mkdir(parents=True)
        make_large_input_model(repo / name / "1" / "model.onnx")
        (repo / name / "config.pbtxt").write_text(
            LARGE_CONFIG + f'parameters {{ key: "input_copy_threads" value {{ string_value: "{value}" }} }}\n')
    log = tmp / "server_copy.log"
    server = Server(repo, log, extra=["--model-control-mode=explicit", "--load-model=copy2"])
    yield {"server": server, "repo": repo, "log": log, "tmp": tmp}
    server.stop()


def kiln_run(engine, x, out_dir):
    kiln = Path(BACKENDS).parent / "kiln"
    if not kiln.exists():
        pytest.skip(f"no kiln command at {kiln}")
    out_dir.mkdir(parents=True, exist_ok=True)
    np.save(out_dir / "image.npy", x)
    r = subprocess.run([str(kiln), "run", "--engine", str(engine), "--input", f"image={out_dir / 'image.npy'}",
                        "--output-dir", str(out_dir)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return np.load(out_dir / "out.npy")


def infer_large(server, x, client=None):
    inp = http.InferInput("image", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    return (client or server.client).infer("copy2", [inp]).as_numpy("out")


def test_input_copy_threads_copy_large_inputs_exactly(large):
    """input_copy_threads 2 on a CPU model: requests of 0.75 to 6 MiB (one request per execution,
    then concurrent requests the dynamic batcher runs together, each request one piece of the
    batch's input) answer exactly what `kiln run` computes on the engine the backend built."""
    server, tmp = large["server"], large["tmp"]
    log = large["log"].read_text()
    assert "model 'copy2' loaded on cpu (max_batch_size 8, 2 input copy thread(s) per instance)" in log, log[-3000:]
    engine = next((large["repo"] / "copy2" / "1").glob("model.onnx.*.kiln"))
    rng = np.random.default_rng(17)
    for batch in (1, 3, 8):  # 0.75, 2.25 and 6 MiB
        x = rng.standard_normal((batch, 3, 256, 256)).astype(np.float32)
        np.testing.assert_array_equal(infer_large(server, x), kiln_run(engine, x, tmp / f"copy_run_{batch}"))
    # Concurrent batch-1 requests, batched by the server: each one's answer is its image's slice of
    # kiln run on all of them (the same engine at another batch size: equal within rounding).
    singles = rng.standard_normal((8, 3, 256, 256)).astype(np.float32)
    expect = kiln_run(engine, singles, tmp / "copy_run_singles")
    results, errors = {}, []

    def client(k):
        try:
            own = http.InferenceServerClient(f"127.0.0.1:{server.http_port}")
            for _ in range(3):
                results[k] = infer_large(server, singles[k:k + 1], client=own)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    run_clients(client, len(singles))
    assert not errors, errors
    np.testing.assert_allclose(np.concatenate([results[k] for k in range(len(singles))]), expect, rtol=1e-5,
                               atol=1e-5)
    # The helpers were offered every copy (each input is over 256 KiB); unloading logs the counts.
    server.client.unload_model("copy2")
    deadline = time.time() + 30
    while "input copies" not in large["log"].read_text() and time.time() < deadline:
        time.sleep(0.2)
    line = next((ln for ln in large["log"].read_text().splitlines() if "input copies" in ln), "")
    print(line)
    assert "model 'copy2' instance" in line and "with 2 input copy thread(s)" in line, line
    jobs, shared = (int(v) for v in re.search(r"(\d+) input copies, (\d+) of them shared", line).groups())
    assert jobs >= 3 + 1 and shared == jobs, line
    # ... and what the instance gathered: every byte of the 3 + 24 requests' 36 images, from at
    # least one buffer per request, in as many executions as copies.
    totals = next((ln for ln in large["log"].read_text().splitlines() if "executions; inputs from host memory" in ln), "")
    print(totals)
    m = re.search(r"instance 'copy2_0_0': (\d+) executions; inputs from host memory: (\d+) bytes in (\d+) buffers "
                  r"\(([\d.]+) per execution\), copied in ([\d.]+) us per execution \(([\d.]+) GB/s\)", totals)
    assert m, totals
    executions, nbytes, buffers = int(m[1]), int(m[2]), int(m[3])
    assert executions == jobs, totals
    assert nbytes == 36 * 3 * 256 * 256 * 4, totals
    assert 27 <= buffers <= nbytes // 4096, totals
    assert float(m[5]) > 0 and float(m[6]) > 0, totals
    server.client.load_model("copy2")
    np.testing.assert_array_equal(infer_large(server, singles[:2]), kiln_run(engine, singles[:2], tmp / "copy_run_2"))


def test_a_bad_input_copy_threads_fails_the_load_and_the_server_keeps_serving(large):
    server = large["server"]
    for name, value in (("badcopy_word", "many"), ("badcopy_negative", "-1"), ("badcopy_huge", "1000")):
        with pytest.raises(Exception) as e:
            server.client.load_model(name)
        message = str(e.value)
        assert "input_copy_threads" in message and f"'{name}'" in message and f'"{value}"' in message, message
        assert "0..64" in message, message
    assert server.client.is_server_live()
    assert server.client.is_model_ready("copy2")
    x = np.random.default_rng(18).standard_normal((2, 3, 256, 256)).astype(np.float32)
    engine = next((large["repo"] / "copy2" / "1").glob("model.onnx.*.kiln"))
    np.testing.assert_array_equal(infer_large(server, x), kiln_run(engine, x, large["tmp"] / "copy_run_bad"))


NGINX_CONF = """worker_processes 1;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log;
events {{ worker_connections 256; }}
http {{
  access_log {prefix}/access.log;
  client_body_temp_path {prefix}/body;
  proxy_temp_path {prefix}/proxy;
  fastcgi_temp_path {prefix}/fastcgi;
  uwsgi_temp_path {prefix}/uwsgi;
  scgi_temp_path {prefix}/scgi;
  upstream triton {{ {servers} }}
  server {{
    listen 127.0.0.1:{port};
    client_max_body_size 64m;
    client_body_buffer_size 64m;  # in memory: nginx's workers may not write into the test's folder
    location / {{
      proxy_pass http://triton; proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_request_buffering off; proxy_buffering off;
    }}
  }}
}}
"""


def test_two_servers_behind_nginx(demo):
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if not nginx:
        pytest.skip("nginx is not installed (apt-get install nginx-light)")
    tmp = demo["tmp"]
    second = Server(demo["repo"], tmp / "server3.log")
    first = demo["server"]
    prefix = tmp / "nginx"
    prefix.mkdir(exist_ok=True)
    (port,) = free_ports(1)
    servers = " ".join(f"server 127.0.0.1:{s.http_port};" for s in (first, second))
    conf = prefix / "nginx.conf"
    conf.write_text(NGINX_CONF.format(prefix=prefix, servers=servers, port=port))
    proc = subprocess.Popen([nginx, "-c", str(conf), "-p", str(prefix)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        client = http.InferenceServerClient(f"127.0.0.1:{port}")
        deadline = time.time() + 30
        while True:
            try:
                if client.is_server_ready():
                    break
            except Exception:  # noqa: BLE001 (nginx not up yet)
                if time.time() > deadline or proc.poll() is not None:
                    raise
            time.sleep(0.2)
        counts = [settled_counts(s)[0] for s in (first, second)]
        for _ in range(20):
            np.testing.assert_allclose(infer_http(first, demo["x"], client=client), demo["ref"], rtol=1e-4, atol=1e-5)
        served = [settled_counts(s)[0] - c for s, c in zip((first, second), counts)]
        assert sum(served) == 20 * len(demo["x"]) and min(served) > 0, f"requests per server: {served}"
        # Triton's own load generator through the balancer (issue 17's scale-out check): it reads the
        # model's configuration through nginx, sends random batch-1 requests from 4 clients at once,
        # and both servers take part.
        perf_analyzer = shutil.which("perf_analyzer")
        if not perf_analyzer:
            pytest.skip("perf_analyzer is not installed (scripts/install_deps.sh installs it)")
        counts = [settled_counts(s)[0] for s in (first, second)]
        csv = tmp / "perf_analyzer.csv"
        r = subprocess.run([perf_analyzer, "-m", "demo", "-u", f"127.0.0.1:{port}", "-i", "http", "--concurrency-range",
                            "4", "-p", "1000", "-s", "100", "--max-trials", "3", "-f", str(csv)],
                           capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, f"perf_analyzer failed ({r.returncode}): {(r.stdout + r.stderr)[-1500:]}"
        head, row = csv.read_text().splitlines()[:2]
        result = dict(zip(head.split(","), row.split(",")))
        assert float(result["Inferences/Second"]) > 0, result
        served = [settled_counts(s)[0] - c for s, c in zip((first, second), counts)]
        assert min(served) > 0, f"perf_analyzer's requests per server behind nginx: {served}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
        second.stop()
