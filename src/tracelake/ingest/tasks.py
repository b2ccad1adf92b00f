"""Harbor task directories, or a (path, task_binary) task table -> the tasks table.

A Harbor task directory holds instruction.md (the prompt), task.toml ([metadata], [verifier],
[agent], [environment]) and environment/, solution/, tests/. PATH is one of:

- one task directory (it has instruction.md or task.toml);
- a directory of task directories (each non-hidden subdirectory is one task, sorted by name);
- a task table (.parquet / .jsonl / .json, same file layouts as trace tables) with columns
  `path` (the task's name is its last component) and `task_binary` (a gzipped tar of the task
  directory; base64 text in JSON). The tar may hold the files at its top level or under one
  top-level directory; it is read as a stream (each file hashed in chunks, only instruction.md and
  task.toml kept), never extracted.

Units: every task directory or table row. A symlink is never followed (one leading outside the
input is rejected symlink_outside_input, tracelake.ingest.task_archive.walk_task_dir), except the
one task directory PATH itself names; a task past the ingest.archive caps is rejected
archive_too_large as soon as it crosses one. A directory's task_binary is built deterministically
(sorted entries, mode 0644/0755, owner 0, mtime 0, gzip header without name or time), so the same
directory gives the same bytes on any machine; a table's task_binary is kept as given. Building,
reading and safely extracting archives live in tracelake.ingest.task_archive.
"""

from __future__ import annotations

import base64
import binascii
import os
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import orjson

from tracelake.core.errors import BadInput
from tracelake.core.executor import Executor
from tracelake.core.hashing import canonical_json
from tracelake.core.ids import task_id_for
from tracelake.ingest.common import IngestResult, Reject, Unit, inputs_digest, run_ingest
from tracelake.ingest.params import ArchiveParams
from tracelake.ingest.tables import TABLE_SUFFIXES, json_kind, required_str, row_object, table_units
from tracelake.ingest.task_archive import (
    ARCHIVE_FORMAT,
    CHECKSUM_FORMULA,
    DEFAULT_LIMITS,
    Entry,
    build_archive,
    scan_archive,
    task_checksum,
    walk_task_dir,
)
from tracelake.ingest.walk import display, is_text

INPUT_KIND = "tasks"
BATCH_ROWS = 64  # task_binary values can be megabytes each
DIR_BATCH = 16  # task directories a worker reads at a time
TASK_FILES_READ = frozenset({"instruction.md", "task.toml"})  # a task_binary's other files are only hashed


# --- task directories ------------------------------------------------------------------------


def is_task_dir(path: Path) -> bool:
    return os.path.lexists(path / "instruction.md") or os.path.lexists(path / "task.toml")


def find_task_dirs(path: Path) -> list[tuple[str, Path]]:
    """(task name, its directory) for one task directory or each in a directory of them, by name.

    The one task directory named is followed if it is a link (the user chose it: it keeps the name
    given); a child of a directory of them is listed as it is, and walk_task_dir refuses a link."""
    path = Path(os.path.abspath(path))
    if is_task_dir(path):
        return [(path.name, Path(os.path.realpath(path)))]
    names = sorted(c.name for c in path.iterdir() if c.is_dir() and not c.name.startswith("."))
    if not names:
        raise BadInput(
            f"{path} is neither a task directory (instruction.md, task.toml) nor a directory of task directories"
        )
    return [(n, path / n) for n in names]


# --- one task --------------------------------------------------------------------------------


def read_instruction(data: bytes | None) -> str:
    if data is None:
        raise Reject("missing_instruction", "the task has no instruction.md")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Reject("invalid_utf8", f"instruction.md: byte {e.start} is not UTF-8") from None
    if not text.strip():
        raise Reject("missing_instruction", "instruction.md is empty")
    return text


