"""Model scorers: ask an engine about every task the cache has no answer for, store each answer as
it arrives, and turn answers into scores.

A request's cache key (`request_id`) is (task, scorer, model, sha256 of the rendered prompt,
sampling: temperature, max_tokens, seed, n). The answer cache, <score.cache>/<scorer>/answers/,
holds small Parquet parts (schemas/responses.yaml) written atomically every FLUSH_ROWS answers or
FLUSH_SECONDS, and when the run ends for any reason (Ctrl-C included): a crash loses at most the
answers of the last few seconds, and a rerun asks only for the rest. Answers paid for are never
asked for again; the scores are recomputed from them every run (cheap).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import duckdb
import pyarrow.parquet as pq

from tracelake.core.errors import BadInput, BadParams
from tracelake.core.hashing import canonical_json, content_id, sha256_bytes
from tracelake.core.schema import load_schema
from tracelake.curate.engines import Answer, Engine, Failure, GenRequest, Usage, request_seed
from tracelake.curate.params import ModelParams
from tracelake.curate.score import ScorerRun, score_row, write_cache_part
from tracelake.curate.scorers import ModelScorer

FLUSH_ROWS = 256
FLUSH_SECONDS = 2.0
COMPACT_PARTS = 64


class AnswerCache:
    """<directory>/<scorer>/answers/part-<hash>.parquet: answer rows, append-only, named by content."""

    def __init__(self, directory: Path | str, scorer: str):
        self.directory = Path(directory) / scorer / "answers"
        self._pending: list[dict] = []
        self._last_flush = time.monotonic()
        self.schema = load_schema("responses")

    def parts(self) -> list[Path]:
        return sorted(self.directory.glob("part-*.parquet"))

    def load(self) -> dict[str, list[dict]]:
        """request_id -> its answer rows in sample order. Many parts become one (after the read)."""
        rows: dict[str, dict] = {}
        parts = self.parts()
        for part in parts:
            for row in pq.read_table(part).to_pylist():
                rows[row["response_id"]] = row
        by_request: dict[str, list[dict]] = {}
        for row in sorted(rows.values(), key=lambda r: (r["request_id"], r["sample"])):
            by_request.setdefault(row["request_id"], []).append(row)
        if len(parts) > COMPACT_PARTS:   # the merged part first: a crash in between leaves duplicates only
            merged = self._write(list(rows.values()))
            for part in parts:
                if part != merged:
                    part.unlink(missing_ok=True)
        return by_request

    def add(self, rows: list[dict]) -> None:
        self._pending.extend(rows)
        if len(self._pending) >= FLUSH_ROWS or time.monotonic() - self._last_flush >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            self._write(self._pending)
            self._pending = []
        self._last_flush = time.monotonic()

    def _write(self, rows: list[dict]) -> Path:
        return write_cache_part(self.directory, "answer-cache", self.schema, rows)


@dataclass
class ModelRun(ScorerRun):
    """A model scorer's run: its scores (ScorerRun.rows), the answers behind them, what failed."""
    engine: str = ""
    answers: list[dict] = field(default_factory=list)
    failures: list[tuple[str, Failure]] = field(default_factory=list)   # (task_id, failure)
    usage: Usage = field(default_factory=Usage)
    censored: int = 0

    def metrics(self) -> dict[str, Any]:
        return {**super().metrics(), "unscored": len(self.failures), "censored_answers": self.censored}


def make_engine(model: ModelParams) -> Engine:
    """The engine `score.model` names, checked before any request is sent."""
    if model.backend == "openai":
        from tracelake.curate.engines.openai_api import OpenAIEngine

        key = None
        if model.api_key_env is not None:
            key = os.environ.get(model.api_key_env)
            if not key:
                raise BadParams(f"score.model.api_key_env: ${model.api_key_env} is not set (export the key, or set "
                                f"api_key_env: null for an endpoint that takes none)")
        return OpenAIEngine(base_url=model.base_url, model=model.name, api_key=key, api_key_env=model.api_key_env,
                            concurrency=model.concurrency, requests_per_minute=model.requests_per_minute,
                            tokens_per_minute=model.tokens_per_minute, timeout_s=model.timeout_s,
                            max_retries=model.max_retries, backoff_s=model.backoff_s,
                            max_backoff_s=model.max_backoff_s)
    from tracelake.curate.engines.local import LocalEngine, engine_python

    path = model.path or model.name
    return LocalEngine(backend=model.backend, python=engine_python(model.backend, model.python), model_path=path,
                       batch_size=model.batch_size, max_model_len=model.max_model_len)


def answer_rows(key: str, task_id: str, scorer: str, model: str, prompt_sha: str, sampling: str,
                answer: Answer) -> list[dict]:
    return [{"response_id": content_id("response", [key, i]), "request_id": key, "task_id": task_id,
             "scorer": scorer, "model": model, "prompt_sha256": prompt_sha, "sampling": sampling, "sample": i,
             "text": s.text, "finish_reason": s.finish_reason, "censored": s.finish_reason == "length",
             "prompt_tokens": s.prompt_tokens, "completion_tokens": s.completion_tokens}
            for i, s in enumerate(answer.samples)]


