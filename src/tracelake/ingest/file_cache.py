"""Incremental ingest: each input file's parsed batches, kept under its content.

A file that was ingested before, with the same bytes, the same name within its source and the same
ingest code, is not parsed again: its batches (rows as Arrow, each unit's reject) are read back from

    <cache>/<key[:2]>/<key>.arrow   the rows, one lz4-compressed Arrow IPC batch per parsed batch
    <cache>/<key[:2]>/<key>.json    per batch: its row count and its units (row index, trace source, reject)

where key = sha256 of (the ingest and core code and the table's schema, source, file path, file sha256).
Batches are stored before duplicates are looked for, so a hit goes through the same checks as a
parse and the output is byte-identical to a full rebuild. Entries are written under temporary names
and renamed; a damaged or half-missing entry is parsed again. Deleting the cache costs time only.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import orjson
import pyarrow as pa

from tracelake.core.assets import asset_dir
from tracelake.core.errors import BadInput, Bug, check
from tracelake.core.schema import TableSchema
from tracelake.ingest.common import Parsed, Reject, Unit

_IPC = pa.ipc.IpcWriteOptions(compression="lz4")


@functools.cache
def code_digest() -> str:
    """sha256 over the code that makes trajectory rows (tracelake/ingest, tracelake/core) and the
    trajectories schema: any change to them makes every cached file stale."""
    package = Path(__file__).resolve().parents[1]
    files = [*sorted((package / "ingest").glob("*.py")), *sorted((package / "core").glob("*.py")),
             asset_dir("schemas") / "trajectories.yaml"]
    h = hashlib.sha256()
    for path in files:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


class FileCache:
    """Parsed batches of whole input files, for one table and source; root None: no cache."""

    def __init__(self, root: Path | None, schema: TableSchema, source: str):
        self.root = Path(root) if root else None
        self.schema, self.source = schema, source
        self.hits = 0

    def _paths(self, rel: str, sha256: str) -> tuple[Path, Path]:
        key = hashlib.sha256(orjson.dumps([code_digest(), self.schema.name, self.source, rel, sha256])).hexdigest()
        base = self.root / key[:2] / key
        return base.with_suffix(".arrow"), base.with_suffix(".json")

    def get(self, rel: str, sha256: str) -> Iterator[Parsed] | None:
        """The file's batches, read one at a time, or None when the file is not cached."""
        if self.root is None:
            return None
        data, meta = self._paths(rel, sha256)
        try:
            specs = orjson.loads(meta.read_bytes())
            reader = pa.ipc.open_stream(pa.OSFile(str(data), "rb"))
        except (OSError, pa.ArrowException, orjson.JSONDecodeError):
            return None
        self.hits += 1
        return _replay(rel, specs, reader, data)

    def writer(self, rel: str, sha256: str) -> "EntryWriter | None":
        if self.root is None:
            return None
        return EntryWriter(*self._paths(rel, sha256), self.schema.arrow)


def _replay(rel: str, specs: list[dict], reader: pa.ipc.RecordBatchStreamReader, data: Path) -> Iterator[Parsed]:
    try:
        for spec in specs:
            batch = reader.read_next_batch()
            check(batch.num_rows == spec["rows"], "row count")
            units = [Unit(path=rel, row_index=i, trace_source=ts) for i, ts, _, _ in spec["units"]]
            rejects = [None if reason is None else Reject(reason, detail) for _, _, reason, detail in spec["units"]]
            yield Parsed(units, rejects, pa.Table.from_batches([batch]))
    except (OSError, StopIteration, pa.ArrowException, Bug) as e:
        raise BadInput(f"the ingest cache entry {data} is damaged ({e}); delete it (or the whole ingest cache) "
                       f"and run again") from None


class EntryWriter:
    """Collects one file's batches as they are parsed; `commit` makes the entry visible."""

    def __init__(self, data: Path, meta: Path, schema: pa.Schema):
        self.data, self.meta = data, meta
        data.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = data.with_name(f".{data.name}.tmp-{os.getpid()}")
        self._sink = pa.OSFile(str(self._tmp), "wb")
        self._writer = pa.ipc.new_stream(self._sink, schema, options=_IPC)
        self._specs: list[dict] = []

    def add(self, parsed: Parsed) -> None:
        table = parsed.table.combine_chunks()
        batch = table.to_batches()[0] if table.num_rows else pa.RecordBatch.from_pylist([], schema=table.schema)
        self._writer.write_batch(batch)
        self._specs.append({"rows": table.num_rows, "units": [
            [u.row_index, u.trace_source, r.reason if r else None, r.detail if r else None]
            for u, r in zip(parsed.units, parsed.rejects)]})

    def commit(self) -> None:
        self._writer.close()
        self._sink.close()
        meta_tmp = self.meta.with_name(f".{self.meta.name}.tmp-{os.getpid()}")
        meta_tmp.write_bytes(orjson.dumps(self._specs))
        self._tmp.replace(self.data)
        meta_tmp.replace(self.meta)   # last: an entry without its .json is a miss

    def abort(self) -> None:
        self._writer.close()
        self._sink.close()
        self._tmp.unlink(missing_ok=True)
