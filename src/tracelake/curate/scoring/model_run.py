"""A model scorer's run, shared by the score stage and `tracelake score`: the plan (what is cached,
what would be sent, to which engine), and the run itself with its progress bar, one-line summary and
failure list.

`tracelake score [--backend local|modal] [--dry-run]` fills the answer cache and writes nothing in
the lake: `dvc repro score` then finds every answer cached and writes lake/scores without a model
call. `--backend modal` runs the vllm engine on a Modal GPU (engines/modal.py, scoring/modal_app.py);
`--dry-run` prints the plan offline.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import duckdb

from tracelake.core.errors import BadInput, BadParams, check
from tracelake.core.ui import progress_status
from tracelake.curate.score_params import ModelParams, ScoreParams
from tracelake.curate.scoring.answers import (
    AnswerCache,
    ModelRun,
    failure_lines,
    make_engine,
    pending_requests,
    run_model_scorer,
    summary,
)
from tracelake.curate.scoring.engines import Engine
from tracelake.curate.scoring.scorers import BUILTIN_SCORERS, ModelScorer

BACKENDS = ("local", "modal")


@dataclass
class ScorePlan:
    scorer: ModelScorer
    backend: str
    total: int
    cached: int
    engine: Callable[[ModelParams], Engine]
    lines: list[str] = field(default_factory=list)  # engine-specific lines of the description
    program: str | None = None  # the launcher the run starts (must exist)


def model_scorers(score: ScoreParams) -> list[ModelScorer]:
    scorers = [BUILTIN_SCORERS[name]() for name in score.scorers]
    return [s for s in scorers if isinstance(s, ModelScorer)]


def plan_score(scorer: ModelScorer, con: duckdb.DuckDBPyConnection, score: ScoreParams, backend: str) -> ScorePlan:
    if backend not in BACKENDS:
        raise BadParams(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    model = score.model
    if model is None:
        raise BadParams("params.yaml: score.model is required for the model scorers")
    keyed, missing = pending_requests(scorer, con, model, AnswerCache(score.cache, scorer.name))
    if backend == "local":
        return ScorePlan(
            scorer,
            backend,
            len(keyed),
            len(keyed) - len(missing),
            make_engine,
            [f"engine:   {model.backend} {model.path or model.name} (this machine)"],
        )
    from tracelake.curate.scoring.engines.modal import (
        FORWARDED_ENV,
        MODELS_DIR,
        ModalEngine,
        model_source,
    )

    if model.backend != "vllm":
        raise BadParams(
            f"tracelake score --backend modal runs the vllm engine: set score.model.backend: vllm "
            f"(it is {model.backend})"
        )
    engine = ModalEngine(model, score.modal, model_source(model))
    m, source = score.modal, engine.source
    where = (
        f"local directory {source.local_dir}, fingerprint {source.fingerprint}: uploaded once to "
        f"{m.volume}:{source.remote}"
        if source.local_dir
        else f"hub id {source.hub_id}, downloaded on Modal into {m.volume}:{MODELS_DIR}/hub"
    )
    lines = [
        f"engine:   vllm on Modal, gpu {m.gpu}, timeout {m.timeout_hours} h (app {m.app})",
        f"model:    {where}",
        f"image:    vllm=={m.vllm}, python {m.image_python}",
        f"volume:   {m.volume} -> {MODELS_DIR}",
        "secrets:  "
        + ", ".join(f"{n} ({'set' if os.environ.get(n) else 'not set'})" for n in FORWARDED_ENV)
        + " from the local environment",
        *(f"env:      {k}={v}" for k, v in engine.env.items()),
        "command:  " + shlex.join(engine.command) + "  (requests on its stdin, answers streamed back)",
    ]
    return ScorePlan(
        scorer, backend, len(keyed), len(keyed) - len(missing), lambda _: engine, lines, program=engine.command[0]
    )


def describe(plan: ScorePlan, model: ModelParams) -> str:
    """What a run would do, in plain text (the --dry-run output)."""
    sampling = ", ".join(f"{k} {v}" for k, v in model.sampling().items())
    return "\n".join(
        [
            f"scorer:   {plan.scorer.name} (prompt scoring/prompts/{plan.scorer.name}.yaml), model {model.name}",
            f"sampling: {sampling}, score by {model.score_by}",
            f"requests: {plan.total} tasks: {plan.cached} cached, {plan.total - plan.cached} to send",
            *plan.lines,
            "then:     dvc repro score (lake/scores from the cache, no model call)",
        ]
    )


def run_plan(plan: ScorePlan, con: duckdb.DuckDBPyConnection, score: ScoreParams) -> ModelRun:
    if plan.program and not (Path(plan.program).exists() or shutil.which(plan.program)):
        raise BadInput(
            f"{Path(plan.program).name} not found: install the training environment (it holds Modal) "
            f"with `bash training/setup-env.sh`, or set TRACELAKE_TRAIN_ENV to one"
        )
    return run_model(plan.scorer, con, score, plan.engine)


def engine_for(executor: Any) -> Callable[[ModelParams], Engine]:
    """The engine factory for a run on `executor`: on Ray, a local engine (vllm, transformers) runs
    once per GPU of the cluster (engines/ray_pool.py); an HTTP endpoint is asked from the driver."""

    def make(model: ModelParams) -> Engine:
        engine = make_engine(model)
        if executor is not None and executor.kind == "ray" and model.backend != "openai":
            from tracelake.curate.scoring.engines.ray_pool import RayEngine

            return RayEngine(engine, executor)
        return engine

    return make


def run_model(
    scorer: ModelScorer,
    con: duckdb.DuckDBPyConnection,
    score: ScoreParams,
    engine: Callable[[ModelParams], Engine] = make_engine,
) -> ModelRun:
    """One model scorer: answers stored as they arrive; a one-line summary; fail past max_failures."""
    check(score.model is not None, "run_model without score.model (params validation requires it)")
    with progress_status(f"score {scorer.name}") as (set_total, advance):
        run = run_model_scorer(
            scorer, con, score.model, score.cache, engine_factory=engine, on_total=set_total, on_progress=advance
        )
    print(summary(run, score.model))
    if run.failures:
        print(
            f"{len(run.failures)} tasks failed after retries (unscored; select.unscored decides what "
            f"selection does with them):",
            file=sys.stderr,
        )
        print("\n".join(failure_lines(run)), file=sys.stderr)
    if len(run.failures) > score.max_failures:
        raise BadInput(
            f"score {scorer.name}: {len(run.failures)} of {len(run.failures) + len(run.rows)} tasks "
            f"failed after retries, more than score.max_failures {score.max_failures}; the answers "
            f"received are cached: run again to ask only for the rest"
        )
    return run
