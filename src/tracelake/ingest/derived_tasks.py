"""Tasks of a source without task directories (published trace tables, e.g. the OpenThoughts-Agent SFT
sets), derived from its trajectories by rule derived_task_v2:

- one task per task id of the trajectories (source, base task name: `_copyNNNN` dropped);
- its instruction is the task found in the opening of one of its trajectories (the system and user
  messages before the first assistant turn), where the agent's format puts it (sql/derive_tasks.sql):
  terminus-2: the text between "Task Description:" and "Current terminal state:" in the first user
  message; OpenHands: the first user message after the system prompt (Harbor's exporter writes the
  system prompt as a user message); any other agent: the first user message (terminus-2's markers
  stripped when it holds them);
- the trajectory: one in which the task is found, the main trace first, then the smallest id;
- marked as derived: `derived_from` names that trajectory; no task_binary (the Harbor environment
  cannot run it), n_files 0, task_checksum = sha256 of the instruction.

A task none of whose trajectories has a user message is a reject (missing_instruction); one whose
trajectories have user messages but none where its format puts the task is a reject
(task_not_found): a system prompt is never taken for the task. (derived_task_v1 took the first user
message whole, so an OpenHands trace gave its system prompt as the task's instruction, which no
benchmark's copy of the task matches.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import duckdb

from tracelake.core.assets import sql
from tracelake.core.hashing import sha256_bytes
from tracelake.core.ids import COPY_SUFFIX
from tracelake.core.lake import Lake
from tracelake.core.outputs import read_manifest
from tracelake.ingest.common import IngestResult, Reject, Unit, run_ingest

DERIVE_RULE = "derived_task_v2"
INPUT_KIND = "derived-tasks"
TASK_MARKER = "Task Description:"  # terminus-2's prompt: the task follows this line
END_MARKER = "Current terminal state:"  # ... and ends before this one
BATCH = 1000
# where each agent format puts the task (sql/derive_tasks.sql), for a reject's detail
WHERE_THE_TASK_IS = {
    "terminus-2": 'after "Task Description:" in the first user message',
    "openhands": "in the first user message after the system prompt",
    "generic": "in the first user message",
}


def derived_task_row(source: str, row: dict[str, Any]) -> dict[str, Any]:
    """The task row of the trajectory sql/derive_tasks.sql chose, or the Reject saying why none."""
    instruction = (row["instruction"] or "").strip()
    if not instruction:
        if not row["n_users"]:
            raise Reject(
                "missing_instruction",
                f"no user message in trajectory {row['trajectory_id']} to take the task's instruction from",
            )
        raise Reject(
            "task_not_found",
            f"no trajectory of the task has its task {WHERE_THE_TASK_IS[row['format']]} ({row['format']} format; "
            f"e.g. trajectory {row['trajectory_id']}: {row['n_users']} user message(s) before the first assistant "
            f"turn{', after a system message' if row['has_system'] else ''}); a system prompt is never taken for the task",
        )
    return {
        "task_id": row["task_id"],
        "source": source,
        "name": row["name"],
        "instruction": instruction,
        "task_checksum": sha256_bytes(instruction.encode()),
        "metadata_json": None,
        "n_files": 0,
        "task_binary": None,
        "provenance": row["provenance"],
        "derived_from": row["trajectory_id"],
    }


def derive_tasks(
    lake: Lake, *, source: str, out_dir: Path, strict: bool = False, into: Path | None = None
) -> IngestResult:
    """<lake>/trajectories/<source> -> out_dir (tasks.parquet, rejects, manifest), by derived_task_v2.
    `into`: the temporary directory publish opened for out_dir (common.py run_ingest)."""
    files = lake.table_files("trajectories", [source])
    con = duckdb.connect()
    reader = con.sql(
        sql("derive_tasks"),
        params={"files": files, "copy": COPY_SUFFIX.pattern, "task_marker": TASK_MARKER, "end_marker": END_MARKER},
    ).to_arrow_reader(BATCH)

    def batches() -> Iterator[tuple[list[Unit], Any]]:
        for batch in reader:
            rows = batch.to_pylist()
            units = [
                Unit(path=r["provenance"][0]["path"] if r["provenance"] else r["trajectory_id"], payload=r)
                for r in rows
            ]
            yield units, _process

    def _process(units: list[Unit]) -> list[dict | Reject]:
        out: list[dict | Reject] = []
        for unit in units:
            try:
                out.append(derived_task_row(source, unit.payload))
            except Reject as r:
                out.append(r)
        return out

    trajectories = read_manifest(lake.table("trajectories", source))["version_id"]
    return run_ingest(
        table="tasks",
        input_kind=INPUT_KIND,
        formulas={"tasks": DERIVE_RULE},
        batches=batches(),
        inputs=lambda: {"trajectories": trajectories},
        out_dir=out_dir,
        source=source,
        strict=strict,
        into=into,
    )


def terminus_task(text: str) -> str | None:
    """The task inside a terminus-2 prompt (between its markers, stripped), or None without them: the
    rule of sql/derive_tasks.sql, for texts that are not in a table."""
    start = text.find(TASK_MARKER)
    if start < 0:
        return None
    rest = text[start + len(TASK_MARKER) :]
    end = rest.find(END_MARKER)
    return (rest if end < 0 else rest[:end]).strip()
