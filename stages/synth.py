"""Stage `synth`: the embedded sample corpus (params `synth`) -> synth.out: Harbor job directories,
trace tables and task directories of several sources, deterministic for a seed."""

from __future__ import annotations

import shutil
from pathlib import Path

from tracelake.core.stage import Context, Result, Stage
from tracelake.sample.synth import synthesize


def run(ctx: Context) -> Result:
    p = ctx.params.synth
    out = Path(p.out)
    shutil.rmtree(out, ignore_errors=True)  # a stage output is rebuilt from scratch
    summary = synthesize(out, seed=p.seed, trials=p.trials, tasks=p.tasks)
    return Result(
        summary=[f"synth: {sum(summary.trials.values())} trials, {sum(summary.tasks.values())} tasks -> {out}"]
    )


STAGE = Stage("synth", __doc__, run, params=("synth",), outs=("${synth.out}",))
