"""Check 3: how the trace-table ingest scales with worker processes (16 cores), same bytes out.

    python tests/gpu/ingest_scaling.py --out OUT [--rows 20000] [--workers 1,4,16] [--work /tmp/gpu-ingest]
                                       [--budget-s 200] [--cpu-smoke]

Runs in a python with tracelake's ingest dependencies (pyarrow, orjson, PyYAML; PYTHONPATH with src/).

1. An OpenThoughts-Agent-style trace table of `--rows` rows (scaling.generate: tracelake.sample.
   openthoughts, the corpus of benchmarks/openthoughts.py and benchmarks/pipeline.py), written by one
   process per core: row i depends only on (seed, i) and the task plan, so each process writes whole
   part files, byte-identical to synthesize_openthoughts(rows_per_file=...)'s (the same lines in the
   same files; the tasks/ folders and synth_manifest.json, which ingest_traces does not read, are not
   written). Not timed against the ingest.
2. ingest_traces (src/tracelake/ingest/traces.py: the `ingest` stage's trace-table path,
   `executor.workers` = the workers argument) over those files once per worker count, the input read
   once beforehand so every run finds it in the page cache, no ingest cache.

PASS when every worker count gives the same rows, the same version ids and byte-identical output
files. Writes OUT/ingest_scaling.json: wall, CPU, rows/s, MB/s and speed-up against the first count.
The corpus and outputs stay under --work (not OUT), removed at the end. `--budget-s`: worker counts
not started by then are skipped (reported). `--cpu-smoke`: 400 rows, workers 1,2.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import time
from pathlib import Path

import scaling  # tests/gpu/scaling.py: run as a script, this folder is sys.path[0]
from report import report

SOURCE = "openthoughts"


def tree_digest(directory: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(directory.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(directory).as_posix().encode() + b"\0")
            with p.open("rb") as f:
                for block in iter(lambda: f.read(1 << 22), b""):
                    h.update(block)
    return h.hexdigest()


def warm(files: list[Path]) -> None:
    for p in files:
        with p.open("rb") as f:
            while f.read(1 << 24):
                pass


def check(args: argparse.Namespace, started: float) -> dict:
    from tracelake.core.executor import Executor
    from tracelake.ingest.traces import ingest_traces

    rows = 400 if args.cpu_smoke and args.rows is None else (args.rows or 20000)
    workers = [int(w) for w in (args.workers or ("1,2" if args.cpu_smoke else "1,4,16")).split(",")]
    work, result = scaling.start(args, "ingest_scaling", rows, workers=workers)
    files = sorted((work / "corpus" / "traces").glob("*.jsonl"))
    mb = result["corpus"]["bytes"] / 1e6
    runs = []
    for w in workers:
        if scaling.over_budget(args, started, runs, workers=w):
            continue
        warm(files)
        out = work / f"lake-w{w}" / "trajectories" / SOURCE
        cpu0, t = scaling.cpu_seconds(), time.perf_counter()
        r = ingest_traces(files, source=SOURCE, out_dir=out, executor=Executor("processes", w))
        wall = time.perf_counter() - t
        cpu = scaling.cpu_seconds() - cpu0
        runs.append(
            {
                "workers": w,
                "wall_s": round(wall, 2),
                "cpu_s": round(cpu, 1),
                "rows": r.rows,
                "rejects": r.rejects,
                "rows_per_s": round(r.rows / wall, 1),
                "mb_per_s": round(mb / wall, 1),
                "version_id": r.manifest.get("version_id"),
                "table_version_ids": {k: v.get("version_id") for k, v in r.manifest.get("tables", {}).items()},
                "tree_sha256": tree_digest(out),
            }
        )
        shutil.rmtree(out.parent.parent)
    return scaling.finish(args, work, result, runs, problems)


def problems(done: list[dict]) -> list[str]:
    found = []
    if len(done) < 2:
        found.append(f"only {len(done)} worker count(s) ran")
    if done and len({(r["rows"], r["version_id"], r["tree_sha256"]) for r in done}) != 1:
        found.append(
            "outputs differ across worker counts: "
            + ", ".join(f"w{r['workers']}: {r['rows']} rows {r['version_id']} {r['tree_sha256'][:12]}" for r in done)
        )
    if done and done[0]["rows"] == 0:
        found.append("no rows ingested")
    return found


def main() -> None:
    parser = scaling.arguments(
        __doc__, rows=(20000, 400), workers=("1,4,16", "1,2"), work="/tmp/gpu-ingest", budget_s=200
    )
    args = parser.parse_args()
    started = time.perf_counter()

    def passed(result: dict, runs: str) -> str:
        corpus = result.get("corpus", {})
        return (
            f"{corpus.get('rows')} rows / {corpus.get('bytes', 0) / 1e9:.2f} GB generated in "
            f"{corpus.get('seconds')} s; {runs}; same version ids"
        )

    report(
        "ingest_scaling",
        args.out,
        "ingest_scaling.json",
        lambda: check(args, started),
        lambda result: scaling.detail(result, lambda r: f"w{r['workers']}", "rows_per_s", "rows/s", passed),
    )


if __name__ == "__main__":
    main()
