"""The segment token count cache: (tokenizer sha256, segment hash) -> token count, on disk.
It also keeps whole renderings' totals under their own keys (token_count.rendering_key).

    <cache>/<tokenizer sha256[:16]>/part-<content hash>.parquet    columns k1, k2 (uint64), n (uint32)

A segment's key is 16 bytes of blake2b (token_count.segment_key), stored as two uint64 halves; each
part holds the entries one run added, sorted. The cache only ever answers "this exact text, this
exact tokenizer: n tokens", so a lost or removed cache costs time, never a different result. Parts
are written under a temporary name and renamed, and named by their content, so concurrent stages
never see half a part; past MAX_PARTS parts a run compacts them into one.

In memory the entries are one sorted polars frame (20 bytes an entry: 10M segments take 200 MB),
searched in bulk per batch, plus a dict of this run's newest entries that is merged into the frame
every MERGE_EVERY entries.
"""

from __future__ import annotations

import array
import hashlib
import os
import sys
from pathlib import Path

import polars as pl

MERGE_EVERY = 1_000_000
MAX_PARTS = 16
_SCHEMA = {"k1": pl.UInt64, "k2": pl.UInt64, "n": pl.UInt32}


def _halves(keys: list[bytes]) -> tuple[pl.Series, pl.Series]:
    words = array.array("Q")
    words.frombytes(b"".join(keys))
    if sys.byteorder != "little":
        words.byteswap()
    return pl.Series(words[0::2], dtype=pl.UInt64), pl.Series(words[1::2], dtype=pl.UInt64)


class SegmentCache:
    """Token counts by segment key for one tokenizer; `root=None` keeps them in memory only."""

    def __init__(self, root: Path | None, tokenizer_sha256: str):
        self.dir = Path(root) / tokenizer_sha256[:16] if root else None
        self._base: pl.DataFrame | None = None       # sorted by (k1, k2), loaded on first use
        self._loaded_parts: list[Path] = []
        self._pending: dict[bytes, int] = {}          # newest entries, not yet in _base
        self._new: list[pl.DataFrame] = []            # entries added this run (saved by save())

    def _frame(self) -> pl.DataFrame:
        if self._base is None:
            frames = []
            if self.dir is not None and self.dir.is_dir():
                for part in sorted(self.dir.glob("part-*.parquet")):
                    try:
                        frames.append(pl.read_parquet(part).cast(_SCHEMA))
                        self._loaded_parts.append(part)
                    except (OSError, pl.exceptions.PolarsError):
                        continue   # removed by a concurrent compaction, or damaged: recount instead
            self._base = (pl.concat(frames).unique(["k1", "k2"]).sort(["k1", "k2"]) if frames
                          else pl.DataFrame(schema=_SCHEMA))
        return self._base

    def lookup(self, keys: list[bytes]) -> list[int | None]:
        """The count of each key, or None where no count is known."""
        if not keys:
            return []
        base = self._frame()
        found: list[int | None] = [None] * len(keys)
        if len(base):
            k1, k2 = _halves(keys)
            idx = base["k1"].search_sorted(k1, side="left").clip(0, len(base) - 1)
            hit = (base["k1"].gather(idx) == k1) & (base["k2"].gather(idx) == k2)
            found = pl.select(pl.when(hit).then(base["n"].gather(idx))).to_series().to_list()
        if self._pending:
            get = self._pending.get
            found = [get(k) if f is None else f for k, f in zip(keys, found)]
        return found

    def add(self, keys: list[bytes], counts: list[int]) -> None:
        self._pending.update(zip(keys, counts))
        if len(self._pending) >= MERGE_EVERY:
            self._merge()

    def _merge(self) -> None:
        if not self._pending:
            return
        k1, k2 = _halves(list(self._pending))
        fresh = pl.DataFrame({"k1": k1, "k2": k2, "n": pl.Series(list(self._pending.values()), dtype=pl.UInt32)})
        self._new.append(fresh)
        self._base = pl.concat([self._frame(), fresh]).unique(["k1", "k2"]).sort(["k1", "k2"])
        self._pending = {}

    def save(self) -> None:
        """Write this run's new entries as one part (and compact when there are many parts)."""
        self._merge()
        if self.dir is None or not self._new:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        written = _write_part(self.dir, pl.concat(self._new).unique(["k1", "k2"]).sort(["k1", "k2"]))
        self._new = []
        if len(list(self.dir.glob("part-*.parquet"))) > MAX_PARTS:
            merged = _write_part(self.dir, self._frame())   # what this process read, plus its own
            for part in {*self._loaded_parts, written} - {merged}:
                part.unlink(missing_ok=True)
            self._loaded_parts = [merged]


def _write_part(directory: Path, frame: pl.DataFrame) -> Path:
    tmp = directory / f".part.tmp-{os.getpid()}"
    frame.write_parquet(tmp, compression="zstd", statistics=False)
    final = directory / f"part-{hashlib.sha256(tmp.read_bytes()).hexdigest()[:16]}.parquet"
    tmp.replace(final)
    return final
