"""The ingest run loop shared by every input kind.

Each input kind turns its inputs into *units* (a trace file, a table row, a task directory), and
each unit ends as exactly one row or one reject with a snake_case reason. The loop counts units
before it processes them, so `inputs == rows + rejects` is checked, not assumed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from tracelake.core.errors import RejectedInput, check
from tracelake.core.hashing import canonical_json, content_id, sha256_bytes
from tracelake.core.ids import task_id_for
from tracelake.core.outputs import write_json
from tracelake.core.schema import load_schema
from tracelake.core.stage import Manifest, Streamed, write_output
from tracelake.core.tables import PartedTableWriter, table_writer, write_part

# reason -> what it means; schemas/README.md lists the same reasons for users.
REASONS: dict[str, str] = {
    "unreadable_file": "the file could not be read (permissions, I/O error)",
    "unparsable_json": "the file or line is not valid JSON",
    "invalid_utf8": "the bytes are not valid UTF-8",
    "lone_surrogate": "a string holds a lone UTF-16 surrogate (e.g. \\ud800), which is not text",
    "missing_result_json": "a Harbor trial directory has no result.json",
    "missing_trajectory": "a Harbor trial has no agent/trajectory.json",
    "broken_continuation": "continued_trajectory_ref names a file that is missing or unusable",
    "missing_required_field": "a field the row cannot do without is absent or empty",
    "invalid_field": "a field has the wrong type or an impossible value",
    "empty_conversation": "no assistant turn (or no messages at all)",
    "unknown_role": "a message role (or ATIF step source) outside the known set",
    "multimodal_content": "a message holds images; text-only export would silently lose them",
    "duplicate_trial": "the same trial (or the identical row) was already ingested",
    "duplicate_task": "the same task name appeared twice in one source",
    "missing_instruction": "a task has no instruction.md (or it is empty)",
    "task_not_found": "a derived task: no trajectory's opening holds the task where its agent's format puts it",
    "unreadable_archive": "task_binary is not a readable gzipped tar",
    "unsafe_archive": "task_binary holds absolute paths, '..', links, devices, or paths it cannot be extracted to",
    "archive_too_large": "a task holds more members or bytes than ingest.archive allows (a zip bomb?)",
    "symlink_outside_input": "a symlink leads outside the input root; it is never followed",
    "linked_directory": "a directory link inside the input root: its target is walked where it lies, not through it",
    "invalid_path": "a file or directory name is not UTF-8 (the reject shows its bytes as \\xNN)",
    "json_too_deep": "JSON nested deeper than the parser (1024) or ingest (254, in re-serialised values) allows",
    "unsupported_file": "an input file whose kind is not understood",
}

ROLES = ("system", "user", "assistant", "tool")
_KNOWN_ROLES = frozenset(ROLES)
TIMEOUT_EXCEPTIONS = frozenset({"AgentTimeoutError"})


class Reject(Exception):
    """Raised while processing one unit: it becomes a rejects row (or the --strict error)."""

    def __init__(self, reason: str, detail: str):
        if reason not in REASONS:
            raise ValueError(f"unknown reject reason {reason!r}")
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = " ".join(detail.split())[:500]

    def __reduce__(self):  # crosses from worker processes intact
        return Reject, (self.reason, self.detail)


@dataclass
class Unit:
    """One input that must end as one row or one reject."""

    path: str  # relative to the ingest root, '/'-separated
    row_index: int | None = None
    trace_source: str | None = None
    payload: Any = None


@dataclass
class Parsed:
    """A batch of units processed elsewhere (a worker): the units (payloads dropped), each one's
    Reject or None, and the rows of the units without one, in order, already written as a part of
    the table (`lake.write_part`; None when every unit was rejected), with their keys."""

    units: list[Unit]
    rejects: list[Reject | None]
    part: Path | None
    keys: list[str]


def write_scratch_part(directory: Path | str, rows: list[dict[str, Any]]) -> Path | None:
    """A worker's rows as a trajectories part under a temporary name in `directory` (the ingest
    loop moves it into the table); None when there are no rows."""
    if not rows:
        return None
    fd, name = tempfile.mkstemp(suffix=".parquet", prefix=".part-", dir=directory)
    os.close(fd)
    write_part(Path(name), load_schema("trajectories").from_rows(rows))
    return Path(name)


def drop_rows(parsed: Parsed, keep: list[bool]) -> Parsed:
    """Parsed without the rows whose `keep` is False (one flag per row of its part, in order): the
    part is written again without them (or removed when none is left)."""
    check(len(keep) == len(parsed.keys), f"{len(keep)} flags for {len(parsed.keys)} rows")
    if all(keep):
        return parsed
    parsed.keys = [k for k, kept in zip(parsed.keys, keep) if kept]
    table = pq.read_table(parsed.part).filter(pa.array(keep, pa.bool_()))
    parsed.part.unlink()
    if table.num_rows:
        write_part(parsed.part, table)
    else:
        parsed.part = None
    return parsed


@dataclass
class IngestResult:
    out_dir: Path
    inputs: int
    rows: int
    rejects: int
    by_reason: dict[str, int] = field(default_factory=dict)
    manifest: dict[str, Any] = field(default_factory=dict)
    files_from_cache: int = 0  # input files read back from the ingest cache (not in metrics: not content)
    written: Manifest | None = None  # with `into` (a stage's output): the manifest publish writes

    def metrics(self) -> dict[str, Any]:
        return {
            "inputs": self.inputs,
            "rows": self.rows,
            "rejects": self.rejects,
            "rejects_by_reason": dict(sorted(self.by_reason.items())),
        }


def check_text(value: Any, where: str) -> None:
    """Reject lone surrogates anywhere in a parsed JSON value (they cannot be written as UTF-8).
    Iterative: a value nested as deep as a parser allows does not exhaust the stack."""
    if isinstance(value, str):  # the common case, without the stack
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise Reject("lone_surrogate", f"{where} holds a lone surrogate") from None
        return
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise Reject("lone_surrogate", f"{where} holds a lone surrogate") from None
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def trajectory_row(
    *,
    source: str,
    task: str,
    messages: list[dict[str, str]],
    trace_source: str,
    run_id: str | None,
    trial_name: str | None,
    episode: str | None,
    n_episodes: int | None,
    agent: str | None,
    model: str | None,
    model_provider: str | None,
    date: str | None,
    result: str | None,
    reward: float | None,
    exception_type: str | None,
    renderer: str,
    provenance: list[dict[str, str]],
    row_index: int | None,
) -> dict[str, Any]:
    """Validate messages, derive the computed columns and the content id of one trajectory.

    The text is valid: it was parsed by orjson or read from Arrow, which refuse invalid UTF-8 and
    lone surrogates; the one reader that accepts them (the stdlib fallback for `.json` tables)
    rejects such rows itself (`check_text`)."""
    if not messages:
        raise Reject("empty_conversation", "the conversation has no messages")
    roles = [m["role"] for m in messages]
    if not _KNOWN_ROLES.issuperset(roles):
        i = next(i for i, role in enumerate(roles) if role not in _KNOWN_ROLES)
        raise Reject("unknown_role", f"message {i} has role {roles[i]!r} (known: {', '.join(ROLES)})")
    n_assistant = roles.count("assistant")
    if n_assistant == 0:
        raise Reject("empty_conversation", f"{len(messages)} messages but no assistant turn")
    identity = [source, task, run_id, trial_name, trace_source, episode]
    conversation = sha256_bytes(canonical_json(messages))  # hashed once here, never again downstream
    return {
        "trajectory_id": content_id("trajectory", [identity, conversation]),
        "task_id": task_id_for(source, task),
        "source": source,
        "task": task,
        "run_id": run_id,
        "trial_name": trial_name,
        "episode": episode,
        "n_episodes": n_episodes,
        "trace_source": trace_source,
        "agent": agent,
        "model": model,
        "model_provider": model_provider,
        "date": date,
        "messages": messages,
        "conversation_sha256": conversation,
        "n_messages": len(messages),
        "n_assistant_turns": n_assistant,
        "n_chars": sum(len(m["content"]) for m in messages),
        "result": result,
        "reward": reward,
        "exception_type": exception_type,
        "timed_out": exception_type in TIMEOUT_EXCEPTIONS,
        "is_subagent": trace_source != "main",
        "renderer": renderer,
        "provenance": provenance,
        "row_index": row_index,
    }


def reject_row(source: str, input_kind: str, unit: Unit, reason: str, detail: str) -> dict[str, Any]:
    body = {
        "source": source,
        "input_kind": input_kind,
        "path": unit.path,
        "row_index": unit.row_index,
        "trace_source": unit.trace_source,
        "reason": reason,
        "detail": detail,
    }
    return {"reject_id": content_id("reject", body), **body}


def inputs_digest(listing: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """Summarise the input files as a count and a hash of the sorted (path, sha256) listing."""
    items = sorted(listing)
    return {"files": len(items), "sha256": sha256_bytes(canonical_json(items))}


def run_ingest(
    *,
    table: str,
    input_kind: str,
    formulas: dict[str, str],
    batches: Iterator[tuple[list[Unit], Callable[[list[Unit]], list[dict | Reject]]] | Parsed],
    inputs: Callable[[], dict[str, Any]],
    params: dict[str, Any] | None = None,
    out_dir: Path,
    source: str,
    strict: bool,
    metrics_path: Path | None = None,
    scratch: Path | None = None,
    on_progress: Callable[[int], None] | None = None,
    into: Path | None = None,
) -> IngestResult:
    """Drive one ingest: what it is (the table it writes, its input kind, the formulas of its rows),
    what it reads (batches, the description of its inputs, its own params), where it writes (out_dir,
    for source) and how (strict, metrics_path, a scratch directory to remove).

    Each batch is (units, process), where process returns one outcome per unit, or a Parsed batch
    (processed by a worker, its rows already a part file). Batches are processed in the order given
    (callers sort them), rows are streamed to Parquet, rejects are sorted and written after; the
    manifest is written last and the directory is swapped into place only when everything
    succeeded (core/stage.py write_output). The manifest's inputs are the input kind and `inputs()`,
    its params the source, the input kind and `params`. `into`: the temporary directory publish opened
    for out_dir (the ingest stage's output): the tables are written there and the manifest, returned
    as `written`, is left to publish. `scratch`, where the workers write their parts, is removed at
    the end, whatever happens.
    """
    check(into is None or metrics_path is None, "an ingest into a stage's output has the stage's metrics")
    result = IngestResult(out_dir, 0, 0, 0)

    def write(tmp: Path) -> Manifest:
        n_inputs = n_rows = 0
        rejects: list[dict[str, Any]] = []
        writer = table_writer(tmp, load_schema(table))
        for batch in batches:
            if isinstance(batch, Parsed):
                units, outcomes = batch.units, batch.rejects
            else:
                units, process = batch
                outcomes = process(units)
            check(len(outcomes) == len(units), f"{len(units)} units but {len(outcomes)} outcomes")
            n_inputs += len(units)
            for unit, outcome in zip(units, outcomes):
                if isinstance(outcome, Reject):
                    if strict:
                        raise RejectedInput(
                            f"{unit.path}{'' if unit.row_index is None else f' row {unit.row_index}'}: "
                            f"{outcome.reason} ({outcome.detail}); without --strict it is recorded in "
                            f"rejects and ingest goes on"
                        )
                    rejects.append(reject_row(source, input_kind, unit, outcome.reason, outcome.detail))
                elif outcome is not None:
                    writer.write(outcome)
                    n_rows += 1
            if isinstance(batch, Parsed):
                check(len(batch.keys) == outcomes.count(None), "a parsed batch's rows and rejects disagree")
                check(isinstance(writer, PartedTableWriter), f"{table} is not stored in parts")
                if batch.part is not None:
                    writer.add_part(batch.part, batch.keys)
                n_rows += len(batch.keys)
            if on_progress:
                on_progress(len(units))
        info = writer.close()
        rejects.sort(
            key=lambda r: (
                r["path"],
                r["row_index"] if r["row_index"] is not None else -1,
                r["trace_source"] or "",
                r["reason"],
                r["reject_id"],
            )
        )
        reject_writer = table_writer(tmp, load_schema("rejects"))
        for r in rejects:
            reject_writer.write(r)
        reject_info = reject_writer.close()
        by_reason: dict[str, int] = {}
        for r in rejects:
            by_reason[r["reason"]] = by_reason.get(r["reason"], 0) + 1
        result.inputs, result.rows, result.rejects, result.by_reason = n_inputs, n_rows, len(rejects), by_reason
        check(result.inputs == result.rows + result.rejects, f"ingest accounting: {result.metrics()}")
        return Manifest(
            kind=f"ingest-{input_kind}",
            tables=[info, reject_info],
            inputs={"kind": input_kind, **inputs()},
            params={"source": source, "input_kind": input_kind, **(params or {})},
            formulas=formulas,
            counts={"source": source, **result.metrics()},
        )

    try:
        if into is not None:
            result.written = write(into)
            return result
        result.manifest = write_output(Streamed(out_dir, write))
        if metrics_path is not None:
            metrics_path.parent.mkdir(parents=True, exist_ok=True)
            write_json(
                metrics_path, {"source": source, "version_id": result.manifest["version_id"], **result.metrics()}
            )
        return result
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


FALLBACK_MAX_DEPTH = 500  # the stdlib parser recurses: deeper malformed JSON is json_too_deep


def json_depth(text: str) -> int:
    """How deep brackets nest in JSON text, strings skipped (regexes: no recursion, C speed)."""
    import re

    brackets = re.findall(r"[\[\]{}]", re.sub(r'"[^"\\]*(?:\\.[^"\\]*)*"', "", text))
    depth = deepest = 0
    for b in brackets:
        depth += 1 if b in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def parse_json_bytes(data: bytes, where: str) -> Any:
    """Parse strict UTF-8 JSON; every failure is a Reject with the precise reason.

    orjson refuses nesting deeper than 1024 (json_too_deep). When it fails, the stdlib parser looks
    again only to tell a lone surrogate from other errors, and only at text nested at most
    FALLBACK_MAX_DEPTH deep: it recurses, and its limit would depend on the caller's stack."""
    import json

    import orjson

    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as e:
        if "depth limit" in str(e):
            raise Reject("json_too_deep", f"{where} nests deeper than 1024 levels ({e})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Reject(
            "invalid_utf8", f"{where}: byte {e.start} is not UTF-8 ({data[e.start : e.start + 4]!r})"
        ) from None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as e:
        if json_depth(text) > FALLBACK_MAX_DEPTH:
            raise Reject(
                "json_too_deep", f"{where} is not valid JSON and nests deeper than {FALLBACK_MAX_DEPTH} levels ({e})"
            ) from None
        try:  # the stdlib parser accepts lone surrogate escapes, orjson does not: tell them apart
            value = json.loads(text)
        except json.JSONDecodeError:
            raise Reject("unparsable_json", f"{where}: {e}") from None
        check_text(value, where)
        raise Reject("unparsable_json", f"{where}: {e}") from None
