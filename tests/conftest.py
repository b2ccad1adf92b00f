"""Session fixtures shared by test modules."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import copy_project, run_ok


@pytest.fixture(scope="session")
def sample_project(tmp_path_factory) -> Path:
    """A small copy of the project with the whole pipeline built by `dvc repro` (read-only for tests:
    copy it before changing anything)."""
    repo = copy_project(tmp_path_factory.mktemp("project"))
    run_ok(["dvc", "repro"], repo)
    return repo
