"""What the stages DVC runs at every `dvc repro` (those declaring `always_run`: synth, scan) would
change if they ran now, as JSON on stdout, {stage: [kinds of change]}; no output is written.

    python -m stages.pending [STAGE ...] [--params FILE]     (default: every such stage)

DVC's status calls such a stage "always changed", which says nothing: core/freshness.py asks this
instead (`tracelake status`, `train --dry-run`). It costs what a no-change run of those stages
costs: a stat of every input file, no file read unless it changed.
"""

from __future__ import annotations

import argparse
import sys

import orjson

from stages import NAMES, declared
from tracelake.core.errors import BadParams
from tracelake.core.stage import Context, run_stage
from tracelake.params import load_params


def pending(names: list[str] | None = None, params_file: str = "params.yaml") -> dict[str, list[str]]:
    """What the named stages (default: every one declaring `always_run`) would change now."""
    out: dict[str, list[str]] = {}
    for name in names or [n for n in NAMES if declared(n).always_run]:
        stage = declared(name) if name in NAMES else None
        if stage is None or stage.always_run is None:
            raise BadParams(f"stage {name} is not one DVC runs every time (no always_run)")
        params = load_params(params_file, stage.params + stage.untracked)
        for changed, kinds in stage.always_run(Context(params)).items():
            out[changed] = sorted({*out.get(changed, []), *kinds})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stages.pending", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("stages", nargs="*", metavar="STAGE", help="synth, scan (default: both)")
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args(argv)
    sys.stdout.buffer.write(orjson.dumps(pending(args.stages, args.params), option=orjson.OPT_SORT_KEYS) + b"\n")
    return 0


if __name__ == "__main__":
    run_stage(lambda: sys.exit(main()))