def read_metadata(data: bytes | None) -> str | None:
    """task.toml as canonical JSON text, or None when the task has none."""
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Reject("invalid_utf8", f"task.toml: byte {e.start} is not UTF-8") from None
    try:
        return canonical_json(tomllib.loads(text)).decode()
    except tomllib.TOMLDecodeError as e:
        raise Reject("invalid_field", f"task.toml is not valid TOML: {e}") from None
    except orjson.JSONEncodeError as e:
        raise Reject("invalid_field", f"task.toml holds a value JSON cannot carry: {e}") from None


def task_row(
    *,
    source: str,
    name: str,
    entries: list[Entry],
    checksum: str,
    binary: bytes | None,
    provenance: list[dict[str, str]],
) -> dict[str, Any]:
    files = {e.name: e.data for e in entries if not e.is_dir}
    return {
        "task_id": task_id_for(source, name),
        "source": source,
        "name": name,
        "instruction": read_instruction(files.get("instruction.md")),
        "task_checksum": checksum,
        "metadata_json": read_metadata(files.get("task.toml")),
        "n_files": len(files),
        "task_binary": binary,
        "provenance": provenance,
        "derived_from": None,
    }


def table_task_name(row: dict[str, Any]) -> str:
    path = required_str(row, "path")
    if "\x00" in path:  # no file system allows one: the task could never be extracted
        raise Reject("invalid_field", f"path {path!r} has a NUL byte")
    name = PurePosixPath(path).name
    if name in ("", ".", ".."):
        raise Reject("invalid_field", f"path {path!r} does not end in a task name")
    return name


def table_binary(value: Any) -> bytes:
    if value is None:
        raise Reject("missing_required_field", "the row has no task_binary")
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise Reject("invalid_field", "task_binary is text but not base64") from None
    raise Reject("invalid_field", f"task_binary is a {json_kind(value)}, not bytes or base64 text")


def read_task_dirs(task: tuple[str, bool, ArchiveParams, list[Unit]]) -> list[tuple[dict | Reject, str | None]]:
    """(source, with_binary, limits, task directory units) -> each one's (row or Reject, task
    checksum or None when the directory could not be read). Runs in a worker."""
    source, with_binary, limits, units = task
    out: list[tuple[dict | Reject, str | None]] = []
    for unit in units:
        checksum = None
        try:
            if isinstance(unit.payload, Reject):  # a task directory whose name is not UTF-8
                raise unit.payload
            entries = walk_task_dir(unit.payload, limits)
            checksum = task_checksum(entries)
            out.append(
                (
                    task_row(
                        source=source,
                        name=unit.path,
                        entries=entries,
                        checksum=checksum,
                        binary=build_archive(entries) if with_binary else None,
                        provenance=[{"path": unit.path, "sha256": checksum}],
                    ),
                    checksum,
                )
            )
        except Reject as r:
            out.append((r, checksum))
    return out


class TaskReader:
    """Turns units into task rows; remembers input hashes and the tasks already produced."""

    def __init__(self, source: str, with_binary: bool, limits: ArchiveParams = DEFAULT_LIMITS):
        self.source = source
        self.with_binary = with_binary
        self.limits = limits
        self.hashes: dict[str, str] = {}  # table files: relative path -> sha256
        self.listing: dict[str, str] = {}  # inputs digest: task dir -> checksum, table -> sha256
        self.seen: dict[str, str] = {}  # task_id -> where it was ingested

    def process(self, units: list[Unit]) -> list[dict | Reject]:
        return [self._outcome(u) for u in units]

    def accept_dirs(self, units: list[Unit], read: list[tuple[dict | Reject, str | None]]) -> list[dict | Reject]:
        """Task directories read by `read_task_dirs`, in input order: record their checksums and
        reject a task already ingested."""
        outcomes: list[dict | Reject] = []
        for unit, (outcome, checksum) in zip(units, read, strict=True):
            try:
                self._check_new(unit.path)
            except Reject as r:
                outcomes.append(r)
                continue
            if checksum is not None:
                self.listing[unit.path] = checksum
            if not isinstance(outcome, Reject):
                self.seen[outcome["task_id"]] = unit.path
            outcomes.append(outcome)
        return outcomes

    def _outcome(self, unit: Unit) -> dict | Reject:
        where = unit.path if unit.row_index is None else f"{unit.path} row {unit.row_index}"
        try:
            row = self._from_table(unit)
        except Reject as r:
            return r
        self.seen[row["task_id"]] = where
        return row

    def _check_new(self, name: str) -> None:
        first = self.seen.get(task_id_for(self.source, name))
        if first is not None:
            raise Reject("duplicate_task", f"task {name} was already ingested from {first}")

    def _from_table(self, unit: Unit) -> dict[str, Any]:
        row = row_object(unit)
        name = table_task_name(row)
        self._check_new(name)
        binary = table_binary(row.get("task_binary"))
        entries = scan_archive(binary, self.limits, keep=TASK_FILES_READ)
        return task_row(
            source=self.source,
            name=name,
            entries=entries,
            checksum=task_checksum(entries),
            binary=binary if self.with_binary else None,
            provenance=[{"path": unit.path, "sha256": self.hashes[unit.path]}],
        )


