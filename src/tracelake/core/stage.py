"""The stage contract. A DVC stage is declared once, as a `Stage` in stages/<name>.py: its name, the
params it reads, the data it reads and the outputs it writes, and a `run` that returns a `Result`.
dvc.yaml is generated from the declarations (`python -m stages.dvc_yaml`), and every stage runs
through one entry point (`python -m stages NAME [KEY]`), which loads the declared params sections
(checked whole: an unknown key stops the stage), calls `run`, then `publish`es the result.

`publish` is the one place that writes a stage's output directories (atomically: core/swap.py),
their tables (through the declared schemas), their manifests (last), the stage's counts file and
its headline (the DVC metrics file), and its summary lines. A stage's own code never opens an output
directory, and neither does a library function: an output is either an `Output` (its tables' rows,
which publish writes) or a `Streamed` one, whose `write(tmp)` fills the temporary directory publish
opened (a library function that writes large tables while it reads: ingest, the exports; or plain
files: the tokenizer, the training configs) and returns the `Manifest` publish then writes (None: a
directory without one). `write_output` is publish's writing of one output; a library function run
on its own (`tracelake ingest`, a test) writes its directory through it too.

    @dataclass  Stage(name, doc, run, params=("filter", ...), deps=("${lake}/trajectories", ...),
                      outs=("${lake}/pool",), metrics="metrics/filter.json",
                      headline=lambda counts: {"in": ..., "out": ..., "dropped": ...}, foreach=None)
    run(ctx: Context) -> Result(outputs=[Output(...) | Streamed(path, write)], metrics=..., summary=...)
"""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Union

from tracelake.core.errors import Bug, TracelakeError

Rows = Union[Any, Iterable[Any]]  # a pyarrow Table, or an iterable of RecordBatches or of row dicts


@dataclass(frozen=True)
class Context:
    """What a stage's run gets: its params (the declared sections only), its foreach key, and the
    executor its heavy work is mapped on (core/executor.py: the same bytes whichever it is)."""

    params: Any
    key: str | None = None
    executor: Any = None  # an Executor; None: this process


@dataclass
class Table:
    """One table of an output directory: its schema (`load_schema("pool")`: the call names the
    schema file, so the stage's dvc.yaml deps list it) and its rows, in the table's key order (the
    rows are written as given)."""

    schema: Any
    rows: Rows


@dataclass
class Recorded:
    """What a manifest records of an output beside its path: its kind, its tables, the versions of
    its inputs, its params, the formulas it applied and its counts."""

    kind: str
    tables: list[Any]
    inputs: dict[str, Any]
    params: dict[str, Any]
    formulas: dict[str, str]
    counts: dict[str, Any]


@dataclass
class Output(Recorded):
    """One output directory a stage publishes: its `tables` (`Table`s: schemas and rows, which publish
    writes) and what its manifest records."""

    path: Path = field(kw_only=True)
    # (kind, rows): name the output by its content, <kind>-<rows>-<version of its first table>; the
    # name goes into the manifest and, as `dataset_id`, into its counts
    dataset: tuple[str, int] | None = field(default=None, kw_only=True)


@dataclass
class Manifest(Recorded):
    """What the manifest of a `Streamed` output records, as its write found it (publish writes it, last):
    `tables` as their writers closed them (core/tables.py TableInfo), `dataset_id` its content-addressed
    name where it is a dataset."""

    dataset_id: str | None = None


@dataclass
class Streamed:
    """One output directory whose files a library function writes: tables too large to hold, written
    while it reads (ingest, the exports), or plain files (the tokenizer, the training configs).
    publish opens the directory, calls `write(tmp)` to fill its temporary version, writes the
    `Manifest` it returns (None: a directory without a manifest) and swaps it in. What else the write
    learns (counts, lines) the stage keeps from the call, its `metrics` and `summary` then callables."""

    path: Path
    write: Callable[[Path], Manifest | None]


Lines = Union[list[str], Callable[[list[dict]], list[str]]]


@dataclass
class Result:
    """What a run returns. `metrics` (the stage's metrics file) and `summary` (lines printed after the
    run) may be callables of the published manifests, in the order of `outputs` (None for a directory
    without one)."""

    outputs: list[Output | Streamed] = field(default_factory=list)
    metrics: Any = None
    summary: Lines = field(default_factory=list)


