"""Differential test: random one-node ONNX models run by kiln (CPU, through `kiln run`) and by ONNX
Runtime, outputs compared with per-type tolerances (diff_cases.py has the machinery, diff_ops_*.py
the per-operator generators).

The seed and the case count come from --diff-seed/--diff-count or $KILN_DIFF_SEED/$KILN_DIFF_COUNT
(defaults 1 and 400, a few seconds of kiln per hundred cases); --diff-ops/$KILN_DIFF_OPS limits
the operators. A long run: KILN_DIFF_COUNT=5000 KILN_DIFF_SEED=$RANDOM pytest tests/python/test_differential.py
Every reduced mismatch lives in diff_regressions.json and runs every time.
"""
import os
import re
from pathlib import Path

import pytest

from diff_cases import OP_TABLE, generate, load_regressions, run_cases, summarize
from diff_spec import describe

FAILING = ("mismatch", "kiln_error", "invalid")


def _setting(request, option, env, default, kind=int):
    value = request.config.getoption(option)
    if value is None:
        value = os.environ.get(env)
    return default if value in (None, "") else kind(value)


@pytest.fixture(scope="module")
def random_results(request, kiln):
    seed = _setting(request, "--diff-seed", "KILN_DIFF_SEED", 1)
    count = _setting(request, "--diff-count", "KILN_DIFF_COUNT", 400)
    ops = _setting(request, "--diff-ops", "KILN_DIFF_OPS", "", str)
    ops = [o for o in ops.split(",") if o] or None
    results = run_cases(generate(seed, count, ops), kiln, jobs=int(os.environ.get("KILN_DIFF_JOBS", "2")))
    request.config.kiln_summary = getattr(request.config, "kiln_summary", []) + [
        f"differential test, seed {seed}, {count} cases: {summarize(results)}"]
    return results


@pytest.fixture(scope="module")
def regression_results(kiln):
    entries = load_regressions()
    return dict(zip([e["id"] for e in entries], run_cases([e["spec"] for e in entries], kiln)))


def _report(results):
    return "\n".join(r.line() for r in results)


def test_generator_covers_documented_ops():
    """At least 60 operators, each one kiln documents as imported."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "onnx-support.md").read_text()
    documented = set(re.findall(r"^\| (\w+) \| ai\.onnx \|", doc, re.MULTILINE))
    assert len(OP_TABLE) >= 60
    assert sorted(set(OP_TABLE) - documented) == []


@pytest.mark.parametrize("op", sorted(OP_TABLE))
def test_random_cases(op, random_results):
    mine = [r for r in random_results if r.spec["op"] == op]
    if not mine:
        pytest.skip(f"no {op} case among the drawn cases (raise the count)")
    bad = [r for r in mine if r.status in FAILING]
    assert not bad, f"{len(bad)} of {len(mine)} {op} case(s) failed:\n{_report(bad)}"
    known = [r for r in mine if r.status == "known_issue"]
    if known:
        pytest.xfail(f"{len(known)} {op} case(s) hit known issues:\n{_report(known)}")


def _regression_params():
    params = []
    for e in load_regressions():
        marks = [pytest.mark.xfail(strict=True, reason=e["issue"])] if e.get("open") else []
        params.append(pytest.param(e["id"], id=e["id"], marks=marks))
    return params


@pytest.mark.parametrize("case_id", _regression_params())
def test_regression(case_id, regression_results):
    """The reduced cases of past mismatches; open ones are strict xfails, so a fix shows up as a
    failure that asks to drop the `open` flag."""
    r = regression_results[case_id]
    assert r.status in ("pass", "unsupported"), f"{describe(r.spec)}: [{r.status}] {r.detail}"


def test_summary(random_results):
    """No case may be drawn that the ONNX checker rejects, and references must mostly exist."""
    invalid = [r for r in random_results if r.status == "invalid"]
    assert not invalid, _report(invalid)
    no_ref = [r for r in random_results if r.status == "no_reference"]
    assert len(no_ref) <= max(5, len(random_results) // 20), _report(no_ref)

