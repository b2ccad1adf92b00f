"""DVC stage `report`: composition of every scale's dataset -> metrics/report.json (DVC metrics)
and reports/plots/*.csv (DVC plots: `dvc plots show`).

    python stages/report.py [--params params.yaml]
"""

from __future__ import annotations

from pathlib import Path

from tracelake.core.stage import run_stage, write_metrics
from tracelake.curate.report import build_report, write_plots
from tracelake.params import stage_args


def main(argv: list[str] | None = None) -> None:
    params, _ = stage_args(__doc__, argv)
    metrics, plots = build_report(Path(params.lake), params.select.scales)
    write_metrics("metrics/report.json", metrics)
    write_plots(plots, Path("reports/plots"))
    for scale, m in metrics.items():
        print(f"report {scale}: {m['dataset_id']}: {m['rows']} rows, {m['tasks']} tasks, "
              f"turns p50 {m['turns_p10_p50_p90'][1]}, rollouts/task {m['rollouts_per_task_min']}-"
              f"{m['rollouts_per_task_max']}")


if __name__ == "__main__":
    run_stage(main)
