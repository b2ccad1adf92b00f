"""The terminal summary of a diff report (see diff.py for what it holds). Its values (task names,
sources, rules, details, params, specs) print as they are: `core.ui.literal`, never markup."""

from __future__ import annotations

from typing import Any, Callable

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tracelake.core.ui import literal, literals

SHOW_TASKS = 10
SHOW_MOVED = 12
QUANTILES = ("min", "p10", "p25", "p50", "p75", "p90", "mean", "max")


def signed(n: int | float) -> str:
    return f"+{n:,}" if n > 0 else f"{n:,}" if n < 0 else "0"


def _style(n: int | float) -> str:
    return "green" if n > 0 else "red" if n < 0 else "dim"


def _delta(n: int | float) -> Text:
    """A signed number, green when it grows, red when it shrinks."""
    return Text(signed(n), style=_style(n))


def source_cells(r: dict[str, Any], name: Callable[[str], Any], delta: Callable[[int], Any]) -> list[Any]:
    """One row of the rows-per-source table: the source (through `name`), rows A, rows B, their
    difference (through `delta`), trajectories A → B and tasks A → B."""
    return [
        name(r["source"]),
        f"{r['rows_a']:,}",
        f"{r['rows_b']:,}",
        delta(r["rows_delta"]),
        f"{r['trajectories_a']:,} → {r['trajectories_b']:,}",
        f"{r['tasks_a']:,} → {r['tasks_b']:,}",
    ]


def side_line(label: str, side: dict[str, Any]) -> str:
    at = f"  at {side['commit'][:10]}" if side.get("commit") else ""
    return f"{label}  {side['spec']}  ({side['path']}{at})  {side['kind']} {side['dataset_id']}  {side['rows']:,} rows"


def render(report: dict[str, Any], console: Console) -> None:
    p = console.print
    p(literal(side_line("A", report["a"])))
    p(literal(side_line("B", report["b"])))
    for note in report["notes"]:
        p(literal(f"note: {note}", "yellow"))
    s = report["summary"]
    if report["identical"]:
        p("\nSame content id: the two versions are identical.", style="bold")
    p(Text.assemble("\n", ("Rows", "bold"), f" {s['rows_a']:,} → {s['rows_b']:,} (", _delta(s["rows_delta"]), ")"))
    t = s["trajectories"]
    p(Text.assemble(("Trajectories", "bold"), "  ", literal(" · ".join(f"{k} {t[k]['trajectories']:,}" for k in t))))
    line = scorer_line(s)
    if line:
        p(Text.assemble(("Scorers", "bold"), "  ", literal(line)))

    if report["explained"]:
        table = Table(title="Why rows moved (from the other side's lineage)", title_justify="left", title_style="bold")
        for col in ("status", "stage", "rule", "trajectories", "rows Δ"):
            table.add_column(col, justify="right" if col in ("trajectories", "rows Δ") else "left")
        for e in report["explained"]:
            table.add_row(
                *literals((e["status"], e["stage"], e["rule"])), f"{e['trajectories']:,}", _delta(e["rows_delta"])
            )
        p(table)

    if report["params"]:
        table = Table(title="Params that differ", title_justify="left", title_style="bold")
        for col in ("key", "A", "B"):
            table.add_column(col, overflow="fold")
        for d in report["params"]:
            table.add_row(*literals((d["key"], fmt_value(d["a"]), fmt_value(d["b"]))))
        p(table)
    else:
        p("[bold]Params[/]: no difference in the manifests of the two versions and their lineage")

    f = report["funnel"]
    if f is not None:
        tot = f["total"]
        table = Table(
            title=f"Filter funnel (pool): in {tot['in_a']:,} → {tot['in_b']:,}, kept {tot['kept_a']:,} → {tot['kept_b']:,}",
            title_justify="left",
            title_style="bold",
        )
        for col in ("rule", "dropped A", "dropped B", "Δ"):
            table.add_column(col, justify="left" if col == "rule" else "right")
        for r in tot["rules"]:
            table.add_row(literal(r["rule"]), f"{r['a']:,}", f"{r['b']:,}", _delta(r["delta"]))
        p(table)

    table = Table(title="Rows per source", title_justify="left", title_style="bold")
    for col in ("source", "A", "B", "Δ", "trajectories A → B", "tasks A → B"):
        table.add_column(col, justify="left" if col == "source" else "right")
    for r in report["sources"]:
        table.add_row(*source_cells(r, literal, _delta))
    p(table)

    table = Table(title="Distributions over rows", title_justify="left", title_style="bold")
    table.add_column("metric")
    table.add_column("side")
    for q in QUANTILES:
        table.add_column(q, justify="right")
    for metric in ("turns", "tokens"):
        d = report["distributions"].get(metric, {})
        for side in ("a", "b"):
            if side in d:
                table.add_row(
                    metric if side == "a" else "", side.upper(), *literals(fmt_value(d[side][q]) for q in QUANTILES)
                )
    p(table)

    tasks = report["tasks"]
    c = tasks["counts"]
    p(
        f"[bold]Tasks[/]  added {c['added']:,} · removed {c['removed']:,} · rollout count changed {c['changed']:,} · "
        f"unchanged {c['unchanged']:,}"
    )
    if tasks["top"]:
        table = Table(title="Largest per-task changes (rows)", title_justify="left", title_style="bold")
        for col in ("task", "source", "A", "B", "Δ", "task_id"):
            table.add_column(col, justify="right" if col in ("A", "B", "Δ") else "left")
        for r in tasks["top"][:SHOW_TASKS]:
            table.add_row(
                *literals((r["task"], r["source"], r["rows_a"], r["rows_b"])), _delta(r["delta"]), literal(r["task_id"])
            )
        p(table)

    moved = report["moved"]
    if moved:
        table = Table(
            title=f"Moved trajectories (first {min(SHOW_MOVED, len(moved))} of {len(moved):,}; --json lists all)",
            title_justify="left",
            title_style="bold",
        )
        for col in ("trajectory_id", "status", "copies A → B", "source", "task", "why"):
            table.add_column(col, overflow="fold")
        for r in moved[:SHOW_MOVED]:
            why = " ".join(x for x in (r["stage"], r["rule"]) if x) + (f": {r['detail']}" if r["detail"] else "")
            table.add_row(
                *literals(
                    (r["trajectory_id"], r["status"], f"{r['copies_a']} → {r['copies_b']}", r["source"], r["task"], why)
                )
            )
        p(table)


def scorer_line(summary: dict[str, Any]) -> str | None:
    """`A X → B Y: ...` when the two selections were upsampled by different scorers, else None."""
    sc = summary.get("scorers") or {}
    if not sc.get("changed"):
        return None
    return f"A {sc['a']} → B {sc['b']}: the two selections upsampled by different scorers"


def fmt_value(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:,.2f}".rstrip("0").rstrip(".")
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)
