"""The segment token count cache: (tokenizer sha256, segment hash) -> token count, on disk.
It also keeps whole renderings' totals under their own keys (token_count.rendering_key).

    <cache>/<tokenizer sha256[:16]>/part-<content hash>.parquet    columns k1, k2 (uint64), n (uint32)

A segment's key is 16 bytes of blake2b (token_count.segment_key), stored as two uint64 halves; each
part is sorted by k1. The cache only ever answers "this exact text, this exact tokenizer: n
tokens", so a lost or removed cache costs time, never a different result. Parts are written under
a temporary name and renamed, and named by their content, so concurrent stages never see half a
part; past MAX_PARTS parts a run compacts what it read and wrote into one.

In memory each part is a run: a polars frame sorted by k1 (20 bytes an entry: 10M segments take
200 MB), searched in bulk per batch, in place (numpy views of its columns), largest run first and
each later run only for the keys still unknown. The newest entries wait in a dict; every MERGE_EVERY of them
become a part on disk (an interrupted run keeps what it counted) and one more run in memory. Runs
are never merged in memory, so a run's memory is its entries and nothing more: no transient copy
of the whole cache until compaction. A lookup compares both halves of a key, so it never returns
another key's count; two keys agreeing on k1 (1 in 2^64) may make one of them a miss, counted again.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import polars as pl

MERGE_EVERY = 500_000
MAX_PARTS = 16
_SCHEMA = {"k1": pl.UInt64, "k2": pl.UInt64, "n": pl.UInt32}


def _halves(keys: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """16-byte keys -> their two little-endian uint64 halves."""
    words = np.frombuffer(b"".join(keys), dtype="<u8")
    return words[0::2], words[1::2]


def _sorted_run(frame: pl.DataFrame) -> pl.DataFrame:
    """Sorted by k1, with a repeated (k1, k2) entry kept once where the sort puts them side by side."""
    frame = frame.sort("k1", maintain_order=True)
    if frame.height > 1:
        frame = frame.filter(
            (pl.col("k1") != pl.col("k1").shift(1))
            | (pl.col("k2") != pl.col("k2").shift(1))
            | pl.int_range(pl.len()).eq(0)
        )
    return frame.rechunk()


class SegmentCache:
    """Token counts by segment key for one tokenizer; `root=None` keeps them in memory only."""

    def __init__(self, root: Path | None, tokenizer_sha256: str):
        self.dir = Path(root) / tokenizer_sha256[:16] if root else None
        self._runs: list[pl.DataFrame] | None = None  # sorted by k1; the parts, loaded on first use
        self._parts: list[Path] = []  # parts read or written by this process
        self._pending: dict[bytes, int] = {}  # newest entries, not yet a run
        self._pid = os.getpid()  # a copy in a process forked from this one never writes (`add`)
        self.read_only = False  # True: never writes a part (a worker's cache: the driver saves its entries)

    def _loaded(self) -> list[pl.DataFrame]:
        if self._runs is None:
            self._runs = []
            if self.dir is not None and self.dir.is_dir():
                for part in sorted(self.dir.glob("part-*.parquet")):
                    try:
                        run = pl.read_parquet(part, columns=list(_SCHEMA)).cast(_SCHEMA)
                    except (OSError, pl.exceptions.PolarsError):
                        continue  # removed by a concurrent compaction, or damaged: recount instead
                    if not run["k1"].is_sorted():
                        run = _sorted_run(run)  # written by hand, or by another tool
                    self._runs.append(run.rechunk())  # one buffer a column: searched in place
                    self._parts.append(part)
        return self._runs

    def __len__(self) -> int:
        """Entries known (a key kept by two parts counts twice)."""
        return sum(run.height for run in self._loaded()) + len(self._pending)

    def lookup(self, keys: list[bytes]) -> list[int | None]:
        """The count of each key, or None where no count is known."""
        if not keys:
            return []
        # largest run first (after a compaction it holds nearly everything); each later run is
        # searched only for the keys still unknown
        runs = sorted((run for run in self._loaded() if run.height), key=lambda run: -run.height)
        found: list[int | None] = [None] * len(keys)
        if runs:
            k1, k2 = _halves(keys)
            counts = np.full(len(keys), -1, dtype=np.int64)
            todo = np.arange(len(keys))
            for run in runs:
                r1, r2, rn = (run[c].to_numpy() for c in _SCHEMA)
                q1 = k1[todo]
                idx = np.minimum(np.searchsorted(r1, q1, side="left"), run.height - 1)
                hit = (r1[idx] == q1) & (r2[idx] == k2[todo])
                counts[todo[hit]] = rn[idx[hit]]
                todo = todo[~hit]
                if not len(todo):
                    break
            found = [None if c < 0 else c for c in counts.tolist()]
        if self._pending:
            get = self._pending.get
            found = [get(k) if f is None else f for k, f in zip(keys, found)]
        return found

    def load(self) -> None:
        """Read the parts now (else at the first lookup). A process about to fork workers that will
        look up keys loads first: polars, which reads the parts, can hang in a forked child."""
        self._loaded()

    def add(self, keys: list[bytes], counts: list[int]) -> None:
        self._pending.update(zip(keys, counts))
        if len(self._pending) >= MERGE_EVERY:
            if self.read_only or os.getpid() != self._pid:
                self._pending = {}  # a worker's: the driver has them (token_count.absorb) and saves them
            else:
                self.flush()

    def flush(self) -> None:
        """The pending entries -> a part on disk and a run in memory."""
        if not self._pending:
            return
        k1, k2 = _halves(list(self._pending))
        run = _sorted_run(
            pl.DataFrame({"k1": k1, "k2": k2, "n": pl.Series(list(self._pending.values()), dtype=pl.UInt32)})
        )
        self._pending = {}
        self._loaded().append(run)
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._parts.append(_write_part(self.dir, run))

    def save(self) -> None:
        """Write the entries added since the last part; past MAX_PARTS parts, compact into one."""
        self.flush()
        if self.dir is None or not self.dir.is_dir() or len(list(self.dir.glob("part-*.parquet"))) <= MAX_PARTS:
            return
        compacted = _sorted_run(pl.concat(self._loaded()))  # what this process read, plus its own
        merged = _write_part(self.dir, compacted)
        for part in set(self._parts) - {merged}:
            part.unlink(missing_ok=True)
        self._runs, self._parts = [compacted], [merged]


def _write_part(directory: Path, frame: pl.DataFrame) -> Path:
    tmp = directory / f".part.tmp-{os.getpid()}"
    frame.write_parquet(tmp, compression="zstd", statistics=False)
    h = hashlib.sha256()
    with open(tmp, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    final = directory / f"part-{h.hexdigest()[:16]}.parquet"
    tmp.replace(final)
    return final
