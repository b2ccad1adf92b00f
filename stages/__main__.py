"""Run one stage of the pipeline, as dvc.yaml's commands do:

    python -m stages NAME [KEY] [--params FILE] [--executor local|processes|ray]

NAME is a stage of stages/ (KEY: the source or scale of a `foreach` stage). The stage's params
sections are loaded and checked whole, its `run` is called on the executor (params `executor`,
TRACELAKE_EXECUTOR, or --executor: the same bytes whichever), and its result published
(tracelake.core.stage.publish): output directories, manifests, metrics, summary lines.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stages import NAMES, declared
from tracelake.core.errors import BadParams
from tracelake.core.executor import KINDS, Executor
from tracelake.core.stage import Context, Stage, publish, record_run, run_stage
from tracelake.core.swap import sweep
from tracelake.params import load_params

_ITEM = {"sources": "source", "scales": "scale"}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in NAMES:
        names = ", ".join(NAMES)
        raise BadParams(f"usage: python -m stages NAME [KEY] [--params FILE] (NAME: one of {names})")
    stage: Stage = declared(argv[0])
    parser = argparse.ArgumentParser(
        prog=f"python -m stages {stage.name}",
        description=stage.doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if stage.foreach:
        parser.add_argument(_ITEM[stage.foreach])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument(
        "--executor", choices=KINDS, help="where the heavy work runs, for this run (params: executor.kind)"
    )
    args = parser.parse_args(argv[1:])
    params = load_params(args.params, stage.params + stage.untracked)
    key = getattr(args, _ITEM[stage.foreach]) if stage.foreach else None
    if stage.foreach and key not in getattr(params, stage.foreach):
        raise BadParams(f"params.yaml: no {_ITEM[stage.foreach]} {key!r} under {stage.foreach}")
    if "lake" in type(params).model_fields:
        sweep(Path(params.lake))  # what killed builds left, wherever they were (docs/reliability.md)
    executor = Executor.open(getattr(params, "executor", None), args.executor, stage.uses_every_core)
    try:
        publish(stage, stage.run(Context(params, key, executor)), key)
    finally:
        executor.close()
    if executor.shards:
        print(f"{stage.name}{'@' + key if key else ''}: {executor.shards:,} shards on {executor.describe()}")
    record_run(stage.name, key, executor)


if __name__ == "__main__":
    run_stage(main)
