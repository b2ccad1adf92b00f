"""Published trace tables (Parquet / JSONL / JSON) -> the trajectories table.

Input: one row per conversation, as in Harbor's trace exports and the OpenThoughts-Agent tables:

    {"conversations": [{"role": "user", "content": "..."}, ...],   # or ShareGPT {"from", "value"}
     "task": "swesmith-31327_copy0002", "trace_source": "main", "episode": "episode-15",
     "run_id": "...", "trial_name": "...", "agent": "terminus-2", "model": "...",
     "model_provider": "...", "date": "2026-04-18T17:23:24+00:00", "result": null}

`result` is null, a reward ("1.0" or 1.0) or an exception name ("AgentTimeoutError"). Other
columns are ignored. Files: `.parquet` (read in record batches), `.jsonl` (one row per line; blank
lines skipped), `.json` (a list of rows, or {"rows": [...]}, whose items may be wrapped as
{"row_idx": n, "row": {...}} as the Hugging Face datasets server returns them). A directory
stands for the sorted *.parquet / *.jsonl / *.json files directly in it; one that links out of it
is rejected unread (`symlink_outside_input`, walk.py), as is a name that is not UTF-8.

Units: every row (row_index = 0-based row or line number within its file); a file that cannot be
read or parsed as a whole is one unit. Every unit ends as a row or a reject.
"""

from __future__ import annotations

import datetime
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracelake.core.background import read_ahead
from tracelake.core.executor import Executor, Ready
from tracelake.core.schema import load_schema
from tracelake.core.swap import scratch_dir
from tracelake.ingest.common import (
    ROLES,
    IngestResult,
    Parsed,
    Reject,
    Unit,
    check_text,
    drop_rows,
    inputs_digest,
    run_ingest,
    trajectory_row,
    write_scratch_part,
)
from tracelake.ingest.file_cache import FileCache
from tracelake.ingest.tables import (
    RawBatch,
    expand_inputs,
    json_kind,
    problem_batch,
    raw_batches,
    relative_paths,
    required_str,
    row_object,
)
from tracelake.ingest.walk import display, is_text

INPUT_KIND = "traces"
RENDERER = "trace-table-v1"
BATCH_ROWS = 1000
READ_AHEAD = 8  # batches (byte ranges of about 32 MB) found and hashed ahead of the workers
FIELDS = (
    "conversations",
    "task",
    "trace_source",
    "episode",
    "run_id",
    "trial_name",
    "agent",
    "model",
    "model_provider",
    "date",
    "result",
)
_OPTIONAL = ("episode", "run_id", "trial_name", "agent", "model", "model_provider", "date")
# ShareGPT speaker names (and OpenAI's legacy "function") -> our roles; other names pass through
# unchanged and trajectory_row rejects them as unknown_role.
_ROLE_NAMES = {"human": "user", "gpt": "assistant", "observation": "tool", "function": "tool"}
_ROLE_CONTENT = {"role", "content"}
_KNOWN_ROLES = frozenset(ROLES)


# --- one row ---------------------------------------------------------------------------------


def messages_of(conversations: Any) -> list[dict[str, str]]:
    """`conversations` -> [{role, content}], mapping ShareGPT {from, value} speaker names."""
    if type(conversations) is list and all(
        type(m) is dict
        and m.keys() == _ROLE_CONTENT
        and type(m["role"]) is str
        and m["role"] in _KNOWN_ROLES
        and type(m["content"]) is str
        for m in conversations
    ):
        return conversations  # already {role, content} with known roles: nothing to map or check
    if conversations is None:
        raise Reject("missing_required_field", "the row has no conversations")
    if not isinstance(conversations, list):
        raise Reject("invalid_field", f"conversations is a {json_kind(conversations)}, not a list")
    messages = []
    for i, m in enumerate(conversations):
        if not isinstance(m, dict):
            raise Reject("invalid_field", f"message {i} is a {json_kind(m)}, not an object")
        if m.get("role") is not None:
            role, content = m["role"], m.get("content")
        elif m.get("from") is not None:
            role, content = m["from"], m.get("value")
        else:
            raise Reject("invalid_field", f"message {i} has neither role nor from")
        if not isinstance(role, str):
            raise Reject("invalid_field", f"message {i} role is a {json_kind(role)}, not a string")
        if not isinstance(content, str):
            raise Reject("invalid_field", f"message {i} content is a {json_kind(content)}, not a string")
        messages.append({"role": _ROLE_NAMES.get(role, role), "content": content})
    return messages


