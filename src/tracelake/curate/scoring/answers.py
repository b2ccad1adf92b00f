"""Model scorers: ask an engine about every task the cache has no answer for, store each answer as
it arrives, and turn answers into scores.

A request's cache key (`request_id`) is (task, scorer, model, sha256 of the rendered prompt,
sampling: temperature, max_tokens, seed, n). The answer cache, <score.cache>/<scorer>/answers/,
holds small Parquet parts (schemas/responses.yaml) written atomically every FLUSH_ROWS answers,
FLUSH_BYTES of text or FLUSH_SECONDS, and when the run ends for any reason (Ctrl-C included): a
crash loses at most the answers of the last few seconds, and a rerun asks only for the rest. Answers paid for are never
asked for again; the scores are recomputed from them every run (cheap).
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracelake.core.assets import sql
from tracelake.core.errors import BadInput, BadParams
from tracelake.core.hashing import canonical_json, content_id
from tracelake.core.schema import load_schema
from tracelake.curate.score_params import ModelParams
from tracelake.curate.scoring.engines import (
    Answer,
    Engine,
    Failure,
    GenRequest,
    Usage,
    request_seed,
)
from tracelake.curate.scoring.runs import ScorerRun, score_row
from tracelake.curate.scoring.scorers import ModelScorer

FLUSH_ROWS = 256
FLUSH_BYTES = 64 << 20  # answer text pending before a flush, whatever the rows
FLUSH_SECONDS = 2.0
COMPACT_PARTS = 64
GROUP_BYTES = 8 << 20  # answer text per row group of a part: what one read of a part holds
READ_BYTES = 64 << 20  # answer text per batch the cache streams out
READ_ROWS = 2048
INDEX_COLUMNS = ["response_id", "request_id", "task_id", "sample", "completion_tokens", "censored"]


class AnswerCache:
    """<directory>/<scorer>/answers/part-<hash>.parquet: answer rows, append-only, named by content.

    Read in bounded memory, whatever the answers weigh: each part is sorted by (task_id, sample) in
    row groups of at most GROUP_BYTES of text, and a run holds only an index of it (keys, lengths and
    positions, read one row group at a time; DuckDB queries the index, never the texts). The texts
    stream out in that order in batches of at most READ_BYTES, a few row groups held at a time."""

    def __init__(self, directory: Path | str, scorer: str):
        self.directory = Path(directory) / scorer / "answers"
        self._pending: list[dict] = []
        self._pending_bytes = 0
        self._last_flush = time.monotonic()
        self.schema = load_schema("responses")
        self._indexes: dict[str, pa.Table] = {}  # part name -> its index (parts never change)

    def parts(self) -> list[Path]:
        return sorted(self.directory.glob("part-*.parquet"))

    # --- the index: keys, lengths and positions of every answer, no text -------------------------

    def _part_index(self, part: Path) -> pa.Table:
        if part.name not in self._indexes:
            self._indexes[part.name] = _read_index(part)
        return self._indexes[part.name]

    def _query(self, con: duckdb.DuckDBPyConnection, select: str, **params: Any) -> duckdb.DuckDBPyRelation | None:
        """`select` over the table `answers` (one row per response_id: its keys, `chars`, `bytes`,
        and where it lies: `part`, `row_group`, `row`); None without parts."""
        parts = self.parts()
        if not parts:
            return None
        indexes = [self._part_index(p) for p in parts]
        index = pa.concat_tables(
            [t.append_column("part", pa.array([rank] * t.num_rows, pa.int32())) for rank, t in enumerate(indexes)]
        )
        con.register("answer_index", index)
        return con.sql(f"WITH answers AS ({sql('answer_cache')}) {select}", params=params or None)

    def complete(self, n: int) -> set[str]:
        """The request ids with all `n` answers cached. Many parts become one first."""
        if len(self.parts()) > COMPACT_PARTS:
            self.compact()
        rel = self._query(
            duckdb.connect(), "SELECT request_id FROM answers GROUP BY request_id HAVING count(*) = $n", n=n
        )
        return set() if rel is None else {k for (k,) in rel.fetchall()}

    def lengths(self, request_ids: list[str]) -> dict[str, tuple[list[int], list[int | None], int]]:
        """request_id -> (characters of each answer, completion tokens of each, censored answers), in
        sample order, for those of `request_ids` that have answers."""
        con = duckdb.connect()
        con.register("wanted", pa.table({"request_id": pa.array(request_ids, pa.string())}))
        rel = self._query(
            con,
            "SELECT request_id, list(chars ORDER BY sample), list(completion_tokens ORDER BY "
            "sample), count_if(censored) FROM answers SEMI JOIN wanted USING (request_id) "
            "GROUP BY request_id",
        )
        return {} if rel is None else {k: (chars, tokens, int(c)) for k, chars, tokens, c in rel.fetchall()}

    # --- the texts, streamed ---------------------------------------------------------------------

    def batches(self, request_ids: list[str] | None = None) -> Iterator[pa.Table]:
        """The answer rows of `request_ids` (None: every answer), ordered by (task_id, sample), in the
        schema's columns, in tables of at most READ_ROWS rows and READ_BYTES of text (or one row)."""
        con = duckdb.connect()
        where = ""
        if request_ids is not None:
            con.register("wanted", pa.table({"request_id": pa.array(request_ids, pa.string())}))
            where = "SEMI JOIN wanted USING (request_id)"
        rel = self._query(
            con, f"SELECT part, row_group, row, bytes FROM answers {where} ORDER BY task_id, sample, response_id"
        )
        if rel is None:
            return
        order = rel.to_arrow_table()
        groups = _RowGroups(self.parts(), self.schema.arrow.names, budget=READ_BYTES)
        for chunk in _chunks(order["bytes"].to_numpy(), READ_ROWS, READ_BYTES):
            yield groups.take(
                order["part"].to_numpy()[chunk], order["row_group"].to_numpy()[chunk], order["row"].to_numpy()[chunk]
            )

    def compact(self) -> Path | None:
        """Every part as one (sorted, streamed), written before the others are removed: a crash in
        between leaves duplicates only, which reading drops."""
        parts = self.parts()
        if not parts:
            return None
        merged = self._write_part(self.batches())
        for part in parts:
            if part != merged:
                part.unlink(missing_ok=True)
                self._indexes.pop(part.name, None)
        return merged

    # --- writing ---------------------------------------------------------------------------------

    def add(self, rows: list[dict]) -> None:
        self._pending.extend(rows)
        self._pending_bytes += sum(len(r["text"]) for r in rows)
        if (
            len(self._pending) >= FLUSH_ROWS
            or self._pending_bytes >= FLUSH_BYTES
            or time.monotonic() - self._last_flush >= FLUSH_SECONDS
        ):
            self.flush()

    def flush(self) -> None:
        if self._pending:
            rows = sorted(self._pending, key=lambda r: (r["task_id"], r["sample"], r["response_id"]))
            self._write_part([self.schema.from_rows(rows)])
            self._pending, self._pending_bytes = [], 0
        self._last_flush = time.monotonic()

    def _write_part(self, tables: Iterable[pa.Table]) -> Path:
        """Sorted rows as one part, row groups of at most GROUP_BYTES of text, written atomically (a
        temporary file, then a rename) and named by the response ids it holds: the same answers
        always make the same part. Its index is kept: the part is never read back for it."""
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / f".part.tmp-{os.getpid()}-{threading.get_ident()}"
        indexes = []
        keys = [c for c in self.schema.arrow.names if c != "text"]  # the text: no dictionary, no statistics
        options = dict(compression="zstd", use_dictionary=keys, write_statistics=keys)
        with pq.ParquetWriter(tmp, self.schema.arrow, **options) as writer:
            for table in tables:
                for group in _groups(table, GROUP_BYTES):
                    indexes.append(_index_of(group, len(indexes)))
                    writer.write_table(group, row_group_size=max(1, group.num_rows))
        index = pa.concat_tables(indexes) if indexes else _index_of(self.schema.arrow.empty_table(), 0)
        ids = sorted(index["response_id"].to_pylist())
        path = self.directory / f"part-{content_id('answer-cache', ids, n_hex=16)}.parquet"
        tmp.replace(path)
        self._indexes[path.name] = index
        return path


