"""Running the model-free scorers into task scores, their score cache, and imported scores.

A scorer turns each task into one *request* (the exact text it looks at) and each request into a
float. Scores are keyed by (task_id, scorer, model, sha256 of the request, sampling): a key already
in the cache is never recomputed, so re-running the stage after new tasks arrive scores only the
new ones. Model scorers cache their answers instead (answers.py): a sampled answer, once paid
for, stays what it was.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from tracelake.core.errors import BadInput, check
from tracelake.core.hashing import content_id
from tracelake.core.ids import COPY_SUFFIX, base_task_name
from tracelake.core.schema import TableSchema, load_schema
from tracelake.core.tables import open_parquet
from tracelake.curate.score_params import ImportParams
from tracelake.curate.scoring.scorers import Scorer, ScoreRequest


def score_row(
    task_id: str, scorer: str, model: str | None, prompt_sha256: str | None, score: float, sampling: str | None = None
) -> dict:
    if not (isinstance(score, float) and math.isfinite(score)):
        raise BadInput(f"scorer {scorer}: task {task_id} got a non-finite score {score!r}")
    key = {"task_id": task_id, "scorer": scorer, "model": model, "prompt_sha256": prompt_sha256, "sampling": sampling}
    return {"score_id": content_id("score", key), **key, "score": score}


class ScoreCache:
    """Append-only cache: <dir>/<scorer>/part-<hash>.parquet files of scores rows.

    A run reads every part of its scorer and writes one new part holding only what it computed.
    Parts are named by their content and written atomically, so concurrent or interrupted runs
    never corrupt the cache.
    """

    def __init__(self, directory: Path | str):
        self.directory = Path(directory)

    def load(self, scorer: str) -> dict[str, dict]:
        rows: dict[str, dict] = {}
        for part in sorted((self.directory / scorer).glob("part-*.parquet")):
            for row in pq.read_table(part).to_pylist():
                rows[row["score_id"]] = row
        return rows

    def add(self, scorer: str, rows: list[dict]) -> None:
        if rows:
            write_cache_part(self.directory / scorer, "score-cache", load_schema("scores"), rows)


def write_cache_part(directory: Path, kind: str, schema: TableSchema, rows: list[dict]) -> Path:
    """rows (sorted by the schema's key) as <directory>/part-<hash of their keys>.parquet, written
    atomically (a temporary file, then a rename): concurrent or interrupted runs never leave a
    half-written part, and the same rows always make the same part."""
    rows = sorted(rows, key=lambda r: r[schema.key])  # the name hashes what the file holds, in its order
    name = f"part-{content_id(kind, [r[schema.key] for r in rows], n_hex=16)}.parquet"
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.tmp-{os.getpid()}"
    pq.write_table(schema.from_rows(rows), tmp, compression="zstd")
    tmp.replace(directory / name)
    return directory / name


@dataclass
class ScorerRun:
    scorer: str
    rows: list[dict]
    cached: int = 0
    computed: int = 0
    unmatched: int = 0

    def metrics(self) -> dict[str, Any]:
        """What the scores are; cache hits are left out: they depend on history, not on inputs."""
        scores = [r["score"] for r in self.rows]
        return {
            "tasks": len(self.rows),
            "unmatched": self.unmatched,
            "min": min(scores, default=None),
            "max": max(scores, default=None),
            "mean": (sum(scores) / len(scores)) if scores else None,
        }


def run_scorer(
    scorer: Scorer,
    con: duckdb.DuckDBPyConnection,
    cache: ScoreCache,
    batch_size: int = 256,
    on_progress: Callable[[int], None] | None = None,
) -> ScorerRun:
    """Score every task the scorer asks about, computing only keys missing from the cache."""
    requests = scorer.requests(con)
    known = cache.load(scorer.name)
    run = ScorerRun(scorer.name, [])
    missing: list[tuple[ScoreRequest, str]] = []
    for request in requests:
        row_id, prompt_sha = request.key("score", scorer.name, scorer.model, None)
        if row_id in known:
            run.rows.append(known[row_id])
            run.cached += 1
        else:
            missing.append((request, prompt_sha))
    new_rows = []
    for start in range(0, len(missing), batch_size):
        batch = missing[start : start + batch_size]
        values = scorer.score_batch([r for r, _ in batch])
        check(len(values) == len(batch), f"{scorer.name}: {len(batch)} requests but {len(values)} scores")
        for (request, prompt_sha), value in zip(batch, values):
            new_rows.append(score_row(request.task_id, scorer.name, scorer.model, prompt_sha, float(value)))
        if on_progress:
            on_progress(len(batch))
    cache.add(scorer.name, new_rows)
    run.rows.extend(new_rows)
    run.computed = len(new_rows)
    return run


def import_scores(name: str, spec: ImportParams, known_tasks: Iterable[tuple[str, str, str]]) -> ScorerRun:
    """Scores from a column of the user's own Parquet file, matched to the lake's tasks.

    `known_tasks` is (task_id, source, base task name) for every task with trajectories. Rows are
    matched by task id, or by task name (in every source, or in the row's `source` column); rows
    matching no task are counted as unmatched, two different scores for one task are an error.
    """
    path = Path(spec.path)
    where = f"score.imports.{name}: "
    try:
        table = open_parquet(path, where).read()
    except (pa.ArrowException, OSError) as e:
        raise BadInput(f"{where}{path} is not a readable Parquet file ({e})") from None
    columns = [c for c in (spec.score, spec.task, spec.task_id, spec.source) if c is not None]
    for column in columns:
        if column not in table.column_names:
            raise BadInput(
                f"score.imports.{name}: {path} has no column {column!r} (columns: {', '.join(table.column_names)})"
            )
    by_id = {task_id: task_id for task_id, _, _ in known_tasks}
    by_name: dict[tuple[str, str], str] = {(src, base): tid for tid, src, base in known_tasks}
    sources = sorted({src for _, src, _ in known_tasks})
    scores: dict[str, float] = {}
    unmatched = 0
    for i, row in enumerate(table.select(columns).to_pylist()):
        value = row[spec.score]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise BadInput(f"score.imports.{name}: {path} row {i}: score {value!r} is not a finite number")
        if spec.task_id is not None:
            matches = [by_id[row[spec.task_id]]] if row[spec.task_id] in by_id else []
        elif row[spec.task] is None:
            matches = []
        else:
            base = base_task_name(str(row[spec.task]))
            wanted = [row[spec.source]] if spec.source is not None else sources
            matches = [by_name[(s, base)] for s in wanted if (s, base) in by_name]
        if not matches:
            unmatched += 1
        for task_id in matches:
            if task_id in scores and scores[task_id] != float(value):
                label = row[spec.task] if spec.task is not None else row[spec.task_id]
                raise BadInput(
                    f"score.imports.{name}: {path} row {i} gives task {label!r} ({task_id}) a "
                    f"second, different score ({scores[task_id]} and {value})"
                )
            scores[task_id] = float(value)
    rows = [score_row(tid, name, spec.model, None, scores[tid]) for tid in sorted(scores)]
    return ScorerRun(name, rows, computed=len(rows), unmatched=unmatched)


def known_tasks_of(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str, str]]:
    """(task_id, source, base task name) of every task in the `trajectories` view."""
    return con.execute(
        "SELECT DISTINCT task_id, source, regexp_replace(task, $p, '') FROM trajectories ORDER BY 1",
        {"p": COPY_SUFFIX.pattern},
    ).fetchall()
