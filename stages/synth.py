"""DVC stage `synth`: write the embedded sample corpus (params: synth.*) to synth.out.

    python stages/synth.py [--params params.yaml]
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tracelake.core.stage import run_stage
from tracelake.params import stage_args
from tracelake.sample.synth import synthesize


def main(argv: list[str] | None = None) -> None:
    p = stage_args(__doc__, argv)[0].synth
    out = Path(p.out)
    shutil.rmtree(out, ignore_errors=True)  # a stage output is rebuilt from scratch
    summary = synthesize(out, seed=p.seed, trials=p.trials, tasks=p.tasks)
    print(f"synth: {sum(summary.trials.values())} trials, {sum(summary.tasks.values())} tasks -> {out}")


if __name__ == "__main__":
    run_stage(main)
