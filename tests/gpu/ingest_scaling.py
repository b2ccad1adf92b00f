"""Check 3: how the trace-table ingest scales with worker processes (16 cores), same bytes out.

    python tests/gpu/ingest_scaling.py --out OUT [--rows 20000] [--workers 1,4,16] [--work /tmp/gpu-ingest]
                                       [--budget-s 200] [--cpu-smoke]

Runs in a python with tracelake's ingest dependencies (pyarrow, orjson, PyYAML; PYTHONPATH with src/).

1. An OpenThoughts-Agent-style trace table of `--rows` rows (tracelake.sample.openthoughts, the
   corpus of `tracelake synth --profile openthoughts` and benchmarks/pipeline.py), written by one
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
import multiprocessing
import os
import resource
import shutil
import time
from pathlib import Path

from report import report  # tests/gpu/report.py: run as a script, this folder is sys.path[0]

SOURCE = "openthoughts"
_PLAN: tuple = ()


def _write_part(task: tuple[int, int, int, int, str]) -> int:
    """Rows [start, stop) of the table as traces/part-<index>.jsonl (what synthesize_openthoughts writes)."""
    import orjson

    from tracelake.sample.openthoughts import _row, _task

    index, start, stop, seed, traces = task
    tasks, task_of, copy_of = _PLAN
    written = 0
    with open(Path(traces) / f"part-{index:05d}.jsonl", "wb", buffering=1 << 20) as fh:
        for i in range(start, stop):
            line = orjson.dumps(
                _row(seed, i, _task(seed, task_of[i], tasks), copy_of[i]), option=orjson.OPT_APPEND_NEWLINE
            )
            fh.write(line)
            written += len(line)
    return written


def generate(corpus: Path, rows: int, rows_per_file: int, procs: int, seed: int = 0) -> dict:
    """The trace table's part files, written by `procs` forked processes."""
    global _PLAN
    from tracelake.sample import openthoughts as ot

    traces = corpus / "traces"
    traces.mkdir(parents=True)
    started = time.perf_counter()
    if all(hasattr(ot, name) for name in ("_sizes", "_plan", "_row", "_task")):
        tasks = ot._sizes(rows, None, rows_per_file=rows_per_file)
        task_of, copy_of = ot._plan(seed, rows, tasks)
        _PLAN = (tasks, task_of, copy_of)
        jobs = [
            (i, start, min(start + rows_per_file, rows), seed, str(traces))
            for i, start in enumerate(range(0, rows, rows_per_file))
        ]
        with multiprocessing.get_context("fork").Pool(procs) as pool:
            sizes = pool.map(_write_part, jobs, chunksize=1)
        how = f"{procs} processes"
    else:  # the module changed shape: the public, one-process writer
        shutil.rmtree(corpus)
        ot.synthesize_openthoughts(corpus, rows=rows, seed=seed, rows_per_file=rows_per_file)
        sizes = [p.stat().st_size for p in sorted(traces.glob("*.jsonl"))]
        how = "synthesize_openthoughts (1 process)"
    return {
        "rows": rows,
        "files": len(sizes),
        "bytes": sum(sizes),
        "seconds": round(time.perf_counter() - started, 2),
        "written_by": how,
    }


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


def cpu_seconds() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def check(args: argparse.Namespace, started: float) -> dict:
    from tracelake.core.executor import Executor
    from tracelake.ingest.traces import ingest_traces

    rows = 400 if args.cpu_smoke and args.rows is None else (args.rows or 20000)
    workers = [int(w) for w in (args.workers or ("1,2" if args.cpu_smoke else "1,4,16")).split(",")]
    work = Path(args.work)
    if work.exists():
        shutil.rmtree(work)
    corpus = work / "corpus"
    cpus = len(os.sched_getaffinity(0))
    result: dict = {"check": "ingest_scaling", "cpus": cpus, "workers": workers, "cpu_smoke": args.cpu_smoke}
    result["corpus"] = generate(corpus, rows, max(1, rows // 40), min(cpus, 16))
    files = sorted((corpus / "traces").glob("*.jsonl"))
    mb = result["corpus"]["bytes"] / 1e6
    runs = []
    for w in workers:
        if time.perf_counter() - started > args.budget_s:
            runs.append({"workers": w, "skipped": f"over the {args.budget_s:.0f} s budget"})
            continue
        warm(files)
        out = work / f"lake-w{w}" / "trajectories" / SOURCE
        cpu0, t = cpu_seconds(), time.perf_counter()
        r = ingest_traces(files, source=SOURCE, out_dir=out, executor=Executor("processes", w))
        wall = time.perf_counter() - t
        cpu = cpu_seconds() - cpu0
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
    done = [r for r in runs if "wall_s" in r]
    for r in done:
        r["speedup"] = round(done[0]["wall_s"] / r["wall_s"], 2)
    result["runs"] = runs
    problems = []
    if len(done) < 2:
        problems.append(f"only {len(done)} worker count(s) ran")
    if done and len({(r["rows"], r["version_id"], r["tree_sha256"]) for r in done}) != 1:
        problems.append(
            "outputs differ across worker counts: "
            + ", ".join(f"w{r['workers']}: {r['rows']} rows {r['version_id']} {r['tree_sha256'][:12]}" for r in done)
        )
    if done and done[0]["rows"] == 0:
        problems.append("no rows ingested")
    if problems:
        result["error"] = "; ".join(problems)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT") or "gpu-out")
    parser.add_argument("--rows", type=int, default=None, help="default 20000 (400 with --cpu-smoke)")
    parser.add_argument("--workers", default=None, help="comma list (default 1,4,16; 1,2 with --cpu-smoke)")
    parser.add_argument("--work", default="/tmp/gpu-ingest", help="scratch directory (removed at the end)")
    parser.add_argument("--budget-s", type=float, default=200)
    parser.add_argument("--keep", action="store_true", help="keep the corpus and outputs under --work")
    parser.add_argument("--cpu-smoke", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()

    def detail(result: dict) -> str:
        corpus = result.get("corpus", {})
        runs = "; ".join(
            f"w{r['workers']} {r['wall_s']} s {r['rows_per_s']:.0f} rows/s x{r['speedup']}"
            if "wall_s" in r
            else f"w{r['workers']} skipped"
            for r in result.get("runs", [])
        )
        if "error" in result:
            return result["error"] + (f" ({runs})" if runs else "")
        return (
            f"{corpus.get('rows')} rows / {corpus.get('bytes', 0) / 1e9:.2f} GB generated in "
            f"{corpus.get('seconds')} s; {runs}; same version ids"
        )

    report("ingest_scaling", args.out, "ingest_scaling.json", lambda: check(args, started), detail)


if __name__ == "__main__":
    main()
