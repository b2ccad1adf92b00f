"""Session fixtures shared by test modules."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from .helpers import ROOT, copy_project, qwen3_tokenizer, run_ok, train_python

# Cache compiled modules (in the git-ignored __pycache__ directories) even where PYTHONDONTWRITEBYTECODE
# is set: without it every test run, and every stage or CLI process a test starts, compiles tracelake
# and the test modules from source again (measured: collection 8.9 s -> 2.4 s, a stage's start-up
# 0.36 s -> 0.22 s).
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


@pytest.fixture(scope="session")
def sample_project(tmp_path_factory) -> Path:
    """A small copy of the project with the whole pipeline built by `dvc repro` (read-only for tests:
    copy it before changing anything)."""
    repo = copy_project(tmp_path_factory.mktemp("project"))
    run_ok(["dvc", "repro"], repo)
    return repo


@pytest.fixture(scope="session")
def tiny_model(sample_project, tmp_path_factory) -> Path:
    """A tiny random Qwen3 with the sample project's tokenizer, built in the training environment
    (tests/train_env/tiny_qwen3.py)."""
    out = tmp_path_factory.mktemp("tiny-qwen3")
    run_ok(
        [
            str(train_python()),
            str(ROOT / "tests" / "train_env" / "tiny_qwen3.py"),
            str(sample_project / "data" / "tokenizer"),
            str(out),
        ],
        sample_project,
    )
    return out


@pytest.fixture(scope="session")
def qwen3_tiny_model(tmp_path_factory) -> Path:
    """A tiny random Qwen3 over Qwen3's real tokenizer (read from ../shared/fixtures/qwen3-tokenizer;
    skips where it is absent), built in the training environment (tests/train_env/tiny_qwen3.py): the
    model LLaMA-Factory loads where a test stands for the trained model and its tokenizer."""
    tokenizer = qwen3_tokenizer()
    out = tmp_path_factory.mktemp("tiny-qwen3-real-tokenizer")
    run_ok([str(train_python()), str(ROOT / "tests" / "train_env" / "tiny_qwen3.py"), str(tokenizer), str(out)], out)
    return out


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