class Status:
    """What a run reports as it goes (the progress bar's status text)."""
    def __init__(self) -> None:
        self.cached = self.answered = self.failed = 0

    def __str__(self) -> str:
        return f"{self.cached} cached · {self.answered} answered · {self.failed} failed"


def run_model_scorer(scorer: ModelScorer, con: duckdb.DuckDBPyConnection, model: ModelParams,
                     cache_dir: Path | str, *, engine_factory: Callable[[ModelParams], Engine] = make_engine,
                     on_total: Callable[[int], None] | None = None,
                     on_progress: Callable[[int, Status], None] | None = None) -> ModelRun:
    """Score every task `scorer` asks about; only requests without cached answers reach the engine.
    Failed requests are left unscored and listed in the run (the caller decides whether that many
    failures are allowed)."""
    sampling = model.sampling()
    sampling_json = canonical_json(sampling).decode()
    score_sampling = canonical_json({**sampling, "score_by": model.score_by}).decode()
    keyed: list[tuple[str, str, str, str]] = []   # (request_id, task_id, prompt_sha, prompt)
    for r in scorer.requests(con):
        prompt_sha = sha256_bytes(r.prompt.encode())
        key = content_id("request", {"task_id": r.task_id, "scorer": scorer.name, "model": model.name,
                                     "prompt_sha256": prompt_sha, "sampling": sampling})
        keyed.append((key, r.task_id, prompt_sha, r.prompt))
    cache = AnswerCache(cache_dir, scorer.name)
    known = {k: rows for k, rows in cache.load().items() if len(rows) == model.n}
    status = Status()
    status.cached = sum(k in known for k, *_ in keyed)
    missing = {k: (task_id, prompt_sha, prompt) for k, task_id, prompt_sha, prompt in keyed if k not in known}
    if on_total:
        on_total(len(keyed))
    if on_progress and status.cached:
        on_progress(status.cached, status)

    run = ModelRun(scorer.name, [], cached=status.cached)
    if missing:
        engine = engine_factory(model)
        run.engine, run.usage = engine.label, engine.usage
        requests = (GenRequest(k, scorer.messages_of(prompt), model.temperature, model.max_tokens, model.n,
                               request_seed(model.seed, k)) for k, (_, _, prompt) in missing.items())
        try:
            for result in engine.answers(requests):
                task_id, prompt_sha, _ = missing[result.key]
                if isinstance(result, Failure):
                    run.failures.append((task_id, result))
                    status.failed += 1
                else:
                    rows = answer_rows(result.key, task_id, scorer.name, model.name, prompt_sha, sampling_json, result)
                    cache.add(rows)
                    known[result.key] = rows
                    status.answered += 1
                if on_progress:
                    on_progress(1, status)
        finally:
            cache.flush()
    run.computed = status.answered

    for key, task_id, prompt_sha, _ in keyed:
        rows = known.get(key)
        if rows is None:
            continue
        if model.score_by == "tokens":
            if any(r["completion_tokens"] is None for r in rows):
                raise BadInput(f"{scorer.name}: score.model.score_by tokens, but the engine reported no token count "
                               f"per answer for task {task_id} (an OpenAI-compatible endpoint with n > 1 reports "
                               f"only a total: use n: 1, or score_by: chars)")
            lengths = [r["completion_tokens"] for r in rows]
        else:
            lengths = [len(r["text"]) for r in rows]
        run.rows.append(score_row(task_id, scorer.name, model.name, prompt_sha, float(scorer.score(lengths)),
                                  sampling=score_sampling))
        run.answers.extend(rows)
        run.censored += sum(r["censored"] for r in rows)
    return run


def summary(run: ModelRun, model: ModelParams) -> str:
    """One line: what the run asked, what it reused, what failed, tokens and the estimated cost."""
    parts = [f"score {run.scorer} ({run.engine or model.backend + ' ' + model.name}): {len(run.rows)} tasks scored",
             f"{run.computed} answered", f"{run.cached} cached", f"{len(run.failures)} failed"]
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
        cost = usage.input_tokens / 1e6 * (model.price_input_per_million or 0) + \
            usage.output_tokens / 1e6 * (model.price_output_per_million or 0)
        parts.append(f"est. cost ${cost:,.4f}")
    if run.censored:
        parts.append(f"{run.censored} answers cut at max_tokens (censored)")
    return ", ".join(parts)


def failure_lines(run: ModelRun, limit: int = 20) -> list[str]:
    lines = [f"  {task_id}: {f.reason}: {f.detail}" for task_id, f in sorted(run.failures, key=lambda x: x[0])]
    return lines[:limit] + ([f"  ... and {len(lines) - limit} more"] if len(lines) > limit else [])
