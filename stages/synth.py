"""Stage `synth`: the embedded sample corpus (params `synth`) -> synth.out: Harbor job directories,
trace tables and task directories of several sources, deterministic for a seed. DVC runs it at every
`dvc repro` and never copies the sample into its cache: its output is .tracelake/synth.json, the
params and code it was made with and the sha256 of its files' manifest (core/scan.py). When synth.out
is still what those make, nothing is written; else (a params or code change, a file edited or
deleted) the sample is made again."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import orjson

from tracelake.core.outputs import write_bytes
from tracelake.core.scan import Scan
from tracelake.core.stage import Context, Result, Stage
from tracelake.sample.synth import synthesize

RECORD = Path(".tracelake/synth.json")
CODE = Path(".tracelake/code/synth.txt")  # this stage's code digest (stages/code.py), its first dep


def _record(ctx: Context) -> bytes:
    """The record synth.out would have now."""
    p = ctx.params.synth
    made = {
        "seed": p.seed,
        "trials": p.trials,
        "tasks": p.tasks,
        "out": p.out,
        "code": hashlib.sha256(CODE.read_bytes()).hexdigest() if CODE.is_file() else None,
    }
    scan = Scan(Path(ctx.params.ingest.cache) / "scan" / "synth.json")
    files = hashlib.sha256(scan.manifest([p.out])).hexdigest()
    scan.save()
    return orjson.dumps({"made": made, "files": files}, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"


def run(ctx: Context) -> Result:
    p = ctx.params.synth
    if RECORD.is_file() and RECORD.read_bytes() == _record(ctx):
        return Result(summary=[f"synth: {p.out} is what these params make; not written again"])
    out = Path(p.out)
    shutil.rmtree(out, ignore_errors=True)  # made again from scratch
    summary = synthesize(out, seed=p.seed, trials=p.trials, tasks=p.tasks)
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(RECORD, _record(ctx))
    return Result(
        summary=[f"synth: {sum(summary.trials.values())} trials, {sum(summary.tasks.values())} tasks -> {out}"]
    )


def pending(ctx: Context) -> dict[str, list[str]]:
    """{"synth": [...]} when synth.out is not what the params and code make (nothing written)."""
    return {} if RECORD.is_file() and RECORD.read_bytes() == _record(ctx) else {"synth": ["changed sample"]}


STAGE = Stage(
    "synth",
    __doc__,
    run,
    params=("synth",),
    untracked=("ingest.cache",),
    outs_uncached=(str(RECORD),),
    always_run=pending,
)
