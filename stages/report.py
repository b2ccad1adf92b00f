"""Stage `report`: the filter funnel and every scale's composition -> reports/report.html (one
self-contained page that opens offline), metrics/report.json and reports/plots/*.csv (for `dvc plots
show`, whose page loads Vega from a CDN)."""

from __future__ import annotations

from pathlib import Path

from tracelake.core.datasets import KINDS
from tracelake.core.lake import Lake
from tracelake.core.outputs import write_bytes
from tracelake.core.stage import Context, Result, Stage
from tracelake.curate.composition import build_report, write_plots
from tracelake.explore.report_page import render_report

PLOTS = "reports/plots"
PAGE = "reports/report.html"
# dvc.yaml's `plots`: file -> how `dvc plots show` draws it
PLOT_SPECS = {
    "rows_by_source.csv": ("grouped_bars", "scale", "rows", "Rows per source at each scale"),
    "rollouts_per_task.csv": (
        "grouped_lines",
        "rollouts",
        "tasks",
        "Tasks by number of rollouts (upsampling), per scale",
    ),
    "assistant_turns.csv": ("grouped_lines", "turns", "share", "Share of rows by assistant turns, per scale"),
    "tokens.csv": ("grouped_lines", "tokens", "share", "Share of rows by length (1,024-token buckets), per scale"),
    "funnel.csv": ("grouped_bars", "rule", "dropped", "Filter funnel per source (in, dropped by each rule, kept)"),
}


def run(ctx: Context) -> Result:
    metrics, plots = build_report(Path(ctx.params.lake), ctx.params.scales)
    write_plots(plots, Path(PLOTS))
    write_bytes(Path(PAGE), render_report(metrics, plots).encode())
    return Result(
        metrics=metrics,
        summary=[
            f"report {scale}: {m['dataset_id']}: {m['rows']} rows, {m['tasks']} tasks, turns p50 "
            f"{m['turns_p10_p50_p90'][1]}, rollouts/task {m['rollouts_per_task_min']}-{m['rollouts_per_task_max']}"
            for scale, m in metrics.items()
        ]
        + [f"report: {PAGE} (opens offline: no script, nothing fetched)"],
    )


STAGE = Stage(
    "report",
    __doc__,
    run,
    params=("scales", "lake"),
    # each scale's datasets (core/datasets.py: every kind built per scale) and the pool's funnel
    deps=(*(f"${{lake}}/{k.under(Lake('')).as_posix()}" for k in KINDS if k.per_scale), "${lake}/pool"),
    outs_uncached=(PAGE,),
    plots=PLOTS,
    metrics="metrics/report.json",
)