# --- the command -----------------------------------------------------------------------------


def ingest_tasks(
    path: Path,
    *,
    source: str,
    out_dir: Path,
    strict: bool = False,
    metrics_path: Path | None = None,
    with_binary: bool = True,
    executor: Executor | None = None,
    archive: ArchiveParams = DEFAULT_LIMITS,
    on_start: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
    into: Path | None = None,
) -> IngestResult:
    """Ingest task directories or a task table into out_dir (tasks.parquet, rejects, manifest).

    Task directories are read and archived as shards on `executor` (default: one process per core),
    DIR_BATCH at a time; the output is the same on any executor. on_start gets the number of steps (task
    directories, or 1 for a table file); on_progress(n) follows each n steps. archive caps each task
    (params ingest.archive). `into`: the temporary directory publish opened for out_dir (common.py
    run_ingest).
    """
    path = Path(path)
    reader = TaskReader(source, with_binary, archive)
    if path.is_dir():
        layout, steps = (
            "task_dirs",
            [
                Unit(path=display(n), payload=d if is_text(n) else Reject("invalid_path", f"{display(n)} is not UTF-8"))
                for n, d in find_task_dirs(path)
            ],
        )
    elif path.is_file() and path.suffix.lower() in TABLE_SUFFIXES:
        layout, steps = "table", [path]
    elif path.exists():
        raise BadInput(f"{path} is not a task directory or a .parquet/.jsonl/.json task table")
    else:
        raise BadInput(f"{path} does not exist")
    if on_start:
        on_start(len(steps))

    def batches() -> Iterator[tuple[list[Unit], Callable]]:
        if layout == "table":
            for units in table_units(
                path, path.name, columns=("path", "task_binary"), batch_size=BATCH_ROWS, hashes=reader.hashes
            ):
                yield units, reader.process
            reader.listing.update(reader.hashes)
            if on_progress:
                on_progress(1)
            return
        chunks = [steps[i : i + DIR_BATCH] for i in range(0, len(steps), DIR_BATCH)]
        work = ((source, with_binary, archive, units) for units in chunks)
        for units, read in zip(chunks, (executor or Executor("processes")).map(read_task_dirs, work)):
            outcomes = reader.accept_dirs(units, read)
            yield units, lambda _units, outcomes=outcomes: outcomes
            if on_progress:
                on_progress(len(units))

    return run_ingest(
        table="tasks",
        input_kind=INPUT_KIND,
        formulas={"task_checksum": CHECKSUM_FORMULA, "task_binary": ARCHIVE_FORMAT},
        batches=batches(),
        inputs=lambda: {
            "layout": layout,
            "steps": len(steps),
            **inputs_digest(reader.listing.items()),
        },
        params={"with_binary": with_binary, "archive": archive.model_dump()},
        out_dir=out_dir,
        source=source,
        strict=strict,
        metrics_path=metrics_path,
        into=into,
    )
