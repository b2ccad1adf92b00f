"""Stage `export_rl`: the tasks of export_rl.sources, less those the filter's task-level rules drop
(contaminated, near-duplicate), and, with export_rl.pick, N of the rest (uniformly or by score) -> SkyRL RL data in <lake>/exports/rl/: PromptDataset shards
(prompts/), the Harbor task table (tasks/), the dropped tasks, rejects and a manifest naming the
dataset by its content id, rl-<tasks>-<12 hex>; the funnel (in = out + dropped + rejected, per
source) to metrics/export_rl.json."""

from __future__ import annotations

import pyarrow.compute as pc

from tracelake.core.errors import BadParams
from tracelake.core.lake import Lake
from tracelake.core.stage import Context, Result, Stage, Streamed
from tracelake.core.tables import read_table
from tracelake.export.rl import RlSettings, export_rl


def run(ctx: Context) -> Result:
    p = ctx.params
    cfg, lake = p.export_rl, Lake(p.lake)
    sources = list(p.sources) if cfg.sources == "all" else list(cfg.sources)
    scores = None
    if cfg.pick.score is not None:
        table = read_table(lake.scores, "scores")
        scored = table.filter(pc.equal(table["scorer"], cfg.pick.score))
        if not scored.num_rows:
            there = ", ".join(sorted(set(table["scorer"].to_pylist()))) or "none"
            raise BadParams(
                f"export_rl.pick.score: {lake.scores} holds no {cfg.pick.score} scores (scorers there: {there}); "
                f"name one of score.scorers or score.imports"
            )
        scores = dict(zip(scored["task_id"].to_pylist(), scored["score"].to_pylist()))
    export = Streamed(
        lake.rl_export,
        lambda tmp: export_rl(
            tmp,
            lake,
            sources,
            RlSettings.of(cfg),
            tokenizer_path=cfg.tokenizer,
            rows_per_shard=cfg.rows_per_shard,
            params={
                **p.section("export_rl"),
                "contaminated": p.filter.contaminated,
                "near_duplicates": p.filter.near_duplicates,
            },
            curation=p.filter,
            pick=cfg.pick,
            scores=scores,
        ),
    )

    def summary(manifests: list[dict]) -> list[str]:
        counts = manifests[0]["counts"]
        rej = ", ".join(f"{k} {v}" for k, v in counts["rejected"].items() if v) or "none"
        dropped = ", ".join(f"{k} {v}" for k, v in counts["dropped"].items() if v) or "none"
        picked = f" (picked from {counts['picked']['from']} that pass)" if "picked" in counts else ""
        lines = [
            f"export_rl: {counts['dataset_id']}: {counts['tasks_out']} of {counts['tasks_in']} tasks{picked} from "
            f"{len(sources)} source(s) in {counts['shards']} shard(s), dropped: {dropped}, rejected: {rej} "
            f"-> {lake.rl_export}"
        ]
        if counts["prompt_only"]:
            lines.append(
                f"export_rl: {counts['prompt_only']} prompts have no task binary (tasks derived from trace "
                f"tables), hence no row in the task table: their environment must come from elsewhere "
                f"(export_rl.without_binary: reject, the default, leaves them out)"
            )
        return lines

    # the counts file is what the manifest counts
    return Result([export], metrics=lambda manifests: manifests[0]["counts"], summary=summary)


STAGE = Stage(
    "export_rl",
    __doc__,
    run,
    # the filter's task-level rules apply to RL tasks too (export/rl.py curated_out)
    params=("export_rl", "filter.contaminated", "filter.near_duplicates", "sources", "lake"),
    # scores: export_rl.pick.score bounds and orders the pick (read only when it is set)
    deps=("${lake}/tasks", "${lake}/dedup", "${lake}/scores", "${export_rl.tokenizer}"),
    outs=("${lake}/exports/rl",),
    metrics="metrics/export_rl.json",
    headline=lambda m: {
        "in": m["tasks_in"],
        "out": m["tasks_out"],
        "dropped": m["tasks_in"] - m["tasks_out"],
        "dataset": m["dataset_id"],
    },
)
