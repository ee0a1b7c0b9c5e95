#!/usr/bin/env python3
"""ctest entry point of a Python suite: runs pytest on the given test file and arguments, or exits
77 (ctest's SKIP_RETURN_CODE) with a message when pytest, numpy, onnx or onnxruntime cannot be
imported, or when every test of the suite skipped itself (say, the test models are absent).

Usage: run_suite.py tests/python/test_X.py [pytest arguments, e.g. --kiln build/kiln]
"""
import importlib
import sys

SKIP = 77


class _Outcomes:
    """Counts test outcomes, to turn 'everything skipped' into ctest's skip code."""

    def __init__(self):
        self.ran = 0
        self.skipped = 0
        self.reasons = set()

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            if report.skipped:
                self.skipped += 1
                if isinstance(report.longrepr, tuple):
                    self.reasons.add(report.longrepr[2])
            else:
                self.ran += 1


def main(argv):
    missing = []
    for module in ("pytest", "numpy", "onnx", "onnxruntime"):
        try:
            importlib.import_module(module)
        except Exception as e:  # ImportError, or a broken install
            missing.append(f"{module} ({type(e).__name__}: {e})")
    if missing:
        print(f"SKIPPED {argv[0] if argv else ''}: cannot import {', '.join(missing)}; "
              "install them with scripts/install_deps.sh (python3 -m pip install pytest onnx onnxruntime numpy)")
        return SKIP
    import pytest

    outcomes = _Outcomes()
    code = pytest.main(["-q", "-rfEsxX", "-p", "no:cacheprovider"] + argv, plugins=[outcomes])
    if code == 0 and outcomes.ran == 0 and outcomes.skipped > 0:
        print("SKIPPED: every test skipped itself: " + "; ".join(sorted(outcomes.reasons)))
        return SKIP
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
