"""End to end: the whole `dvc repro` on each executor gives the same bytes.

A project is built with `executor: local` (one process) and committed. A fresh clone is then built
with `processes` (this machine's cores) and another on a real Ray cluster on this machine (a head
node and two worker nodes of one CPU each, joined through RAY_ADDRESS as a lab's cluster would be).
Every output and dvc.lock must be byte-identical to the local build, and the run records must show
that the heavy stages really ran their shards on that executor.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ..helpers import copy_project
from ..ray_cluster import local_cluster
from .test_pipeline import OUTPUTS, sh, tree_digest

pytestmark = pytest.mark.e2e
SHARDED = ("filter",)  # stages whose heavy work is mapped on the executor


def repro(repo: Path, kind: str, **env: str) -> str:
    saved = dict(os.environ)
    os.environ.update(TRACELAKE_EXECUTOR=kind, **env)
    try:
        return sh(["dvc", "repro"], repo)
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="module")
def local_build(tmp_path_factory) -> Path:
    repo = copy_project(tmp_path_factory.mktemp("executors") / "local")
    repro(repo, "local")
    sh(["git", "add", "-A"], repo)
    sh(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "built on local"], repo)
    return repo


def clone_and_build(local_build: Path, dest: Path, kind: str, **env: str) -> Path:
    sh(["git", "clone", "-q", str(local_build), str(dest)], dest.parent)
    out = repro(dest, kind, **env)
    assert "Running stage 'filter'" in out, out
    return dest


def assert_same_bytes(local_build: Path, other: Path, kind: str) -> None:
    assert tree_digest(*(other / d for d in OUTPUTS)) == tree_digest(*(local_build / d for d in OUTPUTS))
    assert (other / "dvc.lock").read_bytes() == (local_build / "dvc.lock").read_bytes()
    assert sh(["git", "status", "--porcelain"], other).strip() == ""
    for stage in SHARDED:
        record = json.loads((other / ".tracelake" / "runs" / f"{stage}.json").read_text())
        assert record["executor"] == kind and record["shards"] > 0, record


def test_processes_build_the_same_bytes_as_local(local_build, tmp_path):
    clone = clone_and_build(local_build, tmp_path / "processes", "processes")
    assert_same_bytes(local_build, clone, "processes")


def test_a_ray_cluster_builds_the_same_bytes_as_local(local_build, tmp_path):
    with local_cluster(workers=2) as cluster:
        clone = clone_and_build(local_build, tmp_path / "ray", "ray", RAY_ADDRESS=cluster.address)
    assert_same_bytes(local_build, clone, "ray")
    record = json.loads((clone / ".tracelake" / "runs" / "filter.json").read_text())
    assert "Ray cluster: 3 nodes, 2 CPUs" in record["where"], record
