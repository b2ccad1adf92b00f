"""DVC stage `select@<scale>`: one dataset of N rows from the filtered pool and the task scores ->
<lake>/selections/<scale>/, named by its content (sel-<N>-<12 hex>); counts to metrics/select/<scale>.json.

    python stages/select_scale.py SCALE  (named so it does not shadow the stdlib module `select`) [--params params.yaml]
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc

from tracelake.errors import BadParams
from tracelake.lake import TableWriter, output_dir, read_manifest, read_table, write_json, write_manifest
from tracelake.schema import load_schema
from tracelake.selection import SELECTION_RULE, dataset_label, group_pool, select
from tracelake.stage import run_stage, stage_args


def main(argv: list[str] | None = None) -> None:
    params, scale = stage_args(__doc__, argv, "scale")
    if scale not in params.select.scales:
        raise BadParams(f"params.yaml: no scale {scale!r} under select.scales")
    n = params.select.scales[scale]
    lake = Path(params.lake)

    pool = read_table(lake / "pool", "pool").select(["trajectory_id", "task_id", "source", "task"])
    scores = read_table(lake / "scores", "scores")
    scores = scores.filter(pc.equal(scores["scorer"], params.select.score))
    score_of = dict(zip(scores["task_id"].to_pylist(), scores["score"].to_pylist()))
    selection = select(group_pool(pool.to_pylist()), score_of, params.mix, n)

    out = lake / "selections" / scale
    with output_dir(out) as tmp:
        writer = TableWriter(tmp, load_schema("selection"))
        for row in selection.rows:
            writer.write(row)
        info = writer.close()
        dataset_id = f"sel-{dataset_label(n)}-{info.version_id}"
        counts = {"dataset_id": dataset_id, **selection.counts}
        manifest = write_manifest(
            tmp, kind="selection", tables=[info], dataset_id=dataset_id,
            inputs={"pool": read_manifest(lake / "pool")["version_id"],
                    "scores": read_manifest(lake / "scores")["version_id"]},
            params={"scale": scale, "rows": n, "score": params.select.score, "mix": params.section("mix")},
            formulas={"selection": SELECTION_RULE}, counts=counts)
    metrics = Path("metrics/select") / f"{scale}.json"
    metrics.parent.mkdir(parents=True, exist_ok=True)
    write_json(metrics, counts)
    c = selection.counts
    print(f"select {scale}: {dataset_id}: {c['rows']} rows over {c['tasks']} of {c['tasks_available']} tasks, "
          f"{c['distinct_trajectories']} distinct rollouts -> {out} (version {manifest['version_id']})")


if __name__ == "__main__":
    run_stage(main)
