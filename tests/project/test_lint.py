"""ruff's checks (pyproject.toml [tool.ruff.lint]) pass and `ruff format` has nothing to change, on the
whole project: part of the test command, so CI runs them too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.is_file():
        pytest.fail("ruff is not installed in this environment: `uv sync` installs the dev group")
    return subprocess.run([str(ruff), *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_check_passes() -> None:
    proc = _ruff("check", "--no-cache", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format_has_nothing_to_change() -> None:
    proc = _ruff("format", "--check", "--no-cache", ".")
    assert proc.returncode == 0, "run `uv run ruff format .`:\n" + proc.stdout + proc.stderr
