"""DVC stage `score`: every configured scorer over the ingested tasks -> <lake>/scores/ (scores, and
the model scorers' answers in responses.parquet), counts to metrics/score.json.

    python stages/score.py [--params params.yaml]
"""

from __future__ import annotations

from pathlib import Path

from tracelake.core.errors import BadParams
from tracelake.core.lake import TableWriter, output_dir, write_manifest
from tracelake.core.lakedb import connect, input_versions
from tracelake.core.layout import Lake
from tracelake.core.schema import load_schema
from tracelake.core.stage import run_stage, write_metrics
from tracelake.core.ui import progress
from tracelake.curate.answers import ModelRun
from tracelake.curate.params import ImportParams
from tracelake.curate.score import ScoreCache, import_scores, known_tasks_of, run_scorer
from tracelake.curate.score_run import run_model
from tracelake.curate.scorers import BUILTIN_SCORERS, ModelScorer
from tracelake.params import stage_args

IMPORTS_DIR = Path("imports")


def main(argv: list[str] | None = None) -> None:
    params, _ = stage_args(__doc__, argv)
    imports = {name: ImportParams(**raw) for name, raw in params.score.imports.items()}
    for name, spec in imports.items():
        if IMPORTS_DIR.resolve() not in Path(spec.path).resolve().parents:
            raise BadParams(f"params.yaml: score.imports.{name}.path must be under {IMPORTS_DIR}/ "
                            f"(the score stage's DVC dependency), got {spec.path}")
    lake, sources = Lake(params.lake), list(params.sources)
    con = connect(lake.root, sources)
    cache = ScoreCache(params.score.cache)

    runs = []
    for name in params.score.scorers:
        scorer = BUILTIN_SCORERS[name]()
        if isinstance(scorer, ModelScorer):
            runs.append(run_model(scorer, con, params.score))
            continue
        with progress(f"score {name}") as (_, advance):
            runs.append(run_scorer(scorer, con, cache, on_progress=advance))
    if imports:
        known = known_tasks_of(con)
        runs.extend(import_scores(name, spec, known) for name, spec in sorted(imports.items()))

    with output_dir(lake.scores) as tmp:
        writer = TableWriter(tmp, load_schema("scores"))
        answers = TableWriter(tmp, load_schema("responses"))
        for run in sorted(runs, key=lambda r: r.scorer):
            for row in sorted(run.rows, key=lambda r: r["task_id"]):
                writer.write(row)
            if isinstance(run, ModelRun):   # streamed from the answer cache, ordered by (task_id, sample)
                for batch in run.answer_batches():
                    answers.write_batch(batch)
        info, answers_info = writer.close(), answers.close()
        metrics = {run.scorer: run.metrics() for run in runs}
        manifest = write_manifest(
            tmp, kind="scores", tables=[info, answers_info],
            inputs={"trajectories": input_versions(lake.root, "trajectories", sources)},
            # where the cache lives and where answers are fetched change nothing they are keyed by
            params={k: v for k, v in params.section("score").items() if k not in ("cache", "modal")},
            formulas={run.scorer: run.scorer for run in runs}, counts={"rows": info.rows, "scorers": metrics})
    write_metrics("metrics/score.json", metrics)
    for run in runs:
        if isinstance(run, ModelRun):
            continue   # summarised as it ended
        print(f"score {run.scorer}: {len(run.rows)} tasks ({run.cached} cached, {run.computed} computed"
              f"{f', {run.unmatched} unmatched import rows' if run.unmatched else ''}) "
              f"-> {lake.scores} (version {manifest['version_id']})")


if __name__ == "__main__":
    run_stage(main)