def _index_of(group: pa.Table, row_group: int) -> pa.Table:
    """The index rows of one row group: its keys, the length of each text (characters and bytes),
    and each row's position."""
    text = group["text"]
    return pa.table(
        {
            **{c: group[c] for c in INDEX_COLUMNS},
            "chars": pc.utf8_length(text).cast(pa.int64()),
            "bytes": pc.binary_length(text).cast(pa.int64()),
            "row_group": pa.array([row_group] * group.num_rows, pa.int32()),
            "row": pa.array(range(group.num_rows), pa.int32()),
        }
    )


def _read_index(part: Path) -> pa.Table:
    """A part's index, read one row group at a time."""
    file = pq.ParquetFile(part)
    columns = [*INDEX_COLUMNS, "text"]
    indexes = [_index_of(file.read_row_group(g, columns=columns), g) for g in range(file.num_row_groups)]
    return pa.concat_tables(indexes) if indexes else _index_of(load_schema("responses").arrow.empty_table(), 0)


def _groups(table: pa.Table, max_bytes: int) -> Iterator[pa.Table]:
    """`table` in consecutive slices of at most `max_bytes` of text (a longer row alone)."""
    for chunk in _chunks(pc.binary_length(table["text"]).to_numpy(zero_copy_only=False), table.num_rows, max_bytes):
        yield table.slice(chunk.start, chunk.stop - chunk.start)


