"""What the control-token screen (filter rule special_token_in_text_v1) answered for each conversation,
kept so that a rerun reads messages only for conversations it has not screened.

    <tokenizer.cache>/screens/<patterns sha256[:16]>/part-<content sha256[:16]>.parquet
        conversation_sha256 (string), detail (string, null: nothing found)

The rule is the one query in the filter that reads every message of every row (5.8 of 8.5 s of a
20,000-row filter run). Its answer depends on the conversation and on the two patterns alone (the
control tokens of the tokenizer under the training template), and equal conversations have equal
content hashes, so the answer is kept under (patterns, conversation_sha256). The cache answers
only "this conversation, these patterns: this detail": a lost or removed cache costs time, never a
different result. Parts are written under a temporary name and renamed; past MAX_PARTS they are
compacted into one.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

MAX_PARTS = 16
SCHEMA = pa.schema([("conversation_sha256", pa.string()), ("detail", pa.string())])


class ScreenCache:
    """The screen's answers for one pair of patterns; `root=None` keeps nothing."""

    def __init__(self, root: Path | None, patterns: dict[str, str]):
        key = hashlib.sha256(json.dumps(patterns, sort_keys=True).encode()).hexdigest()[:16]
        self.dir = Path(root) / "screens" / key if root else None

    def _parts(self) -> list[Path]:
        return sorted(self.dir.glob("part-*.parquet")) if self.dir is not None and self.dir.is_dir() else []

    def known(self) -> pa.Table:
        """Every answer kept: (conversation_sha256, detail), a conversation at most once."""
        tables = []
        for part in self._parts():
            try:
                tables.append(
                    pq.ParquetFile(part).read().cast(SCHEMA)
                )  # not read_table: pyarrow.dataset costs 0.3 s to import
            except (OSError, pa.ArrowInvalid):
                continue  # unreadable: those conversations are screened again
        return pa.concat_tables(tables) if tables else SCHEMA.empty_table()

    def add(self, answers: pa.Table) -> None:
        """New answers (conversation_sha256, detail) as one part; past MAX_PARTS, all in one."""
        if self.dir is None or not answers.num_rows:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        parts = self._parts()
        if len(parts) >= MAX_PARTS:
            answers = pa.concat_tables([self.known(), answers.cast(SCHEMA)])
        written = _write(self.dir, answers.cast(SCHEMA).sort_by("conversation_sha256"))
        if len(parts) >= MAX_PARTS:
            for part in parts:
                if part != written:
                    part.unlink(missing_ok=True)


def _write(directory: Path, table: pa.Table) -> Path:
    tmp = directory / f".part.tmp-{os.getpid()}"
    pq.write_table(table, tmp, compression="zstd")
    digest = hashlib.sha256(tmp.read_bytes()).hexdigest()[:16]
    final = directory / f"part-{digest}.parquet"
    tmp.replace(final)
    return final
