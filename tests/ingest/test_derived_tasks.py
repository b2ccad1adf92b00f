"""Tasks derived from trace tables that come without task directories (rule derived_task_v1), on the
real OpenThoughts-Agent rows in ../shared/fixtures/otagent: one task per base task name, the
instruction is the task description inside terminus-2's first prompt, marked derived; the model
scorer asks about exactly those instructions."""

from __future__ import annotations

import json

import pytest

from tracelake.core.duckdb_views import connect
from tracelake.core.ids import base_task_name, task_id_for
from tracelake.core.lake import Lake
from tracelake.core.outputs import read_manifest
from tracelake.core.tables import read_table
from tracelake.curate.scoring.scorers import LlmResponseLength
from tracelake.ingest.derived_tasks import DERIVE_RULE, derive_tasks, derived_instruction
from tracelake.ingest.traces import ingest_traces

from ..helpers import FIXTURES, need


@pytest.fixture(scope="module")
def otagent_lake(tmp_path_factory):
    sample = need(FIXTURES / "otagent" / "sample_raw.json")
    lake = Lake(tmp_path_factory.mktemp("lake"))
    assert ingest_traces([sample], source="otagent", out_dir=lake.table("trajectories", "otagent")).rows == 4
    result = derive_tasks(lake, source="otagent", out_dir=lake.table("tasks", "otagent"))
    return lake, json.loads(sample.read_text()), result


def test_one_task_per_base_name_with_the_task_description(otagent_lake):
    lake, raw, result = otagent_lake
    tasks = {r["name"]: r for r in read_table(lake.table("tasks", "otagent"), "tasks").to_pylist()}
    assert sorted(tasks) == sorted({base_task_name(r["task"]) for r in raw}) and result.rejects == 0
    for row in raw:
        task = tasks[base_task_name(row["task"])]
        assert task["task_id"] == task_id_for("otagent", row["task"])
        first = row["conversations"][0]["content"]
        start = first.index("Task Description:") + len("Task Description:")
        assert task["instruction"] == first[start : first.index("Current terminal state:")].strip()
        assert "Format your response as JSON" not in task["instruction"] and task["instruction"]
        assert task["task_binary"] is None and task["n_files"] == 0 and task["derived_from"]
    assert tasks["swesmith-31327"]["instruction"].startswith("ConstrainedList slice assignment corrupts values")
    manifest = read_manifest(lake.table("tasks", "otagent"))
    assert manifest["formulas"] == {"tasks": DERIVE_RULE}


def test_the_main_trace_is_preferred_and_derivation_is_deterministic(otagent_lake, tmp_path):
    lake, _, _ = otagent_lake
    first = read_table(lake.table("tasks", "otagent"), "tasks")
    again = derive_tasks(lake, source="otagent", out_dir=tmp_path / "tasks")
    assert (tmp_path / "tasks" / "tasks.parquet").read_bytes() == (
        lake.table("tasks", "otagent") / "tasks.parquet"
    ).read_bytes()
    assert again.rows == first.num_rows
    traj = {
        r["trajectory_id"]: r
        for r in read_table(lake.table("trajectories", "otagent"), "trajectories")
        .select(["trajectory_id", "trace_source", "task_id"])
        .to_pylist()
    }
    for task_id, derived_from in zip(first["task_id"].to_pylist(), first["derived_from"].to_pylist()):
        mains = [t for t in traj.values() if t["task_id"] == task_id and t["trace_source"] == "main"]
        assert traj[derived_from]["task_id"] == task_id
        assert not mains or traj[derived_from]["trace_source"] == "main"


def test_the_model_scorer_asks_about_derived_instructions(otagent_lake):
    lake, _, _ = otagent_lake
    con = connect(lake.root, ["otagent"])
    scorer = LlmResponseLength()
    requests = scorer.requests(con)
    instructions = dict(con.execute("SELECT task_id, instruction FROM tasks").fetchall())
    assert {r.task_id for r in requests} == set(instructions)
    for r in requests:
        assert scorer.messages_of(r.prompt)[-1]["content"] == instructions[r.task_id]


def test_prompts_without_the_markers_are_kept_whole():
    assert derived_instruction("  Fix the failing test in src/.  \n") == "Fix the failing test in src/."
    assert derived_instruction("preamble\nTask Description:\n  do X\n") == "do X"
    assert derived_instruction("Task Description: do Y\n\nCurrent terminal state:\n$ ") == "do Y"
