"""Stage `ingest@<source>`: one configured source -> <lake>/trajectories/<source> and
<lake>/tasks/<source>, counts to metrics/ingest/<source>.json. A source whose `tasks:` is its `path`
(a trace table published without task directories) gets tasks derived from its traces. DVC tracks
the source through its manifest (`scan`); the files read must still match it at the end."""

from __future__ import annotations

from pathlib import Path

from tracelake.core.lake import Lake
from tracelake.core.stage import Context, Manifest, Result, Stage, Streamed
from tracelake.ingest.common import IngestResult
from tracelake.ingest.derived_tasks import DERIVE_RULE, derive_tasks
from tracelake.ingest.harbor import ingest_harbor
from tracelake.ingest.sources import MANIFESTS, check_unchanged
from tracelake.ingest.tasks import ingest_tasks
from tracelake.ingest.traces import ingest_traces


def run(ctx: Context) -> Result:
    p, source = ctx.params, ctx.key
    src, lake, strict, executor = p.sources[source], Lake(p.lake), p.ingest.strict, ctx.executor
    out, tasks_out = lake.table("trajectories", source), lake.table("tasks", source)
    done: dict[str, IngestResult] = {}  # each table's ingest, once publish has written it

    def trajectories(tmp: Path) -> Manifest | None:
        if src.format == "harbor":
            r = ingest_harbor(Path(src.path), source=source, out_dir=out, strict=strict, executor=executor, into=tmp)
        else:
            r = ingest_traces(
                [Path(src.path)],
                source=source,
                out_dir=out,
                strict=strict,
                executor=executor,
                cache=Path(p.ingest.cache),
                into=tmp,
            )
        done["trajectories"] = r
        return r.written

    def tasks(tmp: Path) -> Manifest | None:
        if src.derives_tasks:  # from the trajectories just published
            r = derive_tasks(lake, source=source, out_dir=tasks_out, strict=strict, into=tmp)
        else:
            r = ingest_tasks(
                Path(src.tasks),
                source=source,
                out_dir=tasks_out,
                strict=strict,
                executor=executor,
                archive=p.ingest.archive,
                into=tmp,
            )
        done["tasks"] = r
        check_unchanged(source, src, Path(p.ingest.cache))  # what was read is the version DVC records
        return r.written

    def summary(manifests: list[dict]) -> list[str]:
        lines = []
        for name, manifest in zip(("trajectories", "tasks"), manifests):
            r = done[name]
            cached = (
                f"; {r.files_from_cache} input files unchanged, read from the ingest cache"
                if r.files_from_cache
                else ""
            )
            derived = f" derived from the traces ({DERIVE_RULE})" if name == "tasks" and src.derives_tasks else ""
            lines.append(
                f"ingest {source} {name}{derived}: {r.rows} rows, {r.rejects} rejects of {r.inputs} inputs "
                f"(version {manifest['version_id']}){cached}"
            )
        return lines

    return Result(
        [Streamed(out, trajectories), Streamed(tasks_out, tasks)],
        metrics=lambda _: {"trajectories": done["trajectories"].metrics(), "tasks": done["tasks"].metrics()},
        summary=summary,
    )


STAGE = Stage(
    "ingest",
    __doc__,
    run,
    foreach="sources",
    params=("sources.${key}", "ingest", "lake"),
    untracked=("executor",),
    deps=(f"{MANIFESTS}/${{key}}.json",),  # the source's inputs, as `scan` lists them (ingest/sources.py)
    outs=("${lake}/trajectories/${key}", "${lake}/tasks/${key}"),
    metrics="metrics/ingest/${key}.json",
    headline=lambda m: {
        "in": m["trajectories"]["inputs"],
        "out": m["trajectories"]["rows"],
        "dropped": m["trajectories"]["rejects"],
        "tasks": m["tasks"]["rows"],
    },
)
