"""The transformer encoder of scripts/make_transformer_encoder.py (embedding Gather, 2 layers of
masked multi-head self-attention, LayerNormalization, GELU, residuals; dynamic batch and
sequence) built by kiln with one profile and run at several sequence lengths and padding masks
against ONNX Runtime. Two variants: opset 17 with Erf GELU and a (1 - mask) * -1e9 bias, and
opset 20 with the Gelu operator and a Where(mask == 0, -inf, 0) bias.
"""
import importlib.util

import numpy as np
import onnx
import pytest

from kiln_tools import REPO, compare, kiln_build, kiln_run, ort_session

MIN, OPT, MAX = (1, 4), (2, 16), (3, 48)  # (batch, sequence) of the profile
SHAPES = [(1, 4), (2, 17), (3, 48), (1, 31)]
VARIANTS = {"erf_large_negative": dict(gelu="erf", mask="large_negative"), "gelu_op_neg_inf": dict(gelu="op",
                                                                                                   mask="neg_inf")}
OUTPUTS = ["last_hidden_state", "pooled"]


def _script():
    spec = importlib.util.spec_from_file_location("make_transformer_encoder",
                                                  REPO / "scripts" / "make_transformer_encoder.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def variant(request, kiln, tmp_path_factory):
    """(model path, engine path, onnxruntime session, script module) of one variant."""
    script = _script()
    folder = tmp_path_factory.mktemp(request.param)
    model_path = folder / "model.onnx"
    onnx.save(script.build(seed=3, **VARIANTS[request.param]), model_path)
    engine = folder / "encoder.kiln"

    def shapes(bs):
        return {"input_ids": list(bs), "attention_mask": list(bs)}

    kiln_build(kiln, model_path, engine, shapes(MIN), shapes(OPT), shapes(MAX), extra=["--threads", "1"])
    return model_path, engine, ort_session(model_path), script


@pytest.mark.parametrize("batch,seq", SHAPES, ids=[f"{b}x{s}" for b, s in SHAPES])
def test_matches_onnxruntime(kiln, variant, tmp_path, batch, seq):
    _, engine, ort, script = variant
    ids, mask = script.random_inputs(np.random.default_rng(seq * 10 + batch), batch, seq)
    feeds = {"input_ids": ids, "attention_mask": mask}
    got = kiln_run(kiln, tmp_path, feeds, OUTPUTS, engine=engine, threads=1)
    want = dict(zip(OUTPUTS, ort.run(OUTPUTS, feeds)))
    for name in OUTPUTS:
        assert not np.isnan(got[name]).any(), f"{name} has NaN"
        err = compare(got[name], want[name])
        assert err is None, f"{name}, batch {batch}, sequence {seq}: {err}"


def test_mask_hides_padding(kiln, variant, tmp_path):
    """Changing the tokens under the mask must not change any unmasked position (checks the mask
    path itself, independently of ONNX Runtime)."""
    _, engine, _, script = variant
    rng = np.random.default_rng(11)
    ids, _ = script.random_inputs(rng, 2, 12)
    mask = np.ones((2, 12), np.int64)
    mask[0, 7:] = 0
    mask[1, 3:] = 0
    other = ids.copy()
    other[mask == 0] = rng.integers(0, 1000, size=int((mask == 0).sum()))
    a = kiln_run(kiln, tmp_path / "a", {"input_ids": ids, "attention_mask": mask}, OUTPUTS, engine=engine, threads=1)
    b = kiln_run(kiln, tmp_path / "b", {"input_ids": other, "attention_mask": mask}, OUTPUTS, engine=engine,
                 threads=1)
    keep = mask.astype(bool)
    assert compare(a["last_hidden_state"][keep], b["last_hidden_state"][keep], tol=(1e-5, 1e-6)) is None
    assert compare(a["pooled"], b["pooled"], tol=(1e-5, 1e-6)) is None
    assert not np.allclose(a["last_hidden_state"][~keep], b["last_hidden_state"][~keep])
