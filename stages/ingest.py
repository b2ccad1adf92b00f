"""DVC stage `ingest@<source>`: one configured source -> <lake>/trajectories/<source> and
<lake>/tasks/<source>, counts to metrics/ingest/<source>.json. A source whose `tasks:` is its own
`path` (a trace table published without task directories) gets tasks derived from its traces.

    python stages/ingest.py SOURCE [--params params.yaml]
"""

from __future__ import annotations

from pathlib import Path

from tracelake.core.errors import BadParams
from tracelake.core.layout import Lake
from tracelake.core.stage import run_stage, write_metrics
from tracelake.ingest.derived_tasks import DERIVE_RULE, derive_tasks
from tracelake.ingest.harbor import ingest_harbor
from tracelake.ingest.tasks import ingest_tasks
from tracelake.ingest.traces import ingest_traces
from tracelake.params import stage_args


def main(argv: list[str] | None = None) -> None:
    params, source = stage_args(__doc__, argv, "source")
    if source not in params.sources:
        raise BadParams(f"params.yaml: no source {source!r} under sources")
    src, lake, strict = params.sources[source], Lake(params.lake), params.ingest.strict

    out = lake.table("trajectories", source)
    if src.format == "harbor":
        traj = ingest_harbor(Path(src.path), source=source, out_dir=out, strict=strict,
                             workers=params.ingest.workers)
    else:
        traj = ingest_traces([Path(src.path)], source=source, out_dir=out, strict=strict,
                             workers=params.ingest.workers, cache=Path(params.ingest.cache))
    if src.derives_tasks:
        tasks = derive_tasks(lake, source=source, out_dir=lake.table("tasks", source), strict=strict)
    else:
        tasks = ingest_tasks(Path(src.tasks), source=source, out_dir=lake.table("tasks", source), strict=strict,
                             workers=params.ingest.workers, archive=params.ingest.archive)

    write_metrics(f"metrics/ingest/{source}.json", {"trajectories": traj.metrics(), "tasks": tasks.metrics()})
    for name, r in (("trajectories", traj), ("tasks", tasks)):
        cached = f"; {r.files_from_cache} input files unchanged, read from the ingest cache" if r.files_from_cache else ""
        derived = f" derived from the traces ({DERIVE_RULE})" if name == "tasks" and src.derives_tasks else ""
        print(f"ingest {source} {name}{derived}: {r.rows} rows, {r.rejects} rejects of {r.inputs} inputs "
              f"(version {r.manifest['version_id']}){cached}")


if __name__ == "__main__":
    run_stage(main)
