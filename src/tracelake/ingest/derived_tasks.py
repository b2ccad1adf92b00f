"""Tasks of a source without task directories (published trace tables, e.g. the OpenThoughts-Agent SFT
sets), derived from its trajectories by rule derived_task_v1:

- one task per task id of the trajectories (source, base task name: `_copyNNNN` dropped);
- its instruction is the first user message of one of its trajectories (the main trace first, then
  the smallest trajectory id), with the harness's preamble stripped: in terminus-2's prompt the task
  is the text between "Task Description:" and "Current terminal state:"; a prompt without those
  markers is kept whole;
- marked as derived: `derived_from` names that trajectory; no task_binary (the Harbor environment
  cannot run it), n_files 0, task_checksum = sha256 of the instruction.

A task none of whose trajectories has a user message is a reject (missing_instruction).
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

DERIVE_RULE = "derived_task_v1"
INPUT_KIND = "derived-tasks"
TASK_MARKER = "Task Description:"
END_MARKER = "Current terminal state:"
BATCH = 1000


def derived_instruction(first_user: str) -> str:
    """The task in a harness's first user message: terminus-2's preamble and terminal state stripped."""
    start = first_user.find(TASK_MARKER)
    if start < 0:
        return first_user.strip()
    text = first_user[start + len(TASK_MARKER) :]
    end = text.find(END_MARKER)
    return (text if end < 0 else text[:end]).strip()


def derived_task_row(source: str, row: dict[str, Any]) -> dict[str, Any]:
    instruction = derived_instruction(row["first_user"] or "")
    if not instruction:
        raise Reject(
            "missing_instruction",
            f"no user message in trajectory {row['trajectory_id']} to take the task's instruction from",
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


def derive_tasks(lake: Lake, *, source: str, out_dir: Path, strict: bool = False) -> IngestResult:
    """<lake>/trajectories/<source> -> out_dir (tasks.parquet, rejects, manifest), by derived_task_v1."""
    files = lake.table_files("trajectories", [source])
    con = duckdb.connect()
    reader = con.sql(sql("derive_tasks"), params={"files": files, "copy": COPY_SUFFIX.pattern}).to_arrow_reader(BATCH)

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
    )
