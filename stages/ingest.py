"""DVC stage `ingest@<source>`: one configured source -> <lake>/trajectories/<source> and
<lake>/tasks/<source>, counts to metrics/ingest/<source>.json.

    python stages/ingest.py SOURCE [--params params.yaml]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tracelake.config import load_params
from tracelake.errors import BadParams
from tracelake.ingest.harbor import ingest_harbor
from tracelake.ingest.tasks import ingest_tasks
from tracelake.ingest.traces import ingest_traces
from tracelake.lake import table_dir, write_json
from tracelake.stage import run_stage


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source")
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args(argv)
    params = load_params(args.params)
    if args.source not in params.sources:
        raise BadParams(f"params.yaml: no source {args.source!r} under sources")
    src, lake, strict = params.sources[args.source], Path(params.lake), params.ingest.strict

    out = table_dir(lake, "trajectories", args.source)
    if src.format == "harbor":
        traj = ingest_harbor(Path(src.path), source=args.source, out_dir=out, strict=strict)
    else:
        traj = ingest_traces([Path(src.path)], source=args.source, out_dir=out, strict=strict)
    tasks = ingest_tasks(Path(src.tasks), source=args.source, out_dir=table_dir(lake, "tasks", args.source),
                         strict=strict)

    metrics = Path("metrics/ingest") / f"{args.source}.json"
    metrics.parent.mkdir(parents=True, exist_ok=True)
    write_json(metrics, {"trajectories": traj.metrics(), "tasks": tasks.metrics()})
    for name, r in (("trajectories", traj), ("tasks", tasks)):
        print(f"ingest {args.source} {name}: {r.rows} rows, {r.rejects} rejects of {r.inputs} inputs "
              f"(version {r.manifest['version_id']})")


if __name__ == "__main__":
    run_stage(main)
