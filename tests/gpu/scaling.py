"""What the scaling checks (3: ingest_scaling.py, 4: token_scaling.py) share: the OpenThoughts-style
trace table they run over, written into a fresh --work folder; the options they both take; a run
skipped once --budget-s is spent; the end (speed-ups against the first run, the problems found as the
error, --work removed) and the line that sums up the runs."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # openthoughts.py, the corpus
_PLAN: tuple = ()


def _write_part(task: tuple[int, int, int, int, str]) -> int:
    """Rows [start, stop) of the table as traces/part-<index>.jsonl (what synthesize_openthoughts writes)."""
    import orjson
    from openthoughts import _row, _task  # benchmarks/openthoughts.py

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
    import openthoughts as ot  # benchmarks/openthoughts.py

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


def cpu_seconds() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def arguments(
    description: str, *, rows: tuple[int, int], workers: tuple[str, str], work: str, budget_s: float
) -> argparse.ArgumentParser:
    """The options both checks take; `rows` and `workers`: their defaults without and with --cpu-smoke."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT") or "gpu-out")
    parser.add_argument("--rows", type=int, default=None, help=f"default {rows[0]} ({rows[1]} with --cpu-smoke)")
    parser.add_argument(
        "--workers", default=None, help=f"comma list (default {workers[0]}; {workers[1]} with --cpu-smoke)"
    )
    parser.add_argument("--work", default=work, help="scratch directory (removed at the end)")
    parser.add_argument("--budget-s", type=float, default=budget_s)
    parser.add_argument("--keep", action="store_true", help="keep what it wrote under --work")
    parser.add_argument("--cpu-smoke", action="store_true")
    return parser


def start(args: argparse.Namespace, name: str, rows: int, **wanted: object) -> tuple[Path, dict]:
    """A fresh --work folder with a trace table of `rows` rows in work/corpus, and the result so far."""
    work = Path(args.work)
    if work.exists():
        shutil.rmtree(work)
    cpus = len(os.sched_getaffinity(0))
    result: dict = {"check": name, "cpus": cpus, **wanted, "cpu_smoke": args.cpu_smoke}
    result["corpus"] = generate(work / "corpus", rows, max(1, rows // 40), min(cpus, 16))
    return work, result


def over_budget(args: argparse.Namespace, started: float, runs: list[dict], **run: object) -> bool:
    """Whether --budget-s is spent; if it is, the run is listed as skipped."""
    if time.perf_counter() - started <= args.budget_s:
        return False
    runs.append({**run, "skipped": f"over the {args.budget_s:.0f} s budget"})
    return True


def finish(
    args: argparse.Namespace, work: Path, result: dict, runs: list[dict], problems: Callable[[list[dict]], list[str]]
) -> dict:
    """The runs with their speed-ups against the first finished one, what `problems` finds in the
    finished runs as the error, and --work removed unless --keep."""
    done = [r for r in runs if "wall_s" in r]
    for r in done:
        r["speedup"] = round(done[0]["wall_s"] / r["wall_s"], 2)
    result["runs"] = runs
    found = problems(done)
    if found:
        result["error"] = "; ".join(found)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return result


def detail(result: dict, label: Callable[[dict], str], rate: str, unit: str, passed: Callable[[dict, str], str]) -> str:
    """The PASS/FAIL line's detail: each run's wall time, rate and speed-up (or that it was skipped)."""
    runs = "; ".join(
        f"{label(r)} {r['wall_s']} s {r[rate]:.0f} {unit} x{r['speedup']}" if "wall_s" in r else f"{label(r)} skipped"
        for r in result.get("runs", [])
    )
    if "error" in result:
        return result["error"] + (f" ({runs})" if runs else "")
    return passed(result, runs)
