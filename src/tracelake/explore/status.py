"""`tracelake status` and `tracelake schema`: one screen on what is built and what it means.

Status first checks DVC's own state files: a `dvc repro` killed while DVC rewrites `dvc.lock` or
`.dvc/tmp/rwlock` can leave them empty, and the next `dvc repro` then fails with a YAML or JSON
error that does not say what to do. `dvc_problems` names the file and the fix in one line each.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import duckdb
from rich.console import Console
from rich.table import Table

from tracelake.core.assets import sql
from tracelake.core.datasets import KINDS, building_stage
from tracelake.core.errors import BadInput
from tracelake.core.freshness import Freshness, pipeline_freshness
from tracelake.core.lake import Lake, is_built, table_paths
from tracelake.core.outputs import read_manifest
from tracelake.core.schema import TABLES, load_schema
from tracelake.core.stage import RUNS
from tracelake.core.swap import sweep
from tracelake.core.ui import literal, literals
from tracelake.curate import filter_rules
from tracelake.tokens.model_tokenizer import describe_tokenizer
from tracelake.tokens.tokenizer import tokenizer_fingerprint

# DVC's state files that a killed `dvc repro` can leave empty: path, what reads it, the fix.
_DVC_STATE = (
    (
        "dvc.lock",
        "yaml",
        "restore it with `git checkout dvc.lock` (or delete it: every stage runs again), then run `dvc repro`",
    ),
    (".dvc/tmp/rwlock", "json", "when no dvc process is running, delete it and run `dvc repro` again"),
)


def _readable(data: bytes, kind: str) -> bool:
    import yaml

    try:
        return isinstance(yaml.safe_load(data) if kind == "yaml" else json.loads(data), dict)
    except (yaml.YAMLError, ValueError):
        return False


def dvc_problems(project: Path) -> list[str]:
    """One line per damaged DVC state file of the project at `project` (empty or unreadable
    `dvc.lock`, `.dvc/tmp/rwlock`), each saying what to do; nothing where all is well."""
    problems = []
    for name, kind, fix in _DVC_STATE:
        path = Path(project) / name
        if path.is_file() and not _readable(path.read_bytes(), kind):
            problems.append(
                f"{os.path.relpath(path)} is empty or unreadable (a `dvc repro` was killed while writing it): {fix}"
            )
    return problems


def project_of(lake: Path) -> Path | None:
    """The DVC project that holds `lake`: the nearest directory at or above the lake's parent with
    a dvc.yaml, else None."""
    for directory in [Path(lake).resolve().parent, *Path(lake).resolve().parent.parents]:
        if (directory / "dvc.yaml").is_file():
            return directory
    return None


def render_status(lake: Path, console: Console, fresh: bool = True) -> None:
    """Everything built under `lake`; with `fresh`, DVC's status says which datasets are stale."""
    project = project_of(lake)
    sweep(lake)  # what killed builds left (DVC's run cache may restore a stage without running it)
    for line in dvc_problems(project) if project else []:
        console.print(f"warning: {line}", style="bold yellow", markup=False, soft_wrap=True)
    outputs = Lake(lake).ingested()
    if not outputs:
        raise BadInput(f"nothing is built under {lake}/ yet: run `dvc repro` (or `tracelake ingest ...`)")
    table = Table(title=literal(f"lake: {lake}"), title_justify="left")
    for col, justify in [
        ("table", "left"),
        ("source", "left"),
        ("version", "left"),
        ("inputs", "right"),
        ("rows", "right"),
        ("rejects", "right"),
    ]:
        table.add_column(col, justify=justify)
    totals: dict[str, list[int]] = {}
    reasons: dict[str, int] = {}
    for name, source, directory in outputs:
        manifest = read_manifest(directory)
        counts = manifest["counts"]
        table.add_row(
            *literals((name, source, manifest["version_id"])),
            f"{counts['inputs']:,}",
            f"{counts['rows']:,}",
            f"{counts['rejects']:,}",
        )
        t = totals.setdefault(name, [0, 0])
        t[0] += counts["rows"]
        t[1] += counts["rejects"]
        for reason, n in counts.get("rejects_by_reason", {}).items():
            reasons[reason] = reasons.get(reason, 0) + n
    console.print(table)
    console.print(
        literal(
            "  ".join(f"{name}: {rows:,} rows, {rejects:,} rejects" for name, (rows, rejects) in sorted(totals.items()))
        )
    )
    if reasons:
        console.print(
            literal(
                "rejects by reason: "
                + ", ".join(f"{k} {v}" for k, v in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
            )
        )
    files = [str(p) for name, _, d in outputs if name == "trajectories" for p in table_paths(d, name)]
    if files:
        console.print(trajectory_overview(files))
    freshness = None
    layout = Lake(lake)
    if fresh and project and any(k.built(layout) for k in KINDS if k.id_prefix):  # a dataset is built
        with console.status("asking dvc status whether each dataset is up to date ..."):
            freshness = pipeline_freshness(project)
    render_curation(lake, console, freshness)
    if freshness is not None:
        render_freshness(freshness, console)
    if project:
        render_runs(project, console)


def render_freshness(freshness: Freshness, console: Console) -> None:
    """One line: the pipeline is up to date, or which stages changed since they were built."""
    if not freshness.checked:
        console.print(literal(f"fresh: {freshness.why}"))
    elif not freshness.changed:
        console.print(literal(f"fresh: every dataset is {freshness.why}"))
    else:
        console.print(
            literal(
                f"stale: changed since built: {freshness.describe(freshness.changed)}. Datasets marked STALE are "
                f"built from them: `dvc repro` rebuilds them, and `tracelake train` refuses them until then"
            ),
            style="bold yellow",
            soft_wrap=True,
        )


def render_runs(project: Path, console: Console) -> None:
    """Where each stage last ran (.tracelake/runs, written by `python -m stages`): the executor, its
    workers or nodes, the shards it mapped. Not part of any output: every executor writes the same bytes."""
    records = []
    for path in sorted((project / RUNS).glob("*.json")):
        try:
            records.append((path.stem, json.loads(path.read_bytes())))
        except (OSError, ValueError):
            continue  # being rewritten, or damaged: it only describes a past run
    if not records:
        return
    table = Table(title="last runs (.tracelake/runs): where each stage ran", title_justify="left")
    for col in ("stage", "executor", "shards", "seconds", "finished"):
        table.add_column(col, no_wrap=col != "executor", justify="right" if col in ("shards", "seconds") else "left")
    for stage, r in records:
        if isinstance(r, dict):
            table.add_row(
                *literals(
                    (stage, r.get("where", "?"), f"{r.get('shards', 0):,}", r.get("seconds", ""), r.get("finished", ""))
                )
            )
    console.print(table)


def render_curation(lake: Path, console: Console, freshness: Freshness | None = None) -> None:
    """The filter funnel and one line per built dataset (scale), when they exist."""
    layout = Lake(lake)
    if is_built(layout.pool):
        funnel = read_manifest(layout.pool)["counts"]
        table = Table(title="filter funnel (lake/pool)", title_justify="left")
        table.add_column("source", no_wrap=True)
        table.add_column("in", justify="right")
        for rule in funnel["rules"]:  # each rule's declared label (curate/filter_rules.py)
            table.add_column(literal(filter_rules.label(rule)), justify="right")
        table.add_column("kept", justify="right")
        for source, f in [*funnel["sources"].items(), ("all", funnel["total"])]:
            table.add_row(
                literal(source), f"{f['in']:,}", *(f"-{f['dropped'][r]:,}" for r in funnel["rules"]), f"{f['kept']:,}"
            )
        console.print(table)
    selections = sorted(
        ((scale, read_manifest(d)) for scale, d in layout.built_selections().items()),
        key=lambda sm: sm[1]["counts"]["rows"],
    )
    if selections:
        sources = sorted({s for _, m in selections for s in m["counts"]["rows_by_source"]})
        table = Table(
            title="datasets (lake/selections/<scale>): rows per source (distinct trajectories)", title_justify="left"
        )
        table.add_column("dataset", no_wrap=True)
        for col in (*(["fresh"] if freshness else []), "tasks", "rollouts", "max/task", "copies", *sources):
            table.add_column(literal(col), justify="right")
        for scale, m in selections:
            c = m["counts"]
            distinct = c.get("distinct_trajectories_by_source", {})  # absent in lakes built before it

            def cell(source: str) -> str:
                rows = f"{c['rows_by_source'].get(source, 0):,}"
                return f"{rows} ({distinct[source]:,})" if source in distinct else rows

            table.add_row(
                literal(m["dataset_id"]),
                *([freshness.cell(building_stage("selection", scale))] if freshness else []),
                f"{c['tasks']:,}",
                f"{c['distinct_trajectories']:,}",
                str(c["max_rows_per_task"]),
                str(c.get("max_copies_per_trajectory", {}).get("largest", "?")),
                *(cell(s) for s in sources),
            )
        console.print(table)
    render_exports(lake, console, freshness)


def render_exports(lake: Path, console: Console, freshness: Freshness | None = None) -> None:
    """One line per training dataset (lake/exports): its id, rows out of rows in, rejects, shards."""
    layout = Lake(lake)
    exports = [  # each training dataset kind (core/datasets.py), in the order declared
        (k.named(scale), k.building_stage(scale), read_manifest(d), i)
        for i, k in enumerate(k for k in KINDS if k.is_export)
        for scale, d in k.built(layout).items()
    ]
    if not exports:
        return
    table = Table(title="training datasets (lake/exports): tracelake train sft|rl --dataset ID", title_justify="left")
    for col in (
        "export",
        "dataset id",
        *(["fresh"] if freshness else []),
        "out",
        "in",
        "rejected",
        "shards",
        "tokenizer",
        "thinking",
    ):
        table.add_column(col, no_wrap=True, justify="right" if col in ("out", "in", "shards") else "left")
    counted = set()
    for name, stage, m, _ in sorted(exports, key=lambda e: (e[3], e[2]["counts"].get("rows_in", 0))):
        c = m["counts"]
        n_out, n_in = c.get("rows_out", c.get("tasks_out")), c.get("rows_in", c.get("tasks_in"))
        rejected = ", ".join(f"{k} {v:,}" for k, v in c.get("rejected", {}).items() if v) or "none"
        tokenizer = (m.get("inputs") or {}).get("tokenizer")
        counted.add(tokenizer)
        row = (
            name,
            m["dataset_id"],
            *([freshness.cell(stage)] if freshness else []),
            f"{n_out:,}" if n_out is not None else "?",
            f"{n_in:,}" if n_in is not None else "?",
            rejected,
            c.get("shards", ""),
            (tokenizer or "not counted")[:12],
            thinking_cell(c),
        )
        table.add_row(*literals(row))
    console.print(table)
    for line in tokenizer_lines(lake, counted - {None}):
        console.print(literal(line))


def thinking_cell(counts: dict[str, Any]) -> str:
    """An SFT export's thinking choice, the share of its assistant turns with reasoning and the share
    of its trained turns trained with an empty think block (tokens/rendering.py ThoughtCounts),
    flagged (!) when that is most of them."""
    from tracelake.tokens.rendering import mostly_empty_thoughts

    t = counts.get("thinking")
    if not t:
        return ""
    choice = (counts.get("rendering") or {}).get("thinking", "?")
    reason = t["with_reasoning"] / max(1, t["assistant_turns"])
    empty = t["trained_empty_thoughts"] / max(1, t["trained_turns"])
    cell = f"{choice}: {reason:.0%} reason, {empty:.0%} empty"
    if mostly_empty_thoughts(t):
        cell += " (!)"
    return cell


def tokenizer_lines(lake: Path, fingerprints: set[str]) -> list[str]:
    """Which tokenizer counted the exports: the project's tokenizer directory (params tokenizer.out),
    described (tokens/model_tokenizer.py), and any export counted with another one, flagged."""
    project = project_of(lake)
    params = project / "params.yaml" if project else None
    if params is None or not params.is_file() or not fingerprints:
        return []
    try:
        import yaml

        out = (yaml.safe_load(params.read_text()) or {}).get("tokenizer", {}).get("out", "data/tokenizer")
        current = tokenizer_fingerprint(project / out)
    except Exception:  # noqa: BLE001 - status reports what it can; a missing tokenizer is not its error
        return []
    lines = [f"tokens counted by {out}: {describe_tokenizer(project / out)}"]
    others = sorted(f[:12] for f in fingerprints if f != current)
    if others:
        lines.append(f"warning: exports counted by another tokenizer ({', '.join(others)}): run `dvc repro`")
    return lines


def trajectory_overview(files: list[str]) -> Table:
    """Per-source shape of the trajectories (sql/status_trajectories.sql over the Parquet files).
    A file that vanished while it was read (`dvc repro` rebuilding the lake) is a one-line error."""
    try:
        cursor = duckdb.connect().execute(sql("status_trajectories"), {"files": files})
    except duckdb.IOException as e:
        raise BadInput(
            f"the lake is being rebuilt ({str(e).splitlines()[0]}); run `tracelake status` "
            f"again when `dvc repro` is done"
        ) from None
    columns = [d[0] for d in cursor.description]
    table = Table(title="trajectories by source", title_justify="left")
    for col in columns:
        table.add_column(col, justify="left" if col == "source" else "right")
    for row in cursor.fetchall():
        table.add_row(*literals(f"{v:,}" if isinstance(v, int) else v for v in row))
    return table


def render_schema(name: str | None, console: Console) -> None:
    names = TABLES if name is None else (name,)
    for n in names:
        if n not in TABLES:
            raise BadInput(f"no table {n!r}; tables: {', '.join(TABLES)}")
        s = load_schema(n)
        table = Table(title=f"{n} (v{s.version}, key {s.key}, fingerprint {s.fingerprint})", title_justify="left")
        for col in ("column", "type", "null", "meaning"):
            table.add_column(col)
        for field in s.arrow:
            table.add_row(field.name, str(field.type), "yes" if field.nullable else "", s.docs[field.name])
        console.print(table)
