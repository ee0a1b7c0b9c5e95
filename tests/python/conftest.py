"""pytest configuration of kiln's Python suites: the options naming the kiln program and the
differential test's seed/count, and the `kiln` fixture (skips the suite when kiln is not built)."""
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kiln_tools import find_kiln  # noqa: E402


def pytest_addoption(parser):
    group = parser.getgroup("kiln")
    group.addoption("--kiln", default=None, help="the kiln program (default: $KILN_CLI, else build/kiln)")
    group.addoption("--diff-seed", type=int, default=None, help="differential test seed (default $KILN_DIFF_SEED or 1)")
    group.addoption("--diff-count", type=int, default=None,
                    help="differential test case count (default $KILN_DIFF_COUNT or 400)")
    group.addoption("--diff-ops", default=None, help="comma-separated ops to draw (default $KILN_DIFF_OPS or all)")


@pytest.fixture(scope="session")
def kiln(request):
    path = request.config.getoption("--kiln") or find_kiln()
    if not path or not os.access(path, os.X_OK):
        pytest.skip("the kiln program was not found: pass --kiln PATH or set KILN_CLI")
    return path


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Lines the suites leave in config.kiln_summary (the differential test's case counts)."""
    for line in getattr(config, "kiln_summary", []):
        terminalreporter.write_line(line)