def _chunks(sizes: np.ndarray, max_rows: int, max_bytes: int) -> Iterator[slice]:
    """Consecutive slices of rows of these sizes: at most `max_rows` rows and `max_bytes` (or one row)."""
    ends = np.cumsum(sizes, dtype=np.int64)
    start = 0
    while start < len(sizes):
        base = ends[start - 1] if start else 0
        fits = int(np.searchsorted(ends, base + max_bytes, side="right"))
        stop = min(max(fits, start + 1), start + max_rows, len(sizes))
        yield slice(start, stop)
        start = stop


class _RowGroups:
    """Rows taken from the row groups of cache parts, the groups read last kept up to `budget` bytes
    of text (least recently used dropped first): rows taken in sorted order read each group about once."""

    def __init__(self, parts: list[Path], columns: list[str], budget: int):
        self.files = [pq.ParquetFile(p) for p in parts]
        self.columns, self.budget = columns, budget
        self._held: OrderedDict[tuple[int, int], pa.Table] = OrderedDict()

    def _group(self, part: int, group: int) -> pa.Table:
        key = (part, group)
        if key in self._held:
            self._held.move_to_end(key)
            return self._held[key]
        table = self.files[part].read_row_group(group, columns=self.columns)
        self._held[key] = table
        while len(self._held) > 1 and sum(t["text"].nbytes for t in self._held.values()) > self.budget:
            self._held.popitem(last=False)
        return table

    def take(self, parts: np.ndarray, groups: np.ndarray, rows: np.ndarray) -> pa.Table:
        """The rows at these positions, in this order: one `take` per run of rows from one group."""
        pieces = []
        start = 0
        for stop in [*np.flatnonzero((np.diff(parts) != 0) | (np.diff(groups) != 0)) + 1, len(rows)]:
            table = self._group(int(parts[start]), int(groups[start]))
            pieces.append(table.take(pa.array(rows[start:stop])))
            start = stop
        return pa.concat_tables(pieces).combine_chunks()


