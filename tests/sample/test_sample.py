"""The embedded sample through every ingest: rejects are exactly the faults the generator injected.

The generator records each fault it writes (synth_manifest.json); ingest must reject precisely
those inputs with precisely those reasons, and keep everything else.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tracelake.core.tables import read_table
from tracelake.ingest.harbor import ingest_harbor
from tracelake.ingest.tasks import ingest_tasks
from tracelake.ingest.traces import ingest_traces
from tracelake.sample.synth import DEFAULT_SOURCES, synthesize


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sample") / "data"
    synthesize(out, seed=7, trials=400, tasks=60)  # every harbor source gets >= 50 trials: all faults
    return out


def trial_of(path: str, reason: str) -> str:
    """The trial a fault or reject is about. A duplicate is known by its trial name only: which
    copy is "the duplicate" depends on order (ingest keeps the first in path order)."""
    trial = path.split("/agent/")[0].removesuffix("/result.json")
    return trial.rsplit("/", 1)[-1] if reason == "duplicate_trial" else trial


@pytest.mark.parametrize("spec", DEFAULT_SOURCES, ids=lambda s: s.name)
def test_rejects_are_exactly_the_injected_faults(sample, spec, tmp_path):
    manifest = json.loads((sample / "synth_manifest.json").read_text())
    faults = [f for f in manifest["faults"] if f["source"] == spec.name]
    assert faults, "the generator injected no fault in this source"
    out = tmp_path / "lake"
    if spec.format == "harbor":
        jobs = sample / spec.name / "jobs"
        result = ingest_harbor(jobs, source=spec.name, out_dir=out)
        prefix = f"{spec.name}/jobs/"
        expected = {(trial_of(f["path"][len(prefix) :], f["fault"]), f["fault"]) for f in faults}
        rejects = read_table(out, "rejects").to_pylist()
        got = {(trial_of(r["path"], r["reason"]), r["reason"]) for r in rejects}
    else:
        result = ingest_traces([sample / spec.name / "traces.jsonl"], source=spec.name, out_dir=out)
        expected = {(f["line"] - 1, f["fault"]) for f in faults}
        rejects = read_table(out, "rejects").to_pylist()
        got = {(r["row_index"], r["reason"]) for r in rejects}
    assert got == expected
    assert result.inputs == result.rows + result.rejects
    rows = read_table(out, "trajectories")
    assert rows.num_rows == result.rows > 0
    assert len(set(rows.column("trajectory_id").to_pylist())) == rows.num_rows


def test_sample_tasks_all_ingest_and_join(sample, tmp_path):
    for spec in DEFAULT_SOURCES:
        tasks = ingest_tasks(sample / spec.name / "tasks", source=spec.name, out_dir=tmp_path / spec.name / "t")
        assert tasks.rejects == 0 and tasks.rows > 0
        task_ids = set(read_table(tmp_path / spec.name / "t", "tasks").column("task_id").to_pylist())
        if spec.format == "harbor":
            ingest_harbor(sample / spec.name / "jobs", source=spec.name, out_dir=tmp_path / spec.name / "j")
        else:
            ingest_traces([sample / spec.name / "traces.jsonl"], source=spec.name, out_dir=tmp_path / spec.name / "j")
        traj_tasks = Counter(read_table(tmp_path / spec.name / "j", "trajectories").column("task_id").to_pylist())
        assert set(traj_tasks) <= task_ids  # every trajectory joins a task of its source
