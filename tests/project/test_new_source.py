"""A source added to params.yaml is built by `dvc repro` alone: dvc.yaml's ingest stage iterates
params.yaml's `sources` (`foreach: ${sources}`, its dep the source's manifest that `scan` writes,
.tracelake/scan/${key}.json), so no other file is rewritten first. On a built copy of the sample
project, two sources are added (a Harbor one with task directories, and a trace table whose tasks
are derived from its traces); one `dvc repro` ingests them, the pool takes them in, and git and DVC
are clean once it is committed (nothing runs but the stages DVC runs every time, which change
nothing). An edit under a new source's inputs reruns its ingest, and only its. A source without
`tasks` stops the run with the params check's one line, naming the fix."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tracelake.core.freshness import pipeline_freshness
from tracelake.core.outputs import read_manifest
from tracelake.core.tables import read_table

from ..helpers import always_run, ran, run_ok

pytestmark = pytest.mark.e2e  # builds on the sample project's `dvc repro`

HARBOR = "data/extra/mirror"  # a copy of the tezos source's job and task directories
TRACES = "data/extra/derived/traces.jsonl"  # a copy of nl2bash's trace table, without task directories
NEW = {
    "mirror": {"format": "harbor", "path": f"{HARBOR}/jobs", "tasks": f"{HARBOR}/tasks"},
    "derived": {"format": "traces", "path": TRACES, "tasks": TRACES},  # tasks derived from the traces
}
# what a `dvc repro` may change in git: the params, the lock and the uncached outputs kept in git
COMMITTED = ("params.yaml", "dvc.lock", "metrics/", "reports/", "training/configs/")


def git(repo: Path, *args: str) -> str:
    return run_ok(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], repo)


def changed(repo: Path) -> list[str]:
    return [line[3:] for line in git(repo, "status", "--porcelain", "--untracked-files=all").splitlines()]


@pytest.fixture(scope="module")
def grown(sample_project, tmp_path_factory) -> tuple[Path, str, bytes]:
    """The built sample project, committed, then two sources added to params.yaml and `dvc repro`."""
    repo = tmp_path_factory.mktemp("new-source") / "repo"
    shutil.copytree(sample_project, repo, symlinks=True)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the sample, built")
    dvc_yaml = (repo / "dvc.yaml").read_bytes()
    for part in ("jobs", "tasks"):
        shutil.copytree(repo / "data/sample/tezos" / part, repo / HARBOR / part)
    (repo / TRACES).parent.mkdir(parents=True)
    shutil.copy(repo / "data/sample/nl2bash/traces.jsonl", repo / TRACES)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["sources"].update(NEW)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return repo, run_ok(["dvc", "repro"], repo), dvc_yaml


def test_one_dvc_repro_ingests_the_new_sources(grown):
    repo, out, dvc_yaml = grown
    assert (repo / "dvc.yaml").read_bytes() == dvc_yaml  # nothing rewrote it
    stages = ran(out)
    assert sorted(s for s in stages if s.startswith("ingest@")) == ["ingest@derived", "ingest@mirror"], out
    assert {"score", "dedup", "filter", "export_rl"} <= set(stages), out
    for name in NEW:
        for table in ("trajectories", "tasks"):
            m = read_manifest(repo / "lake" / table / name)
            assert m["counts"]["rows"] > 0 and m["counts"]["source"] == name
        assert json.loads((repo / "metrics/ingest" / f"{name}.json").read_text())["tasks"]["rows"] > 0
    assert "ingest derived tasks derived from the traces (derived_task_v2)" in out
    tasks = read_table(repo / "lake/tasks/derived", "tasks").to_pylist()
    assert tasks and all(t["derived_from"] and t["task_binary"] is None for t in tasks)


def test_the_pool_takes_them_in(grown):
    repo, _, _ = grown
    pool = read_manifest(repo / "lake/pool")
    assert set(NEW) <= set(pool["inputs"]["trajectories"])
    kept = {r["source"] for r in read_table(repo / "lake/pool", "pool").select(["source"]).to_pylist()}
    assert set(NEW) <= kept
    funnel = json.loads((repo / "metrics/filter.json").read_text())["sources"]
    for name in NEW:
        rows = read_manifest(repo / "lake/trajectories" / name)["counts"]["rows"]
        assert funnel[name]["in"] == rows and funnel[name]["kept"] > 0


def test_git_and_dvc_are_clean_once_committed(grown):
    repo, _, _ = grown
    # the lake and the inputs are ignored: what changed is what a pipeline run commits
    assert all(path.startswith(COMMITTED) for path in changed(repo)), changed(repo)
    assert {"metrics/ingest/mirror.json", "metrics/ingest/derived.json"} <= set(changed(repo))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "two sources")
    assert ran(run_ok(["dvc", "repro"], repo), always=True) == always_run()
    status = run_ok(["dvc", "status"], repo)  # DVC names the stages it runs every time, and no other
    assert {line.rstrip(":") for line in status.splitlines() if line and not line[0].isspace()} == set(always_run())
    fresh = pipeline_freshness(repo)
    assert fresh.checked and fresh.changed == {}, fresh.why
    assert changed(repo) == []


def test_a_new_source_without_tasks_is_named_with_its_fix(grown):
    repo, _, _ = grown
    before = (repo / "params.yaml").read_text()
    params = yaml.safe_load(before)
    del params["sources"]["derived"]["tasks"]
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        # scan reads `sources` first: the params check's line names the key and the fix
        dvc = subprocess.run(["dvc", "repro"], cwd=repo, capture_output=True, text=True)
        assert dvc.returncode != 0
        assert (
            "tracelake: params.yaml: sources.derived.tasks: required: its task directories or (path, "
            "task_binary) table, or, when its tasks are derived from its traces, the traces' own path "
            f"(tasks: {TRACES})"
        ) in dvc.stdout + dvc.stderr
        check = subprocess.run([sys.executable, "-m", "stages", "check"], cwd=repo, capture_output=True, text=True)
        assert check.returncode == 2 and check.stderr.strip() == (
            "tracelake: params.yaml: sources.derived.tasks: required: its task directories or (path, task_binary) "
            f"table, or, when its tasks are derived from its traces, the traces' own path (tasks: {TRACES})"
        )
    finally:
        (repo / "params.yaml").write_text(before)


def test_an_edit_under_a_new_source_reruns_its_ingest(grown):
    repo, _, _ = grown
    inputs = {n: read_manifest(repo / "lake/trajectories" / n)["counts"]["inputs"] for n in NEW}
    lines = (repo / TRACES).read_text().splitlines(keepends=True)
    (repo / TRACES).write_text("".join(lines[:-1]))  # one trace row less
    job = next(p for p in sorted((repo / HARBOR / "jobs").iterdir()) if p.is_dir())
    shutil.rmtree(next(p for p in sorted(job.iterdir()) if p.is_dir()))  # one trial (its traces) less
    fresh = pipeline_freshness(repo)  # what `tracelake status` shows: the scan asked in DVC's place
    assert {s for s in fresh.changed if s.startswith("ingest@")} == {"ingest@mirror", "ingest@derived"}, fresh
    assert fresh.changed["ingest@mirror"] == ["changed inputs"]
    out = run_ok(["dvc", "repro", "ingest@mirror", "ingest@derived"], repo)
    assert ran(out) == ["ingest@derived", "ingest@mirror"], out
    for name in NEW:
        assert read_manifest(repo / "lake/trajectories" / name)["counts"]["inputs"] < inputs[name]  # read again