@dataclass
class ModelRun(ScorerRun):
    """A model scorer's run: its scores (ScorerRun.rows), the keys of the answers behind them (the
    answers stay in the cache until written), what failed."""

    engine: str = ""
    answer_keys: list[str] = field(default_factory=list)  # request ids of the scored tasks
    cache: AnswerCache | None = None
    failures: list[tuple[str, Failure]] = field(default_factory=list)  # (task_id, failure)
    usage: Usage = field(default_factory=Usage)
    censored: int = 0

    def answer_batches(self) -> Iterator[pa.Table]:
        """The answers behind the scores, ordered by (task_id, sample), streamed from the cache."""
        if self.cache is not None:
            yield from self.cache.batches(self.answer_keys)

    def answers(self) -> list[dict]:
        """The same, as rows (small runs and tests)."""
        return [row for batch in self.answer_batches() for row in batch.to_pylist()]

    def metrics(self) -> dict[str, Any]:
        return {**super().metrics(), "unscored": len(self.failures), "censored_answers": self.censored}


def make_engine(model: ModelParams) -> Engine:
    """The engine `score.model` names, checked before any request is sent."""
    if model.backend == "openai":
        from tracelake.curate.scoring.engines.openai_api import OpenAIEngine

        key = None
        if model.api_key_env is not None:
            key = os.environ.get(model.api_key_env)
            if not key:
                raise BadParams(
                    f"score.model.api_key_env: ${model.api_key_env} is not set (export the key, or set "
                    f"api_key_env: null for an endpoint that takes none)"
                )
        return OpenAIEngine(model, api_key=key)
    from tracelake.curate.scoring.engines.local import LocalEngine, engine_python

    path = model.path or model.name
    return LocalEngine(
        backend=model.backend,
        python=engine_python(model.backend, model.python),
        model_path=path,
        batch_size=model.batch_size,
        max_model_len=model.max_model_len,
    )


def answer_rows(
    key: str, task_id: str, scorer: str, model: str, prompt_sha: str, sampling: str, answer: Answer
) -> list[dict]:
    return [
        {
            "response_id": content_id("response", [key, i]),
            "request_id": key,
            "task_id": task_id,
            "scorer": scorer,
            "model": model,
            "prompt_sha256": prompt_sha,
            "sampling": sampling,
            "sample": i,
            "text": s.text,
            "finish_reason": s.finish_reason,
            "censored": s.finish_reason == "length",
            "prompt_tokens": s.prompt_tokens,
            "completion_tokens": s.completion_tokens,
        }
        for i, s in enumerate(answer.samples)
    ]


class Status:
    """What a run reports as it goes (the progress bar's status text)."""

    def __init__(self) -> None:
        self.cached = self.answered = self.failed = 0

    def __str__(self) -> str:
        return f"{self.cached} cached · {self.answered} answered · {self.failed} failed"


def pending_requests(
    scorer: ModelScorer, con: duckdb.DuckDBPyConnection, model: ModelParams, cache: AnswerCache
) -> tuple[list[tuple[str, str, str]], dict[str, tuple[str, str, str]]]:
    """Every request `scorer` makes, as (request_id, task_id, prompt_sha), and those without cached
    answers: request_id -> (task_id, prompt_sha, prompt)."""
    sampling = model.sampling()
    cached = cache.complete(model.n)
    keyed: list[tuple[str, str, str]] = []
    missing: dict[str, tuple[str, str, str]] = {}
    for r in scorer.requests(con):
        key, prompt_sha = r.key("request", scorer.name, model.name, sampling)
        keyed.append((key, r.task_id, prompt_sha))
        if key not in cached:
            missing[key] = (r.task_id, prompt_sha, r.prompt)
    return keyed, missing


