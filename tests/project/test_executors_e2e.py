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
import re
import shutil
import sys
from pathlib import Path

import pytest

from ..helpers import copy_project, run_tracelake
from ..ray_cluster import local_cluster
from .test_pipeline import OUTPUTS, sh, tree_digest

pytestmark = pytest.mark.e2e
SHARDED = (
    "filter",
    "ingest@swesmith",
    "ingest@nl2bash",
    "export_sft@1k",
)  # stages whose heavy work is mapped on the executor


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
    status = run_tracelake(clone, "status")
    assert status.returncode == 0, status.stderr
    runs = status.stdout[status.stdout.index("last runs") :]
    assert re.search(r"filter\s.*ray \(Ray cluster: 3 nodes, 2 CPUs\)\s.*\s[1-9]", runs), runs


def shard_log(path: Path) -> tuple[dict[int, list[str]], set[int]]:
    """(shard -> the nodes each execution started on, the shards that finished) from a shard log."""
    starts: dict[int, list[str]] = {}
    done: set[int] = set()
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        if entry["event"] == "start":
            starts.setdefault(entry["shard"], []).append(entry["node"])
        else:
            done.add(entry["shard"])
    return starts, done


def test_a_worker_node_killed_mid_filter_changes_no_byte(tmp_path):
    """The filter's token counting on a Ray cluster of three one-CPU worker nodes; one node is killed
    while shards run on it. Ray runs the lost shards again on the others and the stage completes:
    its output is byte-identical to a local run, every shard finished, and the only shards that ran
    more than once are shards that had started on the killed node (TRACELAKE_SHARD_LOG counts every
    execution)."""
    import subprocess
    import time

    repo = copy_project(tmp_path / "kill", trials=1200, tasks=60)
    sh(["dvc", "repro", "dedup", "tokenizer"], repo)  # the filter's inputs, on the default executor
    sh(["python", "-m", "stages", "filter", "--executor", "local"], repo)
    expected = tree_digest(repo / "lake" / "pool")
    shutil.rmtree(repo / ".tracelake" / "cache" / "tokens")  # so that every shard counts again
    log = tmp_path / "shards.jsonl"
    with local_cluster(workers=2) as cluster:
        victim = cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        env = dict(os.environ, RAY_ADDRESS=cluster.address, TRACELAKE_SHARD_LOG=str(log))
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "stages", "filter", "--executor", "ray"],
            cwd=repo,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            starts, done = shard_log(log) if log.exists() else ({}, set())
            if len(done) >= 2 and any(victim.node_id in nodes for nodes in starts.values()):
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the stage ended before a node could be killed mid-stage"
        cluster.remove_node(victim, allow_graceful=False)
        out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert tree_digest(repo / "lake" / "pool") == expected
    starts, done = shard_log(log)
    assert done == set(starts) and len(done) >= 6, (starts, done)
    again = {shard: nodes for shard, nodes in starts.items() if len(nodes) > 1}
    assert all(victim.node_id in nodes for nodes in again.values()), again
    print(f"\n{len(done)} shards; ran again after the node was killed: {sorted(again)}")
