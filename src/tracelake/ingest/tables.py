"""Reading row tables (Parquet / JSONL / JSON) as ingest units, shared by traces and tasks ingest.

A `.parquet` file is read in record batches, a `.jsonl` file line by line (blank lines skipped),
a `.json` file as a list of rows or {"rows": [...]} (items may be wrapped as {"row_idx", "row"},
as the Hugging Face datasets server returns them). A directory stands for the sorted table files
directly in it. Each row becomes a Unit (row_index = 0-based row or line number); a file that
cannot be read as a whole becomes one Unit carrying its Reject.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tracelake.core.errors import BadInput
from tracelake.core.hashing import sha256_bytes, sha256_file
from tracelake.ingest.common import Reject, Unit, check_text, parse_json_bytes
from tracelake.ingest.validate import json_kind
from tracelake.ingest.walk import Root, display, listing

TABLE_SUFFIXES = (".parquet", ".jsonl", ".json")
JSONL_BLOCK_BYTES = 32 << 20  # a JSONL file is read in blocks of whole lines of about this size


@dataclass(frozen=True)
class Input:
    """A file to ingest, or a path that is no input and why: (reason, what is wrong), the whole of
    it one reject (walk.py: a link out of its directory, an unreadable directory, a name that is
    not UTF-8). Nothing of a problem is read."""

    path: Path
    problem: tuple[str, str] | None = None
    linked: bool = False  # found in a directory through a symlink (that stays inside it)


def expand_inputs(paths: Sequence[Path]) -> list[Input]:
    """Files in the order given, directories replaced by their sorted table files. A directory is
    an input root: an entry that links out of it is a problem, never read (walk.py)."""
    inputs: list[Input] = []
    for p in map(Path, paths):
        if os.path.isdir(p):
            inputs.extend(_directory_inputs(p))
        elif os.path.exists(p):
            inputs.append(Input(p))
        else:
            raise BadInput(f"{display(str(p))} does not exist")
    if not inputs:
        raise BadInput("no input files given")
    seen: dict[Path, Path] = {}
    for i in inputs:
        if i.problem is None and not i.linked:  # a link inside a directory: its rows are duplicates
            first = seen.setdefault(i.path.resolve(), i.path)
            if first is not i.path:
                raise BadInput(
                    f"{display(str(i.path))} is named twice (also as {display(str(first))}); name each input file once"
                )
    return inputs


def _directory_inputs(directory: Path) -> list[Input]:
    root = Root(directory)
    try:
        entries = listing(directory)
    except OSError as e:
        return [Input(directory, ("unreadable_file", f"the directory cannot be listed ({e.strerror or e})"))]
    found = []
    for e in entries:
        path = Path(e.path)
        if e.name.startswith(".") or path.suffix.lower() not in TABLE_SUFFIXES or not os.path.isfile(path):
            continue
        linked = e.is_symlink()
        if linked and not root.contains(path):
            found.append(Input(path, ("symlink_outside_input", "links outside its directory; not read")))
        else:
            found.append(Input(path, linked=linked))
    if not found:
        raise BadInput(f"{display(str(directory))} holds no .parquet, .jsonl or .json files")
    return found


def relative_paths(files: Sequence[Path]) -> list[str]:
    """Each file relative to the common parent directory of all of them, '/'-separated (bytes that
    are not UTF-8 kept as surrogate escapes: `walk.display` writes them as text)."""
    absolute = [Path(os.path.abspath(f)) for f in files]
    root = Path(os.path.commonpath([str(a.parent) for a in absolute]))
    return [a.relative_to(root).as_posix() for a in absolute]


def problem_batch(rel: str, problem: tuple[str, str]) -> RawBatch:
    """The one-unit batch that stands for an Input with a problem."""
    reason, what = problem
    return RawBatch(rel, reject=Reject(reason, f"{rel}: {what}"))


@dataclass
class RawBatch:
    """Up to batch_size rows of one file, cheap to send to a worker process: a byte range of whole
    JSONL lines (read where it is processed), a Parquet record batch, JSON rows, or a Reject
    standing for the whole file. `units()` turns it into Units wherever it is processed."""

    rel: str
    start: int = 0  # the first row's (or line's) 0-based index in its file
    path: str | None = None  # JSONL: the file, and the byte range of whole lines
    offset: int = 0
    length: int = 0
    arrow: pa.RecordBatch | None = None
    rows: list[Any] | None = None
    reject: Reject | None = None

    def units(self) -> list[Unit]:
        if self.reject is not None:
            return [Unit(path=self.rel, payload=self.reject)]
        if self.path is not None:
            return [
                Unit(path=self.rel, row_index=self.start + i, payload=line)
                for i, line in enumerate(self._read_lines())
                if line and not line.isspace()
            ]
        rows = _pylist(self.arrow) if self.arrow is not None else [_unwrap(r) for r in self.rows]
        return [Unit(path=self.rel, row_index=self.start + i, payload=row) for i, row in enumerate(rows)]

    def _read_lines(self) -> list[bytes]:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            block = f.read(self.length)
        if len(block) != self.length:
            raise BadInput(f"{self.rel} changed while it was being ingested (it is shorter now); run again")
        return block.split(b"\n")


def table_units(
    path: Path, rel: str, *, columns: Sequence[str], batch_size: int, hashes: dict[str, str]
) -> Iterator[list[Unit]]:
    """The rows of one table file as batches of units; records the file's sha256 in hashes.

    A unit's payload is a row (dict), a JSONL line (bytes, parsed by row_object) or a Reject
    that stands for the whole file (row_index None).
    """
    for raw in raw_batches(path, rel, columns=columns, batch_size=batch_size, hashes=hashes):
        yield raw.units()


def raw_batches(
    path: Path, rel: str, *, columns: Sequence[str], batch_size: int, hashes: dict[str, str]
) -> Iterator[RawBatch]:
    """table_units before the rows are decoded: what a worker process receives."""
    suffix = path.suffix.lower()
    if suffix not in TABLE_SUFFIXES or not path.is_file():
        what = "not a regular file" if suffix in TABLE_SUFFIXES else f"extension {suffix or '(none)'!r}"
        yield _file_reject(rel, "unsupported_file", f"{what}; expected {', '.join(TABLE_SUFFIXES)}")
        return
    if suffix == ".json":  # read whole anyway: hashed from the same bytes
        yield from _json_batches(path, rel, batch_size, hashes)
    elif suffix == ".jsonl":
        yield from _jsonl_batches(path, rel, JSONL_BLOCK_BYTES, hashes)
    else:
        try:  # rows carry their file's hash, so the file is hashed before its rows are read
            if rel not in hashes:
                hashes[rel] = sha256_file(path)
        except OSError as e:
            yield _file_reject(rel, "unreadable_file", f"{rel}: {e.strerror or e}")
            return
        yield from _parquet_batches(path, rel, columns, batch_size)


def _file_reject(rel: str, reason: str, detail: str) -> RawBatch:
    return RawBatch(rel, reject=Reject(reason, detail))


def _parquet_batches(path: Path, rel: str, columns: Sequence[str], batch_size: int) -> Iterator[RawBatch]:
    try:
        pf = pq.ParquetFile(path, pre_buffer=False)  # read ahead is kept: memory would grow with the file
        wanted = [c for c in pf.schema_arrow.names if c in columns] or None
        batches = pf.iter_batches(batch_size=batch_size, columns=wanted)
    except (OSError, pa.ArrowException) as e:
        yield _file_reject(rel, "unreadable_file", f"not a readable Parquet file: {e}")
        return
    start = 0
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (OSError, pa.ArrowException) as e:
            yield _file_reject(rel, "unreadable_file", f"rows from {start} on could not be read: {e}")
            return
        yield RawBatch(rel, start, arrow=batch)
        start += batch.num_rows


def _pylist(batch: pa.RecordBatch) -> list[Any]:
    """Rows of a batch; a row whose strings are not UTF-8 becomes an invalid_utf8 Reject."""
    try:
        return batch.to_pylist()
    except UnicodeDecodeError:
        rows: list[Any] = []
        for i in range(batch.num_rows):
            try:
                rows.append(batch.slice(i, 1).to_pylist()[0])
            except UnicodeDecodeError as e:
                rows.append(Reject("invalid_utf8", f"a string column holds bytes that are not UTF-8 ({e.reason})"))
        return rows


def _jsonl_batches(path: Path, rel: str, block_bytes: int, hashes: dict[str, str]) -> Iterator[RawBatch]:
    """Byte ranges of whole lines (about block_bytes each), found in one pass that also hashes the
    file (rows carry its hash, so the pass ends before the first range is handed out); whoever
    processes a range reads it."""
    ranges, offset, line = [], 0, 0
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while block := f.read(block_bytes):
                if not block.endswith(b"\n"):
                    block += f.readline()  # finish the last line (one copy of the block)
                h.update(block)
                ranges.append(RawBatch(rel, line, path=str(path), offset=offset, length=len(block)))
                offset += len(block)
                line += block.count(b"\n")
    except OSError as e:
        yield _file_reject(rel, "unreadable_file", f"reading stopped: {e.strerror or e}")
        return
    hashes[rel] = h.hexdigest()
    yield from ranges


def _json_batches(path: Path, rel: str, batch_size: int, hashes: dict[str, str]) -> Iterator[RawBatch]:
    checked = True  # orjson refuses lone surrogates; the stdlib fallback below does not
    try:
        data = path.read_bytes()
        hashes[rel] = sha256_bytes(data)
        doc = parse_json_bytes(data, rel)
    except OSError as e:
        yield _file_reject(rel, "unreadable_file", f"{rel}: {e.strerror or e}")
        return
    except Reject as r:
        if r.reason != "lone_surrogate":
            yield RawBatch(rel, reject=r)
            return
        doc, checked = json.loads(data.decode("utf-8")), False
    rows = doc.get("rows") if isinstance(doc, dict) else doc
    if not isinstance(rows, list):
        yield _file_reject(rel, "invalid_field", 'expected a JSON list of rows or {"rows": [...]}')
        return
    if not checked:  # a row holding a lone surrogate is rejected alone
        rows = [_without_surrogates(item) for item in rows]
    for start in range(0, len(rows), batch_size):
        yield RawBatch(rel, start, rows=rows[start : start + batch_size])


def _without_surrogates(item: Any) -> Any:
    """The item, or the lone_surrogate Reject that stands for it (as for a JSONL line)."""
    try:
        check_text(item, "the row")
    except Reject as r:
        return r
    return item


def _unwrap(item: Any) -> Any:
    """{"row_idx": n, "row": {...}} (datasets-server rows) -> the row itself."""
    if isinstance(item, dict) and isinstance(item.get("row"), dict) and "conversations" not in item:
        return item["row"]
    return item


def row_object(unit: Unit) -> dict[str, Any]:
    """The row a unit stands for, as a dict; raises the unit's Reject if it has one."""
    payload = unit.payload
    if isinstance(payload, Reject):
        raise payload
    if isinstance(payload, bytes):
        payload = parse_json_bytes(payload, f"line {unit.row_index + 1}")  # as editors count
    if not isinstance(payload, dict):
        raise Reject("invalid_field", f"the row is a JSON {json_kind(payload)}, not an object")
    return payload


def required_str(row: dict[str, Any], name: str) -> str:
    """A field the row cannot do without: a non-blank string, else the matching Reject."""
    value = row.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise Reject("missing_required_field", f"the row has no {name}")
    if not isinstance(value, str):
        raise Reject("invalid_field", f"{name} is a {json_kind(value)}, not a string")
    check_text(value, name)
    return value