@dataclass(frozen=True)
class Stage:
    """One DVC stage, declared once. Paths may use DVC's `${...}` (params values, and `${key}` in a
    `foreach` stage); dvc.yaml carries them as written.

    params: each entry a whole top-level section (`filter`, tracked whole by DVC, so any edit in it
        reruns the stage and its check sees an unknown key), or one key of another stage's section
        (`train.sft.template`, tracked key by key); the run gets every named section, checked whole.
    untracked: params the run reads that DVC does not track: cache locations (`tokenizer.cache`;
        a content-addressed cache changes no output byte), or the whole file for `check`, which
        tracks params.yaml as a file.
    deps: the data the stage reads; its code, SQL and schemas are found from its imports.
    metrics: the stage's counts (`Result.metrics`): plain JSON kept in git, which tests, the docs and
        `jq` read; an uncached output, not a DVC metrics file (see `headline`).
    headline: counts -> the few HEADLINE keys that are the stage's DVC metrics file, at
        headline_path(metrics). `dvc metrics show` prints the union of every metrics file's keys as
        its columns: the detailed counts of all stages made it ~6,000 columns wide; shared keys keep
        it one narrow table, and `dvc metrics diff` still shows what a change moved.
    always_run: DVC runs the stage at every `dvc repro` (`always_changed`): it is how inputs DVC does
        not walk are seen (`scan`: each source's files; `synth`: the sample on disk). Its outputs are
        kept between runs (`persist`): the stage rewrites only what changed, so nothing downstream
        reruns when nothing did. The callable says, writing nothing, what running it now would
        change ({stage: kinds of change}); freshness (core/freshness.py) asks it in place of DVC's
        "always changed".
    uses_every_core: the stage's heavy work already keeps every core of one machine busy (token
        counting: the encoder's own threads), so executor.kind `processes` from params.yaml runs it
        in the stage's own process: worker processes would only add the copying of conversations
        (measured: benchmarks/bench_executors.py, BENCHMARKS.md). `ray` still spreads it across
        machines, and --executor or TRACELAKE_EXECUTOR still chooses for one run.
    """

    name: str
    doc: str
    run: Callable[[Context], Result]
    params: tuple[str, ...]
    untracked: tuple[str, ...] = ()
    deps: tuple[str, ...] = ()
    outs: tuple[str, ...] = ()
    metrics: str | None = None
    headline: Callable[[Any], dict[str, Any]] | None = None
    foreach: Literal["sources", "scales"] | None = None
    outs_uncached: tuple[str, ...] = ()  # outputs kept in git, not in DVC's cache
    plots: str | None = None  # a directory of DVC plot files (uncached)
    uses_every_core: bool = False
    always_run: Callable[[Context], dict[str, list[str]]] | None = None


# The keys of every DVC metrics file, in the stage's own unit (trajectories: ingest, filter, select,
# export_sft; tasks: dedup, export_rl; score rows: score): in (read), out (written or kept), dropped
# (left out, with the reasons in the counts file), tasks (the tasks the output covers), dataset (the
# content id of the dataset written). A stage fills those that apply.
HEADLINE = ("in", "out", "dropped", "tasks", "dataset")


def headline_path(metrics: str) -> str:
    """Where the DVC metrics file of a stage whose counts are at `metrics` lives:
    metrics/select/${key}.json -> metrics/headline/select/${key}.json."""
    parts = Path(metrics).parts
    return Path(parts[0], "headline", *parts[1:]).as_posix()


def headline_of(stage: Stage, metrics: Any) -> dict[str, Any]:
    """The stage's headline of its counts, checked: HEADLINE keys only, ints (a dataset id a string)."""
    head = stage.headline(metrics)
    wrong = {k: v for k, v in head.items() if k not in HEADLINE or not isinstance(v, str if k == "dataset" else int)}
    if wrong:
        raise Bug(f"stage {stage.name}: headline keys must be {', '.join(HEADLINE)} (ints; dataset a string): {wrong}")
    return head


