"""The RL export's task table becomes Harbor task directories when a run needs them
(export/task_dirs.py): once per dataset, whole or not at all, and two runs starting together take
turns instead of replacing each other's directory."""

from __future__ import annotations

import multiprocessing
import shutil
from pathlib import Path

import pytest

from tracelake.core.errors import BadInput
from tracelake.core.outputs import read_manifest
from tracelake.export.task_dirs import extracted, materialize, task_paths


def _materialize(export: str, dest: str, queue) -> None:
    export_dir = Path(export)
    queue.put(materialize(export_dir, read_manifest(export_dir), Path(dest)))


def test_two_runs_starting_together_extract_once(sample_project, tmp_path):
    export = sample_project / "lake" / "exports" / "rl"
    dest = tmp_path / "runs" / "rl-x" / "harbor"
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_materialize, args=(str(export), str(dest), queue)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    results = sorted(queue.get(timeout=5) for _ in procs)
    count = read_manifest(export)["counts"]["task_dirs"]["count"]
    assert results == [(count, False), (count, True)]  # one extracted, the other found it there
    assert extracted(dest, task_paths(export, read_manifest(export)))
    assert sorted(p.name for p in dest.parent.iterdir()) == [".harbor.lock", "harbor"]  # no temporary left


def test_a_directory_that_differs_is_rebuilt_and_a_short_table_refused(sample_project, tmp_path):
    export = sample_project / "lake" / "exports" / "rl"
    manifest = read_manifest(export)
    dest = tmp_path / "harbor"
    count, _ = materialize(export, manifest, dest)
    victim = sorted(dest.iterdir())[0]
    shutil.rmtree(victim)  # a task directory lost: extracted again, whole
    assert materialize(export, manifest, dest) == (count, True) and (victim / "instruction.md").is_file()
    wrong = {**manifest, "counts": {**manifest["counts"], "task_dirs": {"table": "tasks/", "count": count + 1}}}
    with pytest.raises(BadInput, match=f"the task table holds {count} tasks, its manifest says {count + 1}"):
        materialize(export, wrong, tmp_path / "other")
