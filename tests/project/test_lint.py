"""ruff's checks (pyproject.toml [tool.ruff.lint]) pass on the whole project: part of the test command,
so CI runs them too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_check_passes() -> None:
    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.is_file():
        pytest.fail("ruff is not installed in this environment: `uv sync` installs the dev group")
    proc = subprocess.run([str(ruff), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
