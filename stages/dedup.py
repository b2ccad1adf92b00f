"""DVC stage `dedup`: near-duplicate tasks and benchmark contamination over every ingested task ->
<lake>/dedup/ (task_clusters.parquet, contamination.parquet) and <lake>/embeddings/ (the LanceDB
table of text embeddings), counts to metrics/dedup.json. The filter stage drops what they name
(rules near_duplicate_v1 and contaminated_v1).

    python stages/dedup.py [--params params.yaml]
"""

from __future__ import annotations

from pathlib import Path

from tracelake.core.assets import sql
from tracelake.core.lake import TableInfo, TableWriter, output_dir, write_manifest
from tracelake.core.lakedb import connect, input_versions
from tracelake.core.layout import Lake
from tracelake.core.schema import load_schema
from tracelake.core.stage import run_stage, write_metrics
from tracelake.core.ui import progress_status
from tracelake.curate.dedup.run import run_dedup
from tracelake.curate.dedup.vectors import TABLE, vectors_digest
from tracelake.params import stage_args


def main(argv: list[str] | None = None) -> None:
    params, _ = stage_args(__doc__, argv)
    lake, sources = Lake(params.lake), list(params.sources)
    con = connect(lake.root, sources)
    tasks = con.sql(sql("dedup_tasks")).to_arrow_table()
    inputs = {"tasks": input_versions(lake.root, "tasks", sources),
              "trajectories": input_versions(lake.root, "trajectories", sources)}
    dedup_params = {k: v for k, v in params.section("dedup").items() if k != "cache"}
    cache = Path(params.dedup.cache) if params.dedup.cache else None

    with output_dir(lake.embeddings) as lance_tmp, progress_status("dedup") as (_, advance):
        result = run_dedup(tasks, params.dedup, params.decontaminate, lance_dir=lance_tmp, cache_root=cache,
                           progress=lambda what, n: advance(n, what))
        if result.embeddings is not None:
            emb = result.counts["embedding"]
            info = TableInfo(TABLE, f"{TABLE}.lance", result.embeddings.num_rows,
                             vectors_digest(result.embeddings)[:12], result.embedder)
            write_manifest(lance_tmp, kind="embeddings", tables=[info], inputs=inputs,
                           params={"embedding": dedup_params["embedding"]}, formulas={"embedding": result.formulas["embedding"]},
                           counts={"rows": result.embeddings.num_rows, "search": {k: emb[k] for k in ("index", "partitions", "nprobes")}})
        else:
            write_manifest(lance_tmp, kind="embeddings", tables=[], inputs=inputs, params={}, formulas={},
                           counts={"rows": 0, "search": None})

    with output_dir(lake.dedup) as tmp:
        infos = []
        for name, table in (("task_clusters", result.task_clusters), ("contamination", result.contamination)):
            writer = TableWriter(tmp, load_schema(name))
            writer.write_batch(table)
            infos.append(writer.close())
        manifest = write_manifest(tmp, kind="dedup", tables=infos, inputs=inputs,
                                  params={"dedup": dedup_params, "decontaminate": params.section("decontaminate")},
                                  formulas=result.formulas, counts=result.counts)
    write_metrics("metrics/dedup.json", result.counts)
    c = result.counts
    print(f"dedup: {c['tasks']} tasks, {c['clusters']['clusters']} clusters of {c['clusters']['clustered_tasks']} "
          f"tasks, {c['clusters']['dropped_tasks']} dropped (keep: {params.dedup.keep}); "
          f"{c['contamination']['tasks']} contaminated -> {lake.dedup} (version {manifest['version_id']})")
    if "embedding" in c:
        e = c["embedding"]
        print(f"dedup: embeddings: {result.cache.summary()}; {e['texts']} texts, {e['index']} search "
              f"-> {lake.embeddings}")


if __name__ == "__main__":
    run_stage(main)
