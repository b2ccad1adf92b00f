"""Tasks derived from trace tables that come without task directories (rule derived_task_v2), on the
real OpenThoughts-Agent rows in ../shared/fixtures/otagent: one task per base task name, the
instruction is the task description inside terminus-2's first prompt, marked derived; the model
scorer asks about exactly those instructions. Other agents' formats: OpenHands (a long system
prompt, then the task), a generic agent, and traces in which the task cannot be found (a reject
naming why, never a system prompt taken for the task)."""

from __future__ import annotations

import json

import pytest

from tracelake.core.duckdb_views import connect
from tracelake.core.ids import base_task_name, task_id_for
from tracelake.core.lake import Lake
from tracelake.core.outputs import read_manifest
from tracelake.core.tables import read_table
from tracelake.curate.scoring.scorers import LlmResponseLength
from tracelake.ingest.derived_tasks import DERIVE_RULE, derive_tasks
from tracelake.ingest.traces import ingest_traces

from ..agent_traces import OPENHANDS_SYSTEM_PROMPT, derived_lake, openhands_conversation, trace_row
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


TERMINUS_PROMPT = (
    "You are an AI assistant tasked with solving command-line tasks in a Linux environment.\n\n"
    "Task Description:\n{task}\n\nCurrent terminal state:\nroot@box:/app# "
)


def reply(k: int = 0) -> dict:
    return {"role": "assistant", "content": f"ok ({k})"}


def run_r1(*trials: tuple[str, str, list[dict]]) -> list[dict]:
    """Trace rows of run r1, its trials t1, t2, ... in order: (task, agent, conversation) each."""
    return [
        trace_row(task, conversation, agent=agent, run_id="r1", trial=f"t{i}")
        for i, (task, agent, conversation) in enumerate(trials, 1)
    ]


def derive(tmp_path, rows: list[dict]) -> dict[str, dict]:
    """rows -> a trace table -> trajectories -> derived tasks, by name (every row ingested, no reject)."""
    lake, result = derived_lake(tmp_path, rows, "s")
    assert result.rejects == 0
    return {r["name"]: r for r in read_table(lake.table("tasks", "s"), "tasks").to_pylist()}


def test_each_agent_format_gives_its_task_not_its_system_prompt(tmp_path):
    hello = 'Create a file called hello.txt with "Hello, world!" as the content.'
    rows = run_r1(
        # OpenHands as Harbor exports it: the 21,633-character system prompt is a user message
        ("oh-harbor", "openhands", openhands_conversation(hello)),
        # OpenHands from a table that kept the system role
        ("oh-system", "OpenHands", openhands_conversation("Fix the bug in parse().", system_role="system")),
        # OpenHands without a system prompt in the trace: its one user message is the task
        ("oh-bare", "openhands", [{"role": "user", "content": "Sort the lines of a.txt."}, reply()]),
        # terminus-2: the text between its markers
        (
            "t2",
            "terminus-2",
            [{"role": "user", "content": TERMINUS_PROMPT.format(task="Count the words in b.txt.")}, reply()],
        ),
        # any other agent: the first user message (a system message is not one)
        (
            "generic",
            "mini-swe-agent",
            [
                {"role": "system", "content": "You are a helpful agent."},
                {"role": "user", "content": "  List every file under /etc.  "},
                reply(),
            ],
        ),
    )
    tasks = derive(tmp_path, rows)
    assert {n: t["instruction"] for n, t in tasks.items()} == {
        "oh-harbor": hello,
        "oh-system": "Fix the bug in parse().",
        "oh-bare": "Sort the lines of a.txt.",
        "t2": "Count the words in b.txt.",
        "generic": "List every file under /etc.",
    }
    assert all(OPENHANDS_SYSTEM_PROMPT[:40] not in t["instruction"] for t in tasks.values())
    assert len(OPENHANDS_SYSTEM_PROMPT) == 21_633


def test_a_task_not_found_is_a_reject_with_its_reason(tmp_path):
    rows = run_r1(
        # OpenHands whose only user message is its system prompt: no task in it
        ("oh-prompt-only", "openhands", [{"role": "user", "content": OPENHANDS_SYSTEM_PROMPT}, reply()]),
        # terminus-2 without its Task Description marker
        ("t2-no-marker", "terminus-2", [{"role": "user", "content": "You are an AI assistant. Solve it."}, reply()]),
        # no user message at all
        ("no-user", "mini-swe-agent", [{"role": "system", "content": "be brief"}, reply()]),
    )
    lake, result = derived_lake(tmp_path, rows, "s")
    assert (result.rows, result.rejects) == (0, 3)
    traj = dict(
        zip(
            *read_table(lake.table("trajectories", "s"), "trajectories")
            .select(["trajectory_id", "task"])
            .to_pydict()
            .values()
        )
    )
    got = {}
    for r in read_table(lake.table("tasks", "s"), "rejects").to_pylist():
        [name] = [t for tid, t in traj.items() if tid in r["detail"]]
        got[name] = r["reason"]
        assert "\n" not in r["detail"]
    assert got == {
        "oh-prompt-only": "task_not_found",
        "t2-no-marker": "task_not_found",
        "no-user": "missing_instruction",
    }
    details = [r["detail"] for r in read_table(lake.table("tasks", "s"), "rejects").to_pylist()]
    assert any("openhands format" in d and "system prompt is never taken" in d for d in details)


def test_the_trajectory_whose_task_is_found_is_chosen(tmp_path):
    """A task with an OpenHands main trace that holds only the system prompt and a terminus-2 subagent
    trace holding the task: the task comes from the one where it is found, whatever the ids."""
    rows = [
        trace_row(
            "mixed",
            [{"role": "user", "content": OPENHANDS_SYSTEM_PROMPT}, reply()],
            agent="openhands",
            run_id="r1",
            trial="t1",
        ),
        trace_row(
            "mixed",
            [{"role": "user", "content": TERMINUS_PROMPT.format(task="Compress logs/ into a.tgz.")}, reply()],
            agent="terminus-2",
            run_id="r2",
            trial="t2",
            trace_source="summarization-1-summary",
        ),
    ]
    tasks = derive(tmp_path, rows)
    assert tasks["mixed"]["instruction"] == "Compress logs/ into a.tgz."
