"""Incremental ingest: each input file's parsed batches, kept under its content.

A file that was ingested before, with the same bytes, the same name within its source and the same
ingest code, is not parsed again: its batches come back from

    <cache>/<key[:2]>/<key>.json           per batch: its units (row index, trace source, reject),
                                           its rows' keys, and its part's size and sha256
    <cache>/<key[:2]>/<key>-<i>.parquet    the part of batch i (`lake.write_part`), if it has rows

where key = sha256 of (the ingest and core code and the table's schema, source, file path, file sha256).
A file's sha256 is itself remembered by its stat, as DVC's state does:

    <cache>/stat/<key[:2]>/<key>           the file's sha256, where key = sha256 of (its resolved
                                           path, device, inode, size, mtime and ctime in ns)

so an unchanged input file is neither read nor hashed again. Any write to a file changes its
ctime, which no tool can set back; a stat taken before and after hashing must agree for the hash
to be remembered.

Batches are stored before duplicates are looked for, so a hit goes through the same checks as a
parse and the output is byte-identical to a full rebuild. Parts are copied both ways, never linked:
a lake file and a cache file never share their bytes, and a part whose bytes changed is an error.
Entries are written under temporary names and renamed, the index last; an entry whose index is
missing or unreadable is a miss (parsed again). Deleting the cache costs time only.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import orjson

from tracelake.core.assets import asset_dir
from tracelake.core.errors import BadInput
from tracelake.core.schema import TableSchema
from tracelake.ingest.common import Parsed, Reject, Unit

_COPY_BLOCK = 4 << 20


@functools.cache
def code_digest() -> str:
    """sha256 over the code that makes trajectory rows (tracelake/ingest, tracelake/core) and the
    trajectories schema: any change to them makes every cached file stale."""
    package = Path(__file__).resolve().parents[1]
    files = [
        *sorted((package / "ingest").glob("*.py")),
        *sorted((package / "core").glob("*.py")),
        asset_dir("schemas") / "trajectories.yaml",
    ]
    h = hashlib.sha256()
    for path in files:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def copy_hashed(src: Path, dst: Path) -> tuple[int, str]:
    """Copy src to dst (created, not overwritten); return dst's size and sha256."""
    h, size = hashlib.sha256(), 0
    with open(src, "rb") as fin, open(dst, "xb") as fout:
        while block := fin.read(_COPY_BLOCK):
            h.update(block)
            fout.write(block)
            size += len(block)
    return size, h.hexdigest()


def _stat_key(path: Path, st: os.stat_result) -> str:
    return hashlib.sha256(
        orjson.dumps([str(path.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns])
    ).hexdigest()


class FileCache:
    """Parsed batches of whole input files, for one table and source; root None: no cache."""

    def __init__(self, root: Path | None, schema: TableSchema, source: str):
        self.root = Path(root) if root else None
        self.schema, self.source = schema, source
        self.hits = 0

    def known_sha256(self, path: Path) -> tuple[str | None, os.stat_result | None]:
        """(the sha256 remembered for the file as it stands, or None; its stat now, or None)."""
        if self.root is None:
            return None, None
        try:
            st = os.stat(path)
        except OSError:
            return None, None
        key = _stat_key(path, st)
        try:
            sha = (self.root / "stat" / key[:2] / key).read_text()
        except (OSError, UnicodeDecodeError):
            return None, st
        return (sha, st) if len(sha) == 64 else (None, st)

    def remember_sha256(self, path: Path, before: os.stat_result | None, sha256: str) -> None:
        """Remember the file's sha256 under its stat, if its stat did not change while it was hashed."""
        if self.root is None or before is None:
            return
        try:
            st = os.stat(path)
        except OSError:
            return
        if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) != (
            before.st_dev,
            before.st_ino,
            before.st_size,
            before.st_mtime_ns,
            before.st_ctime_ns,
        ):
            return
        key = _stat_key(path, st)
        final = self.root / "stat" / key[:2] / key
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f"{key}.tmp-{os.getpid()}")
        tmp.write_text(sha256)
        tmp.replace(final)

    def _base(self, rel: str, sha256: str) -> Path:
        key = hashlib.sha256(orjson.dumps([code_digest(), self.schema.name, self.source, rel, sha256])).hexdigest()
        return self.root / key[:2] / key

    def get(self, rel: str, sha256: str, into: Path) -> Iterator[Parsed] | None:
        """The file's batches, one at a time, each part copied into the directory `into`; None
        when the file is not cached."""
        if self.root is None:
            return None
        base = self._base(rel, sha256)
        try:
            specs = orjson.loads(base.with_suffix(".json").read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None
        self.hits += 1
        return _replay(rel, specs, base, Path(into))

    def writer(self, rel: str, sha256: str) -> "EntryWriter | None":
        if self.root is None:
            return None
        return EntryWriter(self._base(rel, sha256))


def _replay(rel: str, specs: list[dict], base: Path, into: Path) -> Iterator[Parsed]:
    for i, spec in enumerate(specs):
        try:
            units = [Unit(path=rel, row_index=row, trace_source=ts) for row, ts, _, _ in spec["units"]]
            rejects = [None if reason is None else Reject(reason, detail) for _, _, reason, detail in spec["units"]]
            part = None
            if spec["part"] is not None:
                part = into / f".cached-{base.name[:16]}-{i}.parquet"
                if copy_hashed(base.with_name(f"{base.name}-{i}.parquet"), part) != tuple(spec["part"]):
                    raise ValueError("a part's bytes changed")
            yield Parsed(units, rejects, part, spec["keys"])
        except (OSError, KeyError, TypeError, ValueError) as e:
            raise BadInput(
                f"the ingest cache entry {base}.json is damaged ({e}); delete it (or the whole "
                f"ingest cache) and run again"
            ) from None


class EntryWriter:
    """Collects one file's batches as they are parsed; `commit` makes the entry visible."""

    def __init__(self, base: Path):
        self.base = base
        base.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = f".tmp-{os.getpid()}"
        self._parts: list[Path] = []
        self._specs: list[dict] = []

    def add(self, parsed: Parsed) -> None:
        i = len(self._specs)
        part = None
        if parsed.part is not None:
            final = self.base.with_name(f"{self.base.name}-{i}.parquet")
            tmp = final.with_name(final.name + self._tmp)
            tmp.unlink(missing_ok=True)
            part = copy_hashed(parsed.part, tmp)
            self._parts.append(final)
        self._specs.append(
            {
                "part": part,
                "keys": parsed.keys,
                "units": [
                    [u.row_index, u.trace_source, r.reason if r else None, r.detail if r else None]
                    for u, r in zip(parsed.units, parsed.rejects)
                ],
            }
        )

    def commit(self) -> None:
        for final in self._parts:
            final.with_name(final.name + self._tmp).replace(final)
        index = self.base.with_suffix(".json")
        tmp = index.with_name(index.name + self._tmp)
        tmp.write_bytes(orjson.dumps(self._specs))
        tmp.replace(index)  # last: an entry without its index is a miss

    def abort(self) -> None:
        for final in self._parts:
            final.with_name(final.name + self._tmp).unlink(missing_ok=True)
