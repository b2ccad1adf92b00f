"""Ingest throughput on the synthetic corpus at a chosen scale.

    uv run python benchmarks/bench_ingest.py --trials 20000

Synthesizes N trials into a temporary directory (not timed against ingest), then times
`ingest harbor` and `ingest traces` per source, and reports rows/s and the peak RSS of this process.
A reference is measured in the same run: reading + parsing every input JSON file (orjson), the floor
any ingest has to pay.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import orjson

from tracelake.ingest.harbor import ingest_harbor
from tracelake.ingest.traces import ingest_traces
from tracelake.sample.synth import DEFAULT_SOURCES, synthesize


def parse_floor(root: Path) -> float:
    t = time.perf_counter()
    for p in sorted(root.rglob("*.json*")):
        data = p.read_bytes()
        try:
            [
                orjson.loads(line) for line in data.splitlines() if line.strip()
            ] if p.suffix == ".jsonl" else orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=20000)
    ap.add_argument("--tasks", type=int, default=3000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data, lake = Path(tmp) / "data", Path(tmp) / "lake"
        t = time.perf_counter()
        synthesize(data, trials=args.trials, tasks=args.tasks)
        print(f"synth {args.trials} trials: {time.perf_counter() - t:.1f}s")
        floor = parse_floor(data)
        t, rows, inputs = time.perf_counter(), 0, 0
        for spec in DEFAULT_SOURCES:
            out = lake / spec.name
            if spec.format == "harbor":
                r = ingest_harbor(data / spec.name / "jobs", source=spec.name, out_dir=out)
            else:
                r = ingest_traces([data / spec.name / "traces.jsonl"], source=spec.name, out_dir=out)
            rows, inputs = rows + r.rows, inputs + r.inputs
        wall = time.perf_counter() - t
        size = sum(p.stat().st_size for p in lake.rglob("*.parquet"))
        print(
            f"ingest: {inputs} inputs -> {rows} rows in {wall:.1f}s ({rows / wall:,.0f} rows/s), "
            f"parquet {size / 1e6:.1f} MB"
        )
        print(
            f"reference, orjson parse of every input file: {floor:.1f}s (ingest = {wall / floor:.1f}x the parse floor)"
        )
        print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
