"""`tracelake dedup`: the largest clusters of near-duplicate tasks and the contaminated tasks; with
`--explain TASK`, that task's cluster side by side (sql/dedup_explain.sql).

    tracelake dedup                        # summary: clusters by size, contamination per benchmark
    tracelake dedup --explain swesmith-00041   # a task name, source/name, task_id or a prefix of one
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tracelake.core import assets
from tracelake.core.errors import BadInput
from tracelake.core.ui import literal, literals
from tracelake.explore.sql import lake_connection

PREVIEW = 700  # characters of each instruction shown side by side


def _need(views: dict[str, str], lake: Path) -> None:
    missing = [v for v in ("task_clusters", "contamination", "tasks") if v not in views]
    if missing:
        raise BadInput(f"{lake} has no {', '.join(missing)} table: run `dvc repro dedup` first")


def explain(lake: Path, ref: str) -> list[dict[str, Any]]:
    """The rows of the cluster of the task `ref` names (representative first); a one-line error when
    it names no task or several clusters."""
    con, views = lake_connection(lake)
    _need(views, lake)
    rows = con.sql(assets.sql("dedup_explain"), params={"ref": ref}).to_arrow_table().to_pylist()
    if not rows:
        raise BadInput(f"no task matches {ref!r} (a task name, source/name, task_id or a unique prefix of one)")
    clusters = {r["task_id"] for r in rows if r["representative"]}
    if len(clusters) > 1:
        names = ", ".join(f"{r['source']}/{r['task']}" for r in rows if r["representative"])
        raise BadInput(f"{ref!r} matches tasks in {len(clusters)} clusters (represented by {names}): be more precise")
    return rows


def render_explain(rows: list[dict[str, Any]], ref: str, console: Console) -> None:
    rep = rows[0]
    name = literal(f"{rep['source']}/{rep['task']}", "bold")
    if rep["cluster_size"] == 1:
        console.print(Text.assemble(name, literal(f" ({rep['task_id']}) has no near-duplicate.")))
    else:
        console.print(
            Text.assemble(
                (f"cluster of {rep['cluster_size']} tasks", "bold"),
                ", represented by ",
                name,
                literal(f" ({rep['task_id']}, {rep['trajectories']} trajectories)"),
            )
        )
    shown = [rep] + [
        r
        for r in rows[1:]
        if ref in (r["task_id"], r["task"], f"{r['source']}/{r['task']}") or r["task_id"].startswith(ref)
    ][:1]
    shown += [r for r in rows[1:] if r not in shown][: max(0, 3 - len(shown))]
    table = Table(show_lines=True)
    table.add_column("")
    for r in shown:
        table.add_column(literal(f"{r['source']}/{r['task']}"), overflow="fold")
    for label, value in (
        ("task_id", lambda r: r["task_id"]),
        ("relation", lambda r: "representative" if r["representative"] else r["method"]),
        ("similarity", lambda r: _similarity(r)),
        ("rollouts", lambda r: f"{r['trajectories']}" + (" (dropped: near_duplicate_v1)" if r["dropped"] else "")),
        ("benchmark", lambda r: _benchmark(r)),
        ("instruction", lambda r: _preview(r["instruction"])),
    ):
        table.add_row(label, *literals(value(r) for r in shown))
    console.print(table)
    if len(rows) > len(shown):
        console.print(f"{len(rows) - len(shown)} more member(s):")
        for r in rows:
            if r not in shown:
                console.print(
                    literal(
                        f"  {r['source']}/{r['task']}  {r['method']}  {_similarity(r)}{'  dropped' if r['dropped'] else ''}"
                    )
                )


def _similarity(r: dict[str, Any]) -> str:
    parts = [
        f"jaccard {r['jaccard']:.3f}" if r["jaccard"] is not None else "",
        f"cosine {r['cosine']:.3f}" if r["cosine"] is not None else "",
    ]
    return ", ".join(p for p in parts if p) or "-"


def _benchmark(r: dict[str, Any]) -> str:
    if r["benchmark"] is None:
        return "-"
    evidence = f'"{r["ngram"]}"' if r["ngram"] else f"cosine {r['contamination_similarity']:.3f}"
    return f"{r['benchmark']} {r['benchmark_item']} ({r['contamination_method']} {evidence}): contaminated_v1"


def _preview(text: str) -> str:
    return text if len(text) <= PREVIEW else text[:PREVIEW] + f" … ({len(text) - PREVIEW} more characters)"


def summary(lake: Path, top: int = 10) -> dict[str, Any]:
    con, views = lake_connection(lake)
    _need(views, lake)
    clusters = (
        con.sql(f"""
        SELECT r.source || '/' || r.task AS representative, k.cluster_size AS tasks,
               count(*) FILTER (WHERE k.dropped) AS dropped, string_agg(DISTINCT k.method, ', ') FILTER (WHERE NOT k.task_id = k.cluster_id) AS methods
        FROM task_clusters k JOIN task_clusters r ON r.task_id = k.cluster_id
        WHERE k.cluster_size > 1
        GROUP BY ALL ORDER BY tasks DESC, representative LIMIT {int(top)}""")
        .to_arrow_table()
        .to_pylist()
    )
    totals = (
        con.sql("""SELECT count(*) AS tasks, count(*) FILTER (WHERE cluster_size > 1) AS clustered,
                               count(DISTINCT cluster_id) FILTER (WHERE cluster_size > 1) AS clusters,
                               count(*) FILTER (WHERE dropped) AS dropped FROM task_clusters""")
        .to_arrow_table()
        .to_pylist()[0]
    )
    contamination = (
        con.sql("""SELECT benchmark, count(*) AS tasks, count(*) FILTER (WHERE method = 'embedding') AS by_embedding
                               FROM contamination GROUP BY 1 ORDER BY 1""")
        .to_arrow_table()
        .to_pylist()
    )
    return {"totals": totals, "clusters": clusters, "contamination": contamination}


def render_summary(s: dict[str, Any], console: Console) -> None:
    t = s["totals"]
    console.print(
        f"{t['tasks']} tasks: {t['clusters']} clusters of near-duplicates hold {t['clustered']} tasks; "
        f"{t['dropped']} dropped by near_duplicate_v1"
    )
    if s["clusters"]:
        table = Table("representative", "tasks", "dropped", "how the others match")
        for c in s["clusters"]:
            table.add_row(*literals((c["representative"], c["tasks"], c["dropped"], c["methods"])))
        console.print(table)
    for c in s["contamination"]:
        console.print(
            literal(
                f"benchmark {c['benchmark']}: {c['tasks']} contaminated task(s) "
                f"({c['by_embedding']} by embedding similarity) dropped by contaminated_v1"
            )
        )
    if not s["contamination"]:
        console.print("no task copies a benchmark (decontaminate.benchmarks)")
    console.print("explain one: tracelake dedup --explain <task>")
