"""A dataset of N rows has N rows: the pipeline over real-sized OpenThoughts-style traces, counted with
the model's real tokenizer (Qwen3's, read in place from ../shared/fixtures/qwen3-tokenizer), every
scale exported, and each export's rows checked against its scale.

    uv run python benchmarks/exact_rows.py --rows 20000 [--work .bench] [--thinking keep|drop]
                                           [--tokenizer DIR] [--json out.json]

The filter and export_sft count what LLaMA-Factory encodes (tokens/rendering.py: template qwen3 in
the mode of train.sft.mode and train.sft.thinking), so the export never rejects a selected row for
its length; a scale's selection always has N rows. Exits 1 when an export has fewer rows than its
scale (and says which and why). Each stage runs as its own process (wall, CPU, peak RSS as in
benchmarks/pipeline.py, which also makes the input data).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pipeline import ROOT, SOURCE, project, stage, synth, warm_input  # noqa: E402

QWEN3 = ROOT.parent / "shared" / "fixtures" / "qwen3-tokenizer"
SCALES = {"316": 316, "1k": 1000, "3k": 3160, "10k": 10000}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20000, help="trace rows")
    ap.add_argument("--work", type=Path, default=ROOT / ".bench", help="data and projects (reused)")
    ap.add_argument("--tokenizer", type=Path, default=QWEN3, help="the model's tokenizer directory")
    ap.add_argument("--thinking", default="keep", choices=["keep", "drop"], help="train.sft.thinking")
    ap.add_argument("--json", type=Path, help="write the measurements here")
    args = ap.parse_args()
    if not (args.tokenizer / "tokenizer.json").is_file():
        raise SystemExit(f"no tokenizer.json in {args.tokenizer} (Qwen3's: ../shared/fixtures/qwen3-tokenizer)")
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    log = work / f"exact-rows-{args.rows}.log"
    data = synth(work, args.rows, log)
    proj = project(work, f"exact-rows-{args.rows}", data, args.tokenizer.resolve(), count=True, caches=work / "caches")
    params = yaml.safe_load((proj / "params.yaml").read_text())
    params["scales"] = {k: v for k, v in SCALES.items() if v <= args.rows}
    params["train"]["sft"]["thinking"] = args.thinking
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    warm_input(data)
    steps = [stage(proj, log, "ingest", "ingest", SOURCE)]
    steps += [stage(proj, log, name, name) for name in ("score", "dedup", "filter")]
    results = {}
    for scale, n in params["scales"].items():
        steps += [
            stage(proj, log, f"select {scale}", "select", scale),
            stage(proj, log, f"export_sft {scale}", "export_sft", scale),
        ]
        m = json.loads((proj / "metrics" / "export_sft" / f"{scale}.json").read_text())
        results[scale] = {
            "scale": n,
            **{k: m[k] for k in ("dataset_id", "rows_in", "rows_out", "rejected", "max_tokens")},
        }
        results[scale]["thinking"] = m["thinking"]
    funnel = json.loads((proj / "metrics" / "filter.json").read_text())["total"]
    print(
        f"\n{args.rows:,} rows, tokenizer {args.tokenizer.name}, thinking {args.thinking}: filter kept {funnel['kept']:,}, dropped {funnel['dropped']}"
    )
    print("| scale | dataset | rows out / scale | rejected | max n_tokens |\n|---|---|---|---|---|")
    short = []
    for scale, r in results.items():
        print(
            f"| {scale} | {r['dataset_id']} | {r['rows_out']:,} / {r['scale']:,} | {r['rejected'] or 'none'} | {r['max_tokens']:,} |"
        )
        if r["rows_out"] != r["scale"]:
            short.append(f"{scale}: {r['rows_out']} of {r['scale']} rows ({r['rejected']})")
    print("| step | wall s | CPU s | peak MB |\n|---|---|---|---|")
    for s in steps:
        print(f"| {s.name} | {s.wall_s:.1f} | {s.cpu_s:.1f} | {s.rss_mb:,.0f} |")
    if args.json:
        args.json.write_text(
            json.dumps({"exports": results, "filter": funnel, "steps": [vars(s) for s in steps]}, indent=2)
        )
    if short:
        print("FEWER ROWS THAN THE SCALE: " + "; ".join(short))
        return 1
    print("every export has exactly its scale's rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
