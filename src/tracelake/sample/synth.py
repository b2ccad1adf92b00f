"""Deterministic synthetic corpus of Harbor-style agent runs: tracelake's embedded sample.

`synthesize` writes what the terminus-2 agent of Harbor leaves behind, at any scale, from a seed:

    out/<source>/tasks/<task>/...   task directories                          (tasks.py)
    out/<source>/jobs/<job>/...     Harbor jobs and trials, format "harbor"   (harbor.py, atif.py)
    out/<source>/traces.jsonl       a published-style trace table, format "traces"  (traces.py)
    out/benchmark/<task>/...        benchmark tasks (instruction.md)  (near_duplicates.py)
    out/synth_manifest.json         params, counts, faults, planted copies (written last, here)

Trials are planned in trials.py and damaged on purpose in faults.py; their text comes from text.py.
Every random choice comes from a `random.Random` seeded by a hash of (seed, source, what, index),
so the same parameters give byte-identical files, and output is written trial by trial (memory
stays flat at 100K+ trials). The manifest lists each injected fault (HARBOR_FAULTS, TRACE_FAULTS)
as {source, path, line, fault}, where path is the damaged file, or the trial directory for
missing_result_json and duplicate_trial, and line is the 1-based JSONL line for trace rows.

Curation material, not faults (the filters must deal with them, ingest must keep them): a few
Harbor trials with a flood of terminal output far past a 32K-token context, and, in trace tables,
earlier-episode rows and re-published identical conversations; the manifest counts them under
`extras`.

Planted copies, for measuring dedup and decontamination (near_duplicates.py): about a tenth of a
source's tasks are exact, near-exact or paraphrased copies of an earlier task of the same source,
and a few are copies of a benchmark task; each keeps its own name and trials, which carry the
copied instruction. The manifest lists them under `planted` ({source, task, of, kind} and
{source, task, benchmark, kind}), and `near_duplicates=0, benchmark_tasks=0` plants none.

    uv run python -c "from pathlib import Path; from tracelake.sample.synth import synthesize; \\
        print(synthesize(Path('data/synth'), seed=0, trials=2000, tasks=300))"
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tracelake.core.errors import BadInput
from tracelake.sample.common import FORMATS, STYLES, SourceSpec, apportion, dumps, seeded, write
from tracelake.sample.faults import HARBOR_FAULTS, TRACE_FAULTS
from tracelake.sample.harbor import HarborWriter
from tracelake.sample.near_duplicates import (
    BENCHMARK_DIR,
    BENCHMARK_TASKS,
    NEAR_DUPLICATE_RATE,
    Planted,
    SourcePlanter,
    copyable,
    make_benchmark,
)
from tracelake.sample.tasks import Task, make_task, write_task
from tracelake.sample.traces import TraceWriter

__all__ = [
    "BENCHMARK_TASKS",
    "DEFAULT_SOURCES",
    "HARBOR_FAULTS",
    "NEAR_DUPLICATE_RATE",
    "TRACE_FAULTS",
    "SourceSpec",
    "SynthSummary",
    "synthesize",
]


@dataclass
class SynthSummary:
    trials: dict[str, int]  # per source: trial dirs (or JSONL rows), faults included
    tasks: dict[str, int]  # per source: task directories written
    faults: dict[str, dict[str, int]]  # per source: fault name -> count injected
    extras: dict[str, dict[str, int]] = field(default_factory=dict)  # per source: curation material
    # "near_duplicates" / "benchmark_copies" -> kind -> count planted over all sources
    planted: dict[str, dict[str, int]] = field(default_factory=dict)


DEFAULT_SOURCES: tuple[SourceSpec, ...] = (
    SourceSpec("swesmith", "swesmith", "harbor", 0.45),
    SourceSpec("superuser", "superuser", "harbor", 0.30),
    SourceSpec("tezos", "tezos", "harbor", 0.15),
    SourceSpec("nl2bash", "superuser", "traces", 0.10),
)


def _validate(
    out: Path, trials: int, tasks: int, sources: Sequence[SourceSpec], near_duplicates: float, n_benchmark: int
) -> None:
    if not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials must be an integer >= 1, got {trials!r}")
    if not isinstance(tasks, int) or tasks < 1:
        raise ValueError(f"tasks must be an integer >= 1, got {tasks!r}")
    if (
        isinstance(near_duplicates, bool)
        or not isinstance(near_duplicates, (int, float))
        or not 0 <= near_duplicates <= 1
    ):
        raise ValueError(f"near_duplicates must be a rate in [0, 1], got {near_duplicates!r}")
    if isinstance(n_benchmark, bool) or not isinstance(n_benchmark, int) or not 0 <= n_benchmark <= 1000:
        raise ValueError(f"benchmark_tasks must be an integer in 0..1000, got {n_benchmark!r}")
    if not sources:
        raise ValueError("sources must not be empty")
    names = [s.name for s in sources]
    for s in sources:
        if names.count(s.name) > 1:
            raise ValueError(f"duplicate source name {s.name!r}")
        if not s.name or "/" in s.name or s.name.startswith("."):
            raise ValueError(f"invalid source name {s.name!r}")
        if s.name == BENCHMARK_DIR and n_benchmark:
            raise ValueError(
                f"source name {s.name!r} is taken by the benchmark; rename the source or pass benchmark_tasks=0"
            )
        if s.style not in STYLES:
            raise ValueError(f"unknown style {s.style!r} for source {s.name!r}; use {STYLES}")
        if s.format not in FORMATS:
            raise ValueError(f"unknown format {s.format!r} for source {s.name!r}; use {FORMATS}")
        if not s.share > 0:
            raise ValueError(f"share must be > 0 for source {s.name!r}, got {s.share!r}")
    total = math.fsum(s.share for s in sources)
    if abs(total - 1.0) > 1e-9:
        raise ValueError(f"source shares must sum to 1, got {total!r}")
    if out.exists() and not out.is_dir():
        raise BadInput(f"{out} is not a directory: synth writes a new corpus; pass a new directory")
    if out.exists() and any(out.iterdir()):
        raise BadInput(f"{out} is not empty: synth writes a new corpus; pass a new directory or remove it first")


def _allocate(trials: int, tasks: int, sources: Sequence[SourceSpec]) -> list[tuple[int, int]]:
    """Per source (trials, tasks); with trials >= tasks every source has trials >= tasks."""
    n_tasks = apportion(tasks, [s.share for s in sources])
    shares = [s.share if t else 0.0 for s, t in zip(sources, n_tasks, strict=True)]
    if trials >= tasks:
        n_trials = [t + x for t, x in zip(n_tasks, apportion(trials - tasks, shares), strict=True)]
    else:
        n_trials = apportion(trials, shares)
    return list(zip(n_trials, n_tasks, strict=True))


def _rollouts(seed: int, spec: SourceSpec, n_trials: int, n_tasks: int) -> list[int]:
    """Uneven trials per task (lognormal weights); >= 1 each when n_trials >= n_tasks."""
    rng = seeded(seed, spec.name, "rollouts")
    weights = [rng.lognormvariate(0, 1.1) for _ in range(n_tasks)]
    if n_trials >= n_tasks:
        return [1 + x for x in apportion(n_trials - n_tasks, weights)]
    return apportion(n_trials, weights)


def _run_source(
    out: Path,
    seed: int,
    spec: SourceSpec,
    n_trials: int,
    n_tasks: int,
    faults: list[dict[str, Any]],
    planter: SourcePlanter,
    progress: Callable[[int], None] | None,
) -> dict[str, int]:
    """Write one source's tasks and trials, task by task; returns its curation-material counts.
    `planter` turns some tasks into planted copies before anything of them is written."""
    writer_class = HarborWriter if spec.format == "harbor" else TraceWriter
    writer = writer_class(out, seed, spec, n_trials, faults)
    i = 0
    try:
        for k, count in enumerate(_rollouts(seed, spec, n_trials, n_tasks)):
            task = planter.plant(k, make_task(seed, spec, k))
            write_task(out / spec.name / "tasks", task)
            for _ in range(count):
                writer.write(i, task)
                i += 1
                if progress:
                    progress(1)
    finally:
        writer.close()
    return writer.extras


def _write_benchmark(out: Path, seed: int, n: int) -> list[Task]:
    """Write out/benchmark/<task>/instruction.md; returns the tasks sources may copy."""
    tasks = make_benchmark(seed, n)
    for task in tasks:
        write(out / BENCHMARK_DIR / task.name / "instruction.md", task.instruction + "\n")
    return copyable(seed, tasks)


def synthesize(
    out: Path,
    *,
    seed: int = 0,
    trials: int = 2000,
    tasks: int = 300,
    sources: Sequence[SourceSpec] = DEFAULT_SOURCES,
    progress: Callable[[int], None] | None = None,
    near_duplicates: float = NEAR_DUPLICATE_RATE,
    benchmark_tasks: int = BENCHMARK_TASKS,
) -> SynthSummary:
    """Write the synthetic corpus under `out` (must be absent or empty); see the module doc.

    `near_duplicates` is the chance that a task is planted as a copy of an earlier task of its
    source, `benchmark_tasks` the size of the benchmark (0: none, and no benchmark copies).
    Raises ValueError for bad parameters and BadInput when `out` is a file or a non-empty
    directory (synth never writes into an existing corpus); nothing is written then.
    """
    out = Path(out)
    _validate(out, trials, tasks, sources, near_duplicates, benchmark_tasks)
    out.mkdir(parents=True, exist_ok=True)
    benchmark = _write_benchmark(out, seed, benchmark_tasks)
    planted = Planted()
    faults: list[dict[str, Any]] = []
    summary = SynthSummary({}, {}, {})
    for spec, (n_trials, n_tasks) in zip(sources, _allocate(trials, tasks, sources), strict=True):
        planter = SourcePlanter(seed, spec, near_duplicates, benchmark, planted)
        summary.extras[spec.name] = _run_source(out, seed, spec, n_trials, n_tasks, faults, planter, progress)
        counts: dict[str, int] = {}
        for f in faults:
            if f["source"] == spec.name:
                counts[f["fault"]] = counts.get(f["fault"], 0) + 1
        summary.trials[spec.name], summary.tasks[spec.name] = n_trials, n_tasks
        summary.faults[spec.name] = dict(sorted(counts.items()))
    summary.planted = planted.counts()
    faults.sort(key=lambda f: (f["path"], f["line"] or 0))
    manifest = {
        "generator": "tracelake.synth",
        "schema": 1,
        "params": {
            "seed": seed,
            "trials": trials,
            "tasks": tasks,
            "sources": [asdict(s) for s in sources],
            "near_duplicates": near_duplicates,
            "benchmark_tasks": benchmark_tasks,
        },
        "counts": {
            name: {
                "trials": summary.trials[name],
                "tasks": summary.tasks[name],
                "faults": summary.faults[name],
                "extras": summary.extras[name],
            }
            for name in summary.trials
        },
        "faults": faults,
        "planted": planted.manifest(),
    }
    write(out / "synth_manifest.json", dumps(manifest))
    return summary
