"""The codebase stays lint-clean and type-clean: ruff and mypy run as part of the suite."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from .conftest import ROOT


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is not installed (dev extra)")
def test_ruff_is_clean() -> None:
    result = _run("ruff", "check", "src", "tests", "benchmarks", "dev")
    assert result.returncode == 0, result.stdout + result.stderr
    result = _run("ruff", "format", "--check", "src", "tests", "benchmarks", "dev")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean() -> None:
    pytest.importorskip("mypy")
    result = _run(sys.executable, "-m", "mypy")
    assert result.returncode == 0, result.stdout + result.stderr
