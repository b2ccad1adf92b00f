"""Trace-table rows in the shapes different agents give them, for the tests of task derivation and
decontamination: OpenHands (a ~21,600-character system prompt, then the task in its own user turn, as
Harbor's trace exporter writes an ATIF system step: a user message), and terminus-2 (the task inside
its one long first prompt, Harbor's own export in ../shared/fixtures)."""

from __future__ import annotations

import json
from pathlib import Path

from tracelake.core.lake import Lake
from tracelake.ingest.derived_tasks import derive_tasks
from tracelake.ingest.traces import ingest_traces

from .helpers import GOLDEN

# What OpenHands' system prompt looks like: its first sentence, then rules; as long as the probe's.
_RULES = (
    "* If user provides a path, you should NOT assume it's relative to the current working directory. "
    "Instead, you should explore the file system to find the file before working on it.\n"
    '* When configuring git credentials, use "openhands" as the user.name and "openhands@all-hands.dev" '
    "as the user.email by default, unless explicitly instructed otherwise.\n"
    "* Prefer editing existing files to creating new ones; keep changes minimal and focused.\n"
)
OPENHANDS_SYSTEM_PROMPT = (
    "You are OpenHands agent, a helpful AI assistant that can interact with a computer to solve tasks.\n"
    "<IMPORTANT>\n" + "".join(f"{k}. {_RULES}" for k in range(1, 76))
)[:21_633]


def openhands_conversation(task: str, *, system_role: str = "user", turns: int = 5) -> list[dict]:
    """OpenHands' opening (its system prompt, then the task as the first user turn after it), then
    `turns` assistant turns with their observations. Harbor's exporter writes the system prompt as a
    user message (`system_role` "user"); a table that kept roles has it as "system"."""
    msgs = [{"role": system_role, "content": OPENHANDS_SYSTEM_PROMPT}, {"role": "user", "content": task}]
    for k in range(turns):
        msgs.append({"role": "assistant", "content": f"I will run a command ({k})."})
        if k < turns - 1:
            msgs.append({"role": "user", "content": f"OBSERVATION: step {k} done"})
    return msgs


def terminus_golden_row() -> dict:
    """Harbor's own export of a terminus-2 trial of hello-world (its last episode): the task's text
    sits in its first user message, between "Task Description:" and "Current terminal state:"."""
    rows = json.loads((GOLDEN / "hello-world-context-summarization.traces.json").read_text())
    return rows[-1]


def trace_row(task: str, conversations: list[dict], *, agent: str, run_id: str, trial: str, **fields) -> dict:
    """One trace-table row (schemas of Harbor's trace export)."""
    return {
        "conversations": conversations,
        "agent": agent,
        "model": fields.pop("model", "openai/gpt-4o"),
        "task": task,
        "episode": fields.pop("episode", "episode-0"),
        "run_id": run_id,
        "trial_name": trial,
        "trace_source": fields.pop("trace_source", "main"),
        "result": fields.pop("result", "1.0"),
        **fields,
    }


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def derived_lake(tmp_path: Path, rows: list[dict], source: str):
    """The rows as the trace table <tmp_path>/in/<source>.jsonl, every one ingested into the lake at
    <tmp_path>/lake, and the tasks derived from them: (the lake, derive_tasks' result)."""
    lake = Lake(tmp_path / "lake")
    f = write_jsonl(tmp_path / "in" / f"{source}.jsonl", rows)
    assert ingest_traces([f], source=source, out_dir=lake.table("trajectories", source)).rows == len(rows)
    return lake, derive_tasks(lake, source=source, out_dir=lake.table("tasks", source))
