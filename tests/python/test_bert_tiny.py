"""bert_tiny (the shared exporter model: int64 input_ids and attention_mask [N, S], output
last_hidden_state [N, S, 128]) through one kiln engine built with a dynamic profile (batch 1..4,
sequence 8..64), run at several batch sizes and sequence lengths with random tokens and padding
masks and compared with ONNX Runtime on the same model; plus the shipped PyTorch reference at
sequence 16, and the error for a shape outside the profile.

Skipped when the model is absent ($KILN_TEST_MODELS_DIR, else ../shared/models, as in
tests/models_test.cpp).
"""
import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from kiln_tools import KilnError, compare, kiln_build, kiln_run, models_dir, ort_session

VOCAB = 1000  # rows of the word-embedding table
MIN, OPT, MAX = (1, 8), (2, 32), (4, 64)  # (batch, sequence) of the profile
SHAPES = [(1, 8), (2, 16), (3, 33), (4, 64), (1, 64), (4, 8)]


@pytest.fixture(scope="module")
def model_path():
    path = models_dir() / "bert_tiny" / "model.onnx"
    if not path.is_file():
        pytest.skip(f"{path} is absent (set KILN_TEST_MODELS_DIR to the test models folder)")
    return path


@pytest.fixture(scope="module")
def engine(kiln, model_path, tmp_path_factory):
    path = tmp_path_factory.mktemp("bert_tiny") / "bert_tiny.kiln"

    def shapes(bs):
        return {"input_ids": list(bs), "attention_mask": list(bs)}

    kiln_build(kiln, model_path, path, shapes(MIN), shapes(OPT), shapes(MAX), extra=["--threads", "1"])
    return path


@pytest.fixture(scope="module")
def ort(model_path):
    return ort_session(model_path)


def _inputs(rng, batch, seq):
    ids = rng.integers(0, VOCAB, size=(batch, seq), dtype=np.int64)
    lengths = rng.integers(1, seq + 1, size=batch)
    lengths[0] = seq  # one row without padding
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)
    return {"input_ids": ids, "attention_mask": mask}


@pytest.mark.parametrize("batch,seq", SHAPES, ids=[f"{b}x{s}" for b, s in SHAPES])
def test_matches_onnxruntime(kiln, engine, ort, tmp_path, batch, seq):
    feeds = _inputs(np.random.default_rng(batch * 100 + seq), batch, seq)
    got = kiln_run(kiln, tmp_path, feeds, ["last_hidden_state"], engine=engine, threads=1)["last_hidden_state"]
    want = ort.run(["last_hidden_state"], feeds)[0]
    assert got.shape == (batch, seq, 128)
    err = compare(got, want)
    assert err is None, f"batch {batch}, sequence {seq}: {err}"


def test_shipped_reference(kiln, engine, model_path, tmp_path):
    """test_data_set_0 (batch 2, sequence 16; PyTorch fp32): max relative error ~1e-4 (README)."""
    data = model_path.parent / "test_data_set_0"
    feeds = {}
    for i, name in enumerate(["input_ids", "attention_mask"]):
        feeds[name] = numpy_helper.to_array(onnx.load_tensor(str(data / f"input_{i}.pb")))
    want = numpy_helper.to_array(onnx.load_tensor(str(data / "output_0.pb")))
    got = kiln_run(kiln, tmp_path, feeds, ["last_hidden_state"], engine=engine, threads=1)["last_hidden_state"]
    assert got.shape == want.shape == (2, 16, 128)
    rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-3)
    assert float(rel.max()) < 2e-3, f"max relative error {rel.max():.3e}"
    assert compare(got, want) is None


@pytest.mark.parametrize("batch,seq", [(1, 65), (2, 4), (5, 16)], ids=["seq65", "seq4", "batch5"])
def test_outside_profile_is_a_clear_error(kiln, engine, tmp_path, batch, seq):
    feeds = _inputs(np.random.default_rng(0), batch, seq)
    with pytest.raises(KilnError) as info:
        kiln_run(kiln, tmp_path, feeds, ["last_hidden_state"], engine=engine, threads=1)
    e = info.value
    assert e.returncode == 1, e.message
    # e.g. kiln: error: input 'input_ids': dims 1x65 are outside optimization profile 0 (min 1x8, max 4x64); ...
    msg = e.message.splitlines()[0]
    assert msg.startswith(("kiln: error: input 'input_ids'", "kiln: error: input 'attention_mask'")), msg
    assert f"{batch}x{seq}" in msg and "outside" in msg and "profile" in msg, msg
    assert f"min {MIN[0]}x{MIN[1]}" in msg and f"max {MAX[0]}x{MAX[1]}" in msg, msg