def publish(stage: Stage, result: Result, key: str | None = None) -> list[dict | None]:
    """Write the result: each output directory whole (`write_output`), the counts file and its
    headline (the DVC metrics file), the summary lines. Returns the manifests written."""
    from tracelake.core.outputs import write_json

    manifests = [write_output(out) for out in result.outputs]
    if stage.metrics:
        metrics = result.metrics(manifests) if callable(result.metrics) else result.metrics
        path = Path(stage.metrics.replace("${key}", key or ""))
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, metrics)
        if stage.headline:
            head = Path(headline_path(stage.metrics).replace("${key}", key or ""))
            head.parent.mkdir(parents=True, exist_ok=True)
            write_json(head, headline_of(stage, metrics))
    for line in result.summary(manifests) if callable(result.summary) else result.summary:
        print(line)
    return manifests


def write_output(out: Output | Streamed) -> dict | None:
    """One output directory, whole: a fresh temporary directory (core/outputs.py output_dir), its
    tables (an `Output`'s rows through their schemas, or what a `Streamed` output's write puts
    there), then its manifest, then the swap into place; on any failure the previous version stays.
    Returns the manifest written (None: a streamed directory without one)."""
    from tracelake.core.outputs import output_dir, write_manifest

    with output_dir(out.path) as tmp:
        found = out.write(tmp) if isinstance(out, Streamed) else _write_tables(tmp, out)
        if found is None:
            return None
        return write_manifest(tmp, **vars(found))  # a Manifest's fields are write_manifest's arguments


def _write_tables(tmp: Path, out: Output) -> Manifest:
    from tracelake.core.datasets import dataset_id
    from tracelake.core.tables import TableWriter

    infos = []
    for table in out.tables:
        writer = TableWriter(tmp, table.schema)
        _write_rows(writer, table.rows)
        infos.append(writer.close())
    name, counts = None, out.counts
    if out.dataset:
        name = dataset_id(out.dataset[0], out.dataset[1], infos[0].version_id)
        counts = {"dataset_id": name, **counts}
    return Manifest(out.kind, infos, out.inputs, out.params, out.formulas, counts, dataset_id=name)


RUNS = Path(".tracelake/runs")  # one record per stage run: where it ran (never an output)


def record_run(name: str, key: str | None, executor: Any) -> None:
    """Keep what ran where for `tracelake status` (.tracelake/runs/<stage>[@key].json). Not an
    output: the executor changes no byte, so this is no part of what DVC tracks."""
    from tracelake.core.outputs import write_json

    RUNS.mkdir(parents=True, exist_ok=True)
    write_json(RUNS / f"{name}@{key}.json" if key else RUNS / f"{name}.json", executor.record())


def _write_rows(writer: Any, rows: Rows) -> None:
    import pyarrow as pa

    if isinstance(rows, pa.Table):
        writer.write_batch(rows)
        return
    for item in rows:
        if isinstance(item, (pa.RecordBatch, pa.Table)):
            writer.write_batch(item)
        else:
            writer.write(item)


def run_stage(main: Callable[[], None]) -> None:
    """Run a stage (or a command): user errors as one line (exit 2); Ctrl-C names the outputs left
    unwritten (exit 130); a Bug keeps its traceback (exit 70)."""
    try:
        main()
    except TracelakeError as e:
        print(f"tracelake: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print(f"tracelake: {interrupted_message()}", file=sys.stderr)
        _leave_ray(130)
        sys.exit(130)
    except Bug:
        traceback.print_exc()
        print(
            "tracelake: this is a bug in tracelake (an internal check failed); please report it with "
            "the traceback above",
            file=sys.stderr,
        )
        sys.exit(Bug.exit_code)


def _leave_ray(code: int) -> None:
    """Where this process is still joined to a Ray cluster (one it did not start: a Ray of its own
    is shut down as the run ends), exit now with `code`: Ray's threads, torn down by the
    interpreter's exit while tasks are in flight, can crash the process (exit 139) after the
    message. The cluster notices the driver gone and drops its tasks."""
    ray = sys.modules.get("ray")
    if ray is None or not getattr(ray, "is_initialized", lambda: False)():
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def interrupted_message() -> str:
    """What an interrupted run left: every output it had started is unwritten (the previous version,
    if any, is untouched)."""
    from tracelake.core.outputs import unfinished_outputs

    left = unfinished_outputs()
    if not left:
        return "interrupted before any output was started; nothing was written"
    return f"interrupted; not written (the previous version, if any, is unchanged): {', '.join(str(p) for p in left)}"
