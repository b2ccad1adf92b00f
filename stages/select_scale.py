"""DVC stage `select@<scale>`: one dataset of N rows from the filtered pool and the task scores ->
<lake>/selections/<scale>/, named by its content (sel-<N>-<12 hex>); counts to metrics/select/<scale>.json.

    python stages/select_scale.py SCALE [--params params.yaml]

(Named select_scale.py so that, run as a script, it does not shadow the stdlib module `select`.)
"""

from __future__ import annotations

import pyarrow.compute as pc

from tracelake.core.errors import BadParams
from tracelake.core.ids import dataset_id
from tracelake.core.lake import TableWriter, output_dir, read_manifest, read_table, write_manifest
from tracelake.core.layout import Lake
from tracelake.core.schema import load_schema
from tracelake.core.stage import run_stage, write_metrics
from tracelake.curate.select import SELECTION_RULE, group_pool, select
from tracelake.params import stage_args


def main(argv: list[str] | None = None) -> None:
    params, scale = stage_args(__doc__, argv, "scale")
    if scale not in params.select.scales:
        raise BadParams(f"params.yaml: no scale {scale!r} under select.scales")
    n = params.select.scales[scale]
    lake = Lake(params.lake)

    pool = read_table(lake.pool, "pool").select(["trajectory_id", "task_id", "source", "task"])
    scores = read_table(lake.scores, "scores")
    scores = scores.filter(pc.equal(scores["scorer"], params.select.score))
    score_of = dict(zip(scores["task_id"].to_pylist(), scores["score"].to_pylist()))
    clusters = read_table(lake.dedup, "task_clusters").filter(pc.greater(pc.field("cluster_size"), 1))
    cluster_of = dict(zip(clusters["task_id"].to_pylist(), clusters["cluster_id"].to_pylist()))
    selection = select(group_pool(pool.to_pylist()), score_of, params.mix, n, params.select.unscored, cluster_of)

    out = lake.selection(scale)
    with output_dir(out) as tmp:
        writer = TableWriter(tmp, load_schema("selection"))
        for row in selection.rows:
            writer.write(row)
        info = writer.close()
        name = dataset_id("sel", n, info.version_id)
        counts = {"dataset_id": name, **selection.counts}
        manifest = write_manifest(
            tmp, kind="selection", tables=[info], dataset_id=name,
            inputs={"pool": read_manifest(lake.pool)["version_id"],
                    "scores": read_manifest(lake.scores)["version_id"],
                    "dedup": read_manifest(lake.dedup)["version_id"]},
            params={"scale": scale, "rows": n, "score": params.select.score, "unscored": params.select.unscored,
                    "mix": params.section("mix")},
            formulas={"selection": SELECTION_RULE}, counts=counts)
    write_metrics(f"metrics/select/{scale}.json", counts)
    c = selection.counts
    print(f"select {scale}: {name}: {c['rows']} rows over {c['tasks']} of {c['tasks_available']} tasks, "
          f"{c['distinct_trajectories']} distinct rollouts -> {out} (version {manifest['version_id']})")


if __name__ == "__main__":
    run_stage(main)
