"""Session fixtures shared by test modules."""

from __future__ import annotations

import os
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


def pytest_collection_modifyitems(items) -> None:
    """Every test that needs the built sample pipeline (directly or through another fixture) is an
    end-to-end test: `-m "not e2e"` leaves it out of the fast loop. A `long` test (the long
    variants of the fuzz, kill and concurrency tests) is skipped unless TRACELAKE_LONG=1."""
    long_skip = pytest.mark.skip(reason="a long variant: set TRACELAKE_LONG=1 to run it")
    for item in items:
        if "sample_project" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.e2e)
        if "long" in item.keywords and os.environ.get("TRACELAKE_LONG") != "1":
            item.add_marker(long_skip)