def run_model_scorer(
    scorer: ModelScorer,
    con: duckdb.DuckDBPyConnection,
    model: ModelParams,
    cache_dir: Path | str,
    *,
    engine_factory: Callable[[ModelParams], Engine] = make_engine,
    on_total: Callable[[int], None] | None = None,
    on_progress: Callable[[int, Status], None] | None = None,
) -> ModelRun:
    """Score every task `scorer` asks about; only requests without cached answers reach the engine.
    Failed requests are left unscored and listed in the run (the caller decides whether that many
    failures are allowed)."""
    sampling_json = canonical_json(model.sampling()).decode()
    score_sampling = canonical_json({**model.sampling(), "score_by": model.score_by}).decode()
    cache = AnswerCache(cache_dir, scorer.name)
    keyed, missing = pending_requests(scorer, con, model, cache)
    status = Status()
    status.cached = len(keyed) - len(missing)
    if on_total:
        on_total(len(keyed))
    if on_progress and status.cached:
        on_progress(status.cached, status)

    run = ModelRun(scorer.name, [], cached=status.cached, cache=cache)
    if missing:
        engine = engine_factory(model)
        run.engine, run.usage = engine.label, engine.usage
        requests = (
            GenRequest(
                k, scorer.messages_of(prompt), model.temperature, model.max_tokens, model.n, request_seed(model.seed, k)
            )
            for k, (_, _, prompt) in missing.items()
        )
        try:
            for result in engine.answers(requests):
                task_id, prompt_sha, _ = missing[result.key]
                if isinstance(result, Failure):
                    run.failures.append((task_id, result))
                    status.failed += 1
                else:
                    cache.add(
                        answer_rows(result.key, task_id, scorer.name, model.name, prompt_sha, sampling_json, result)
                    )
                    status.answered += 1
                if on_progress:
                    on_progress(1, status)
        finally:
            cache.flush()
    run.computed = status.answered

    lengths = cache.lengths([key for key, *_ in keyed])
    for key, task_id, prompt_sha in keyed:
        if key not in lengths:
            continue
        chars, tokens, censored = lengths[key]
        if model.score_by == "tokens":
            if any(t is None for t in tokens):
                raise BadInput(
                    f"{scorer.name}: score.model.score_by tokens, but the engine reported no token count "
                    f"per answer for task {task_id} (an OpenAI-compatible endpoint with n > 1 reports "
                    f"only a total: use n: 1, or score_by: chars)"
                )
            counts = tokens
        else:
            counts = chars
        run.rows.append(
            score_row(
                task_id, scorer.name, model.name, prompt_sha, float(scorer.score(counts)), sampling=score_sampling
            )
        )
        run.answer_keys.append(key)
        run.censored += censored
    return run


def summary(run: ModelRun, model: ModelParams) -> str:
    """One line: what the run asked, what it reused, what failed, tokens and the estimated cost."""
    parts = [
        f"score {run.scorer} ({run.engine or model.backend + ' ' + model.name}): {len(run.rows)} tasks scored",
        f"{run.computed} answered",
        f"{run.cached} cached",
        f"{len(run.failures)} failed",
    ]
    if run.failures:
        reasons: dict[str, int] = {}
        for _, f in run.failures:
            reasons[f.reason] = reasons.get(f.reason, 0) + 1
        parts[-1] += " (" + ", ".join(f"{n} {r}" for r, n in sorted(reasons.items())) + ")"
    usage = run.usage
    parts.append(f"{usage.calls} model calls")
    if usage.retries:
        parts[-1] += f" ({sum(usage.retries.values())} retries)"
    parts.append(f"tokens in {usage.input_tokens:,} out {usage.output_tokens:,}")
    if model.price_input_per_million is not None or model.price_output_per_million is not None:
        cost = usage.input_tokens / 1e6 * (model.price_input_per_million or 0) + usage.output_tokens / 1e6 * (
            model.price_output_per_million or 0
        )
        parts.append(f"est. cost ${cost:,.4f}")
    if run.censored:
        parts.append(f"{run.censored} answers cut at max_tokens (censored)")
    return ", ".join(parts)


def failure_lines(run: ModelRun, limit: int = 20) -> list[str]:
    lines = [f"  {task_id}: {f.reason}: {f.detail}" for task_id, f in sorted(run.failures, key=lambda x: x[0])]
    return lines[:limit] + ([f"  ... and {len(lines) - limit} more"] if len(lines) > limit else [])
