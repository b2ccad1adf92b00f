"""Per-scale composition of the datasets: DVC metrics (metrics/report.json) and plot data
(reports/plots/*.csv, drawn by `dvc plots show` with the templates in .dvc/plots/).

Every plot file has a `group` column (the source or the scale) that the templates colour by.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import duckdb

from tracelake.core.assets import sql
from tracelake.core.datasets import KINDS
from tracelake.core.ids import dataset_label
from tracelake.core.lake import Lake, is_built
from tracelake.core.outputs import read_manifest

PLOTS = {  # plot -> (x column, y column); `group` is the source or the scale, as noted
    "rows_by_source": ("scale", "rows"),  # group: source
    "rollouts_per_task": ("rollouts", "tasks"),  # group: scale
    "assistant_turns": ("turns", "share"),  # group: scale
    "tokens": ("tokens", "share"),  # group: scale
    "funnel": ("rule", "dropped"),  # group: source
}


def build_report(lake: Path, scales: dict[str, int]) -> tuple[dict[str, Any], dict[str, list[list]]]:
    """(metrics, plot rows) for every scale's selection and the pool's funnel."""
    lake = Lake(lake)
    pool_file = str(lake.pool / "pool.parquet")
    con = duckdb.connect()
    metrics: dict[str, Any] = {}
    plots: dict[str, list[list]] = {name: [] for name in PLOTS}
    for scale, n in sorted(scales.items(), key=lambda kv: (kv[1], kv[0])):
        directory = lake.selection(scale)
        manifest = read_manifest(directory)
        binds = {"selection": str(directory / "selection.parquet"), "pool": pool_file}
        cursor = con.execute(sql("report_scale"), binds)
        row = dict(zip([d[0] for d in cursor.description], cursor.fetchall()[0]))
        metrics[scale] = {
            "dataset_id": manifest["dataset_id"],
            **row,
            "rows_by_source": manifest["counts"]["rows_by_source"],
            "sft": sft_thinking(lake.sft_export(scale), manifest["dataset_id"]),
            "built_from_it": built_from(lake, scale, manifest),
        }
        label = dataset_label(n)
        for plot, x, value in con.execute(sql("report_distributions"), binds).fetchall():
            if plot == "rows_by_source":
                plots[plot].append([label, int(value), x])
            elif plot == "rollouts_per_task":
                plots[plot].append([int(x), int(value), label])
            else:
                plots[plot].append([int(x), round(value, 6), label])
    funnel = read_manifest(lake.pool)["counts"]
    for source, f in funnel["sources"].items():
        plots["funnel"].append(["in", f["in"], source])
        for rule in funnel["rules"]:
            plots["funnel"].append([rule, f["dropped"][rule], source])
        plots["funnel"].append(["kept", f["kept"], source])
    return metrics, plots


def built_from(lake: Lake, scale: str, selection: dict[str, Any]) -> dict[str, str]:
    """The datasets of this scale built from this selection (core/datasets.py: every kind whose parent
    is the selection's kind), by their diff name: sft-1k -> its dataset id."""
    out = {}
    for kind in KINDS:
        if kind.parent != selection["kind"] or not is_built(kind.home(lake, scale)):
            continue
        m = read_manifest(kind.home(lake, scale))
        if m.get("inputs", {}).get(kind.parent_input) == selection["version_id"]:
            out[kind.named(scale)] = m.get("dataset_id") or m["version_id"]
    return out


def sft_thinking(export: Path, selection_id: str) -> dict[str, Any] | None:
    """The scale's SFT export, when it is built from this selection: its id, its thinking choice and
    its assistant turns by reasoning (tokens/rendering.py ThoughtCounts); None otherwise."""
    if not is_built(export):
        return None
    m = read_manifest(export)
    if m.get("inputs", {}).get("selection_dataset") != selection_id or "thinking" not in m["counts"]:
        return None
    return {
        "dataset_id": m["dataset_id"],
        "choice": m["counts"]["rendering"]["thinking"],
        **m["counts"]["thinking"],
    }


def write_plots(plots: dict[str, list[list]], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, rows in plots.items():
        x, y = PLOTS[name]
        with open(out_dir / f"{name}.csv", "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow([x, y, "group"])
            w.writerows(rows)