def optional_str(row: dict[str, Any], name: str) -> str | None:
    """A string column: null stays null, other scalars become their str()."""
    v = row.get(name)
    if isinstance(v, (datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, (bool, int, float)):
        return str(v)
    if v is not None and not isinstance(v, str):
        raise Reject("invalid_field", f"{name} is a {json_kind(v)}, not a string")
    check_text(v, name)
    return v


def parse_result(v: Any) -> tuple[str | None, float | None, str | None]:
    """result -> (result, reward, exception_type): a number is a reward, other text an exception."""
    if v is None or (isinstance(v, str) and not v.strip()):
        return None, None, None
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise Reject("invalid_field", f"result is a {json_kind(v)}, not a reward or exception name")
    try:
        reward = float(v)
    except ValueError:
        check_text(v, "result")
        return v, None, v
    if not math.isfinite(reward):
        raise Reject("invalid_field", f"result {v!r} is not a finite reward")
    return (v if isinstance(v, str) else str(reward)), reward, None


def trace_outcome(source: str, hashes: dict[str, str], unit: Unit) -> dict | Reject:
    """One unit -> its trajectory row, or the Reject saying why not (duplicates are found later,
    in input order, by `Deduplicate`)."""
    try:
        row = row_object(unit)
        trace_source = optional_str(row, "trace_source") or "main"
        unit.trace_source = trace_source  # so that a reject of this row names its trace_source
        task = required_str(row, "task")
        messages = messages_of(row.get("conversations"))
        result, reward, exception_type = parse_result(row.get("result"))
        fields = {name: optional_str(row, name) for name in _OPTIONAL}
        return trajectory_row(
            source=source,
            task=task,
            messages=messages,
            trace_source=trace_source,
            n_episodes=None,
            result=result,
            reward=reward,
            exception_type=exception_type,
            renderer=RENDERER,
            provenance=[{"path": unit.path, "sha256": hashes[unit.path]}],
            row_index=unit.row_index,
            **fields,
        )
    except Reject as r:
        return r


def parse_batch(task: tuple[str, dict[str, str], RawBatch, str]) -> Parsed:
    """(source, {file: sha256}, raw batch, directory) -> Parsed, its rows written as a part file in
    the directory (a temporary name: the ingest loop moves it into the table). Runs in a worker."""
    source, hashes, raw, directory = task
    units = raw.units()
    outcomes = [trace_outcome(source, hashes, u) for u in units]
    for u in units:
        u.payload = None  # what travels back is the outcome, not the input
    rows = [o for o in outcomes if not isinstance(o, Reject)]
    return Parsed(
        units,
        [o if isinstance(o, Reject) else None for o in outcomes],
        write_scratch_part(directory, rows),
        [r["trajectory_id"] for r in rows],
    )


class Deduplicate:
    """Rejects a row whose trajectory id an earlier row (in input order) already had; a part that
    loses rows is written again without them."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}

    def __call__(self, parsed: Parsed) -> Parsed:
        ids = iter(parsed.keys)
        keep: list[bool] = []
        for i, (unit, reject) in enumerate(zip(parsed.units, parsed.rejects)):
            if reject is not None:
                continue
            trajectory_id = next(ids)
            where = unit.path if unit.row_index is None else f"{unit.path} row {unit.row_index}"
            first = self.seen.setdefault(trajectory_id, where)
            keep.append(first == where)
            if first != where:
                parsed.rejects[i] = Reject(
                    "duplicate_trial", f"identical to the row at {first} (trajectory_id {trajectory_id})"
                )
        return drop_rows(parsed, keep)


# --- the command -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _FileStart:
    rel: str
    sha256: str | None  # None: nothing to keep in the cache (a hit, or a file that could not be hashed)


@dataclass(frozen=True)
class _FileEnd:
    pass


def ingest_traces(
    files: Sequence[Path],
    *,
    source: str,
    out_dir: Path,
    strict: bool = False,
    metrics_path: Path | None = None,
    executor: Executor | None = None,
    cache: Path | None = None,
    on_start: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
    into: Path | None = None,
) -> IngestResult:
    """Ingest trace table files into out_dir. on_start gets the file count, on_progress(1) per file.

    Batches of rows (BATCH_ROWS rows, or a JSONL block) are parsed as shards on `executor` (default:
    one process per core), each written by its worker as a part of the trajectories table; a file already in
    `cache` (file_cache.py: same bytes, name and code) is not parsed again, its parts are copied
    back. The output is byte-identical on any executor and whatever the cache holds. `into`: the
    temporary directory publish opened for out_dir (common.py run_ingest).
    """
    inputs = expand_inputs(files)
    paths = [i.path for i in inputs]
    raw_rels = relative_paths(paths)
    rels = [display(rel) for rel in raw_rels]  # a name that is not UTF-8 is a reject naming it so
    problems = [
        i.problem or (None if is_text(rel) else ("invalid_path", "the name is not UTF-8"))
        for i, rel in zip(inputs, raw_rels)
    ]
    if on_start:
        on_start(len(paths))
    hashes: dict[str, str] = {}
    file_cache = FileCache(cache, load_schema("trajectories"), source)
    out_dir = Path(out_dir)
    scratch = scratch_dir(out_dir)

    def items() -> Iterator[tuple[str, dict[str, str], RawBatch, str] | Ready]:
        for path, rel, problem in zip(paths, rels, problems):
            if problem is not None:
                yield Ready(_FileStart(rel, None))
                yield source, {}, problem_batch(rel, problem), str(scratch)
                yield Ready(_FileEnd())
                continue
            known, before = file_cache.known_sha256(path)  # an unchanged file is not even read
            cached = file_cache.get(rel, known, scratch) if known else None
            if cached is not None:
                hashes[rel] = known
                yield Ready(_FileStart(rel, None))
                yield from map(Ready, cached)
                yield Ready(_FileEnd())
                continue
            raws = raw_batches(path, rel, columns=FIELDS, batch_size=BATCH_ROWS, hashes=hashes)
            first = next(raws, None)  # the file is hashed by now (or is one reject)
            if rel in hashes and first is not None and first.reject is None:
                file_cache.remember_sha256(path, before, hashes[rel])
            cached = (
                file_cache.get(rel, hashes[rel], scratch)
                if rel in hashes and first is not None and first.reject is None
                else None
            )
            if cached is not None:
                raws.close()
                yield Ready(_FileStart(rel, None))
                yield from map(Ready, cached)
            else:
                yield Ready(_FileStart(rel, hashes.get(rel)))
                for raw in itertools.chain([first] if first else [], raws):
                    yield source, {rel: hashes[rel]} if rel in hashes else {}, raw, str(scratch)
            yield Ready(_FileEnd())

    def batches() -> Iterator[Parsed]:
        dedup, entry = Deduplicate(), None
        try:
            # Input files are read and hashed on a thread, a few batches ahead of the workers: the
            # disk reads overlap the parsing instead of stalling it file by file.
            for out in (executor or Executor("processes")).map(parse_batch, read_ahead(items(), READ_AHEAD)):
                if isinstance(out, _FileStart):  # opened here, in order: never one ahead of the output
                    entry = file_cache.writer(out.rel, out.sha256) if out.sha256 else None
                elif isinstance(out, _FileEnd):
                    if entry is not None:
                        entry.commit()
                        entry = None
                    if on_progress:
                        on_progress(1)
                else:
                    if entry is not None:
                        entry.add(out)  # as parsed: before duplicates are looked for
                    yield dedup(out)
        finally:
            if entry is not None:
                entry.abort()

    result = run_ingest(
        table="trajectories",
        input_kind=INPUT_KIND,
        formulas={"renderer": RENDERER},
        batches=batches(),
        inputs=lambda: {"paths": rels, **inputs_digest(hashes.items())},
        out_dir=out_dir,
        source=source,
        strict=strict,
        metrics_path=metrics_path,
        scratch=scratch,
        into=into,
    )
    result.files_from_cache = file_cache.hits
    return result
