"""A source that is only a trace table (the OpenThoughts-Agent SFT sets come without task
directories) through `dvc repro` to the SFT and RL exports, on the real rows in
../shared/fixtures/otagent: its `tasks:` names the trace table itself, so the tasks are derived from
the traces; they are scored, selected and exported; their RL prompts have no task table row."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tracelake.core.errors import BadParams
from tracelake.core.ids import base_task_name, task_id_for
from tracelake.core.lake import Lake
from tracelake.core.outputs import read_manifest
from tracelake.core.tables import read_table
from tracelake.ingest.derived_tasks import DERIVE_RULE
from tracelake.params import load_params

from ..helpers import FIXTURES, copy_project, need, run_ok
from .test_export_rl import (  # SkyRL's own PromptDataset, in each trainer's environment
    TRAINERS,
    skyrl_load,
)

pytestmark = pytest.mark.e2e  # builds a project with `dvc repro`
TRACES = "data/otagent/sample_raw.json"
SCALE = "316"


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> tuple[Path, str]:
    """The project with one source, the real OpenThoughts-Agent rows, built to both exports."""
    sample = need(FIXTURES / "otagent" / "sample_raw.json")
    repo = copy_project(tmp_path_factory.mktemp("trace-only"))
    (repo / TRACES).parent.mkdir(parents=True)
    shutil.copy(sample, repo / TRACES)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["sources"] = {"otagent": {"format": "traces", "path": TRACES, "tasks": TRACES}}  # no task directories
    params["scales"] = {SCALE: int(SCALE)}
    # the real traces are long in the project's 4K-vocabulary tokenizer: keep every main trace
    params["filter"]["max_tokens"] = params["train"]["sft"]["cutoff_len"] = 400_000
    params["export_rl"]["without_binary"] = "prompt"  # derived tasks have no environment: prompts all the same
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    # dvc.yaml iterates params.yaml's sources: the old ones are gone, the new one is ingested
    out = run_ok(["dvc", "repro", f"export_sft@{SCALE}", "export_rl"], repo)
    return repo, out


def test_tasks_are_derived_from_the_traces(project):
    repo, out = project
    raw = json.loads((repo / TRACES).read_text())
    lake = Lake(repo / "lake")
    tasks = read_table(lake.table("tasks", "otagent"), "tasks").to_pylist()
    assert sorted(t["task_id"] for t in tasks) == sorted({task_id_for("otagent", r["task"]) for r in raw})
    assert {t["name"] for t in tasks} == {base_task_name(r["task"]) for r in raw}
    assert all(t["derived_from"] and t["task_binary"] is None and t["instruction"] for t in tasks)
    assert read_manifest(lake.table("tasks", "otagent"))["formulas"] == {"tasks": DERIVE_RULE}
    assert f"ingest otagent tasks derived from the traces ({DERIVE_RULE}): {len(tasks)} rows, 0 rejects" in out
    metrics = json.loads((repo / "metrics" / "ingest" / "otagent.json").read_text())
    assert metrics["tasks"]["rows"] == len(tasks) and metrics["trajectories"]["rows"] == len(raw)


def test_scored_selected_and_exported_for_sft(project):
    repo, _ = project
    raw = json.loads((repo / TRACES).read_text())
    lake = Lake(repo / "lake")
    mains = {task_id_for("otagent", r["task"]) for r in raw if r["trace_source"] == "main"}
    scores = read_table(lake.scores, "scores").to_pylist()
    assert {s["task_id"] for s in scores} == mains and all(s["score"] > 0 for s in scores)
    selection = read_table(lake.selection(SCALE), "selection").to_pylist()
    assert len(selection) == int(SCALE) and {r["task_id"] for r in selection} == mains
    m = read_manifest(lake.sft_export(SCALE))
    assert m["counts"]["rows_out"] == int(SCALE) and m["dataset_id"].startswith(f"sft-{SCALE}-")


def test_rl_prompts_for_derived_tasks_without_task_rows(project):
    repo, out = project
    lake = Lake(repo / "lake")
    tasks = {t["task_id"]: t for t in read_table(lake.table("tasks", "otagent"), "tasks").to_pylist()}
    m = read_manifest(lake.rl_export)
    c = m["counts"]
    assert c["tasks_in"] == c["tasks_out"] == c["prompt_only"] == len(tasks)
    assert c["files"]["tasks"] == [] and m["tables"]["harbor_tasks"]["rows"] == 0
    prompts = [r for f in c["files"]["prompts"] for r in pq.read_table(lake.rl_export / f).to_pylist()]
    assert {p["task_id"]: p["prompt"][-1]["content"] for p in prompts} == {
        i: t["instruction"] for i, t in tasks.items()
    }
    assert f"export_rl: {len(tasks)} prompts have no task binary" in out


def test_reject_leaves_them_out_with_a_reason(project, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(project[0], repo, symlinks=True)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["export_rl"]["without_binary"] = "reject"
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    proc = subprocess.run([sys.executable, "-m", "stages", "export_rl"], cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith("tracelake: export_rl: every one of 4 tasks was rejected or dropped (no_task_binary 4)")
    )


def test_a_source_names_its_tasks_or_its_own_path(tmp_path):
    """`tasks: <its path>` derives the tasks; no `tasks` at all (which DVC could not interpolate into
    the ingest stage's deps) is one line saying what to write."""
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"sources": {"otagent": {"format": "traces", "path": TRACES, "tasks": TRACES}}}))
    source = load_params(params, ["sources"]).sources["otagent"]
    assert source.tasks == TRACES and source.derives_tasks
    params.write_text(yaml.safe_dump({"sources": {"otagent": {"format": "traces", "path": TRACES}}}))
    with pytest.raises(BadParams) as err:
        load_params(params, ["sources"])
    assert str(err.value) == (
        "params.yaml: sources.otagent.tasks: required: its task directories or (path, task_binary) table, or, "
        f"when its tasks are derived from its traces, the traces' own path (tasks: {TRACES})"
    )


@pytest.mark.train_env
@pytest.mark.parametrize("trainer", TRAINERS)
def test_skyrl_prompt_dataset_loads_the_derived_prompts(trainer, project, tmp_path):
    repo, _ = project
    lake = Lake(repo / "lake")
    m = read_manifest(lake.rl_export)
    files = [lake.rl_export / f for f in m["counts"]["files"]["prompts"]]
    got = skyrl_load(files, repo / m["params"]["tokenizer"], m["params"]["max_prompt_length"], tmp_path, trainer)
    assert got["len"] == len(got["items"]) == m["counts"]["tasks_out"]  # SkyRL dropped none
