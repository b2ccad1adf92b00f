"""DVC stage `filter`: every ingested trajectory -> <lake>/pool/ (pool.parquet: kept rows;
dropped.parquet: each dropped row with the rule that dropped it), the funnel to metrics/filter.json.

    python stages/filter.py [--params params.yaml]
"""

from __future__ import annotations

from pathlib import Path

from tracelake.core.assets import sql
from tracelake.core.lake import TableWriter, output_dir, read_manifest, write_manifest
from tracelake.core.lakedb import connect, input_versions
from tracelake.core.layout import Lake
from tracelake.core.schema import load_schema
from tracelake.core.stage import run_stage, write_metrics
from tracelake.core.ui import progress
from tracelake.curate.filter import attach_dedup, run_filters
from tracelake.params import stage_args

BATCH = 1000


def main(argv: list[str] | None = None) -> None:
    params, _ = stage_args(__doc__, argv)
    lake, sources = Lake(params.lake), list(params.sources)
    con = connect(lake.root, sources, tables=("trajectories",))
    attach_dedup(con, lake)
    with progress("count tokens") as (_, advance):
        result = run_filters(con, params.filter, on_tokens=advance, sources=sources,
                             token_cache=Path(params.tokenizer.cache))

    with output_dir(lake.pool) as tmp:
        tables = []
        for name, query in (("pool", "SELECT * FROM pool ORDER BY trajectory_id"), ("dropped", sql("filter/dropped"))):
            writer = TableWriter(tmp, load_schema(name))
            for batch in con.sql(query).to_arrow_reader(BATCH):
                writer.write_batch(batch)
            tables.append(writer.close())
        manifest = write_manifest(
            tmp, kind="pool", tables=tables,
            inputs={"trajectories": input_versions(lake.root, "trajectories", sources),
                    "dedup": read_manifest(lake.dedup)["version_id"]},
            params=params.section("filter"), formulas=result.formulas, counts=result.metrics())
    write_metrics("metrics/filter.json", result.metrics())
    totals = result.totals()
    dropped = ", ".join(f"{r} {n}" for r, n in totals["dropped"].items())
    print(f"filter: {totals['in']} in, {totals['kept']} kept; dropped: {dropped} -> {lake.pool} "
          f"(version {manifest['version_id']})")
    if result.token_stats is not None:
        print(f"filter: token counts: {result.token_stats.summary()}")


if __name__ == "__main__":
    run_stage(main)
