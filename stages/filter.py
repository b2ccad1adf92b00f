"""DVC stage `filter`: the rollout filters over every ingested source -> <lake>/pool/ (tables pool
and dropped), the funnel (in, dropped per rule, kept; per source) to metrics/filter.json.

    python stages/filter.py [--params params.yaml]
"""

from __future__ import annotations

from pathlib import Path

from tracelake.filters import run_filters
from tracelake.lake import TableWriter, output_dir, write_json, write_manifest
from tracelake.lakedb import connect, input_versions
from tracelake.schema import load_schema
from tracelake.stage import run_stage, stage_args
from tracelake.ui import progress

BATCH = 1000


def main(argv: list[str] | None = None) -> None:
    params, _ = stage_args(__doc__, argv)
    lake, sources = Path(params.lake), list(params.sources)
    con = connect(lake, sources, tables=("trajectories",))
    with progress("count tokens") as (_, advance):
        result = run_filters(con, params.filter, on_tokens=advance, sources=sources)

    out = lake / "pool"
    with output_dir(out) as tmp:
        tables = []
        for name, query in (("pool", "SELECT * FROM pool ORDER BY trajectory_id"),
                            ("dropped", "SELECT d.trajectory_id, b.task_id, b.source, d.rule, d.detail "
                                        "FROM dropped d JOIN base b USING (trajectory_id) ORDER BY d.trajectory_id")):
            writer = TableWriter(tmp, load_schema(name))
            for batch in con.sql(query).to_arrow_reader(BATCH):
                for row in batch.to_pylist():
                    writer.write(row)
            tables.append(writer.close())
        totals = {"in": sum(f["in"] for f in result.funnel.values()),
                  "kept": sum(f["kept"] for f in result.funnel.values()),
                  "dropped": {r: sum(f["dropped"][r] for f in result.funnel.values()) for r in result.rules}}
        funnel = {"rules": result.rules, "sources": result.funnel, "total": totals}
        manifest = write_manifest(
            tmp, kind="pool", tables=tables,
            inputs={"trajectories": input_versions(lake, "trajectories", sources)},
            params=params.section("filter"), formulas=result.formulas, counts=funnel)
    Path("metrics").mkdir(exist_ok=True)
    write_json(Path("metrics/filter.json"), funnel)
    dropped = ", ".join(f"{r} {n}" for r, n in totals["dropped"].items())
    print(f"filter: {totals['in']} in, {totals['kept']} kept; dropped: {dropped} -> {out} "
          f"(version {manifest['version_id']})")


if __name__ == "__main__":
    run_stage(main)
