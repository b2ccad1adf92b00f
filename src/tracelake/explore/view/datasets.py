"""The dataset pages of `tracelake view`: every dataset version of the lake (pool, selections, SFT
exports, the RL export) with what it holds and whether it is up to date (DVC's status), the other
versions recorded in git and `dvc exp` (each a link to a diff), and the page form of `tracelake diff`
between two versions, computed by the same code (explore/diff.py) and shown with the same HTML parts
(explore/diff_html.py), inside templates/datasets.html and templates/diff.html."""

from __future__ import annotations

import re
from contextlib import ExitStack
from typing import Any

from tracelake.core.datasets import ID_PREFIXES, KINDS, building_stage, dataset_kind
from tracelake.core.errors import BadInput
from tracelake.core.lake import Lake
from tracelake.core.outputs import read_manifest
from tracelake.core.revisions import recorded_versions
from tracelake.explore.view.db import LakeView
from tracelake.explore.view.render import render, trusted, url

_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # pool, 1k, sft-1k, an id or a prefix
SPEC_MAX = 200  # characters of a diff side (a name longer than a file name can be is no version)
_REV = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/~^@{}-]*$")  # a git revision, never an option


def diff_name(d: dict[str, Any]) -> str:
    """The `tracelake diff` name of a dataset of the lake (pool, <scale>, sft-<scale>: its kind's)."""
    return dataset_kind(d["kind"]).named(d["scale"])


def summaries(db: LakeView) -> list[dict[str, Any]]:
    """Per dataset: rows, trajectories, rows per source, median turns and tokens of its rows."""
    out = []
    for d in db.datasets:
        view = d["view"]  # a name from the lake's views, quoted
        stats = db._rows(
            f"SELECT median(v.n_assistant_turns) AS turns, median(v.n_tokens) AS tokens, "
            f'max(v.n_tokens) AS max_tokens FROM "{view}" d JOIN view_rows v USING (trajectory_id)'
        )[0]
        sources = db._rows(f'SELECT source, count(*) AS n FROM "{view}" GROUP BY source ORDER BY source')
        out.append({**d, **stats, "sources": sources})
    return out


def _built_from(d: dict[str, Any]) -> list[tuple[str | None, Any]]:
    """What a dataset was built from: (what, its content id) pairs."""
    key = dataset_kind(d["kind"]).built_from  # core/datasets.py: its manifest's inputs key
    value = d["manifest"].get("inputs", {}).get(key)
    if isinstance(value, dict):  # the pool: each source's trajectories version
        return sorted(value.items())
    names_itself = isinstance(value, str) and value.split("-", 1)[0] in ID_PREFIXES  # a dataset id: sel-1k-…
    return [(None if names_itself else key, value)]


def _params(d: dict[str, Any]) -> list[tuple[str, Any]]:
    params = d["manifest"].get("params", {})
    keys = dataset_kind(d["kind"]).shows  # core/datasets.py; None: every param its manifest records
    shown = [(k, params[k]) for k in (sorted(params) if keys is None else keys) if k in params]
    thoughts = d["manifest"].get("counts", {}).get("thinking")  # an export rendered with think blocks
    if thoughts:  # the assistant turns by reasoning, and the empty think blocks trained (tokens/rendering.py)
        from tracelake.tokens.rendering import mostly_empty_thoughts

        shown.append(("turns_with_reasoning", f"{thoughts['with_reasoning']:,}/{thoughts['assistant_turns']:,}"))
        empty = f"{thoughts['trained_empty_thoughts']:,}/{thoughts['trained_turns']:,}"
        shown.append(("empty_think_trained", empty + (" (most turns!)" if mostly_empty_thoughts(thoughts) else "")))
    return shown


def fresh(db: LakeView, stage: str) -> str:
    """yes / STALE / '...' while DVC is asked / '' when not checked (a lake at a revision)."""
    if db.freshness is None:
        return "..." if db.freshness_note.startswith("checking") else ""
    return db.freshness.cell(stage)


def task_datasets(db: LakeView) -> list[dict[str, Any]]:
    """The datasets of tasks (core/datasets.py kinds with one task per row: the RL export's prompts and
    task directories): no rows to list, so what each holds and drops."""
    out = []
    for kind in (k for k in KINDS if not k.per_trajectory):
        for scale, directory in kind.built(Lake(db.lake)).items():
            m = read_manifest(directory)
            c = m["counts"]
            out.append(
                {
                    "name": kind.named(scale),
                    "kind": kind.name,
                    "dataset_id": m["dataset_id"],
                    "tasks_in": c.get("tasks_in", 0),
                    "tasks_out": c.get("tasks_out", 0),
                    "sources": {s: v.get("out", 0) for s, v in c.get("sources", {}).items()},
                    "dropped": [(rule, n) for rule, n in sorted(c.get("dropped", {}).items()) if n],
                    "rejected": [(why, n) for why, n in sorted(c.get("rejected", {}).items()) if n],
                    "tokenizer": (m.get("inputs") or {}).get("tokenizer"),
                    "fresh": fresh(db, kind.building_stage(scale)),
                }
            )
    return out


def versions(db: LakeView) -> list[dict[str, Any]]:
    """Other recorded versions (core/revisions.py's recorded_versions, from the working directory's
    repository), each with links that diff its datasets against this lake's."""
    names = [diff_name(d) for d in db.datasets]
    out = []
    for r in recorded_versions("."):
        if not _REV.match(r.name):
            continue
        out.append(
            {
                "kind": r.kind,
                "name": r.name,
                "sha": r.sha[:10],
                "date": r.date,
                "subject": r.subject,
                "diffs": [(n, url("/diff", {"a": f"{r.name}:{n}", "b": n})) for n in names],
            }
        )
    return out


def datasets_page(db: LakeView) -> str:
    """The lake's datasets: a table of versions, each linking to its rows and to a diff with the one
    before it of the same kind, the RL export, the versions recorded in git and `dvc exp`, and a form
    to diff any two (also at another git revision)."""
    rows = summaries(db)
    sources = sorted({s["source"] for d in rows for s in d["sources"]})
    shown, previous = [], {}
    for d in rows:
        per_source = {s["source"]: s["n"] for s in d["sources"]}
        before = previous.get(d["kind"])
        previous[d["kind"]] = diff_name(d)
        shown.append(
            {
                **d,
                "rows_link": url("/", {"dataset": d["view"]}),
                "per_source": [per_source.get(s, 0) for s in sources],
                "built_from": _built_from(d),
                "params": _params(d),
                "before": before,
                "diff_link": url("/diff", {"a": before, "b": diff_name(d)}) if before else None,
                "fresh": fresh(db, building_stage(d["kind"], d["scale"])),
            }
        )
    return render(
        "datasets.html",
        rows=shown,
        sources=sources,
        label=db.label,
        **_tasks(db),
        versions=versions(db),
        freshness=db.freshness_note,
        tokenizer=_counted_by(db),
        **_form(db, "", ""),
    )


def _tasks(db: LakeView) -> dict[str, Any]:
    """The values of the datasets of tasks' table: each one, a column per source of any of them."""
    sets = task_datasets(db)
    sources = sorted({s for t in sets for s in t["sources"]})
    return {
        "task_sets": [{**t, "per_source": [t["sources"].get(s, 0) for s in sources]} for t in sets],
        "task_sources": sources,
    }


def _counted_by(db: LakeView) -> str | None:
    """Which tokenizer counted the lake's tokens (the project's tokenizer directory, described)."""
    if db.tokenizer is None:
        return None
    from tracelake.tokens.model_tokenizer import describe_tokenizer

    return f"{db.tokenizer[0]}: {describe_tokenizer(db.tokenizer[0])}"


def _form(db: LakeView, a: str, b: str) -> dict[str, Any]:
    """The values of templates/diff_form.html."""
    return {"a": a, "b": b, "names": [diff_name(d) for d in db.datasets]}


def check_spec(spec: str) -> str:
    """A diff side from a request: a version of this lake, optionally at a revision; never a path."""
    spec = spec.strip()
    rev, sep, ref = spec.rpartition(":")
    if len(spec) > SPEC_MAX or not _REF.match(ref) or (sep and not _REV.match(rev)):
        raise BadInput(
            f"view: diff side {spec[:SPEC_MAX]!r}: expected pool, a scale, sft-<scale> or a content id, "
            "optionally REV: before it (no paths)"
        )
    return spec


def diff_report(db: LakeView, a: str, b: str) -> dict[str, Any]:
    """`tracelake diff A B` on this lake (REV:… sides read from git and DVC as the command does)."""
    from tracelake.explore.diff import diff_versions, resolve_version

    with ExitStack() as stack:
        va = resolve_version(check_spec(a), stack, lake=_lake_for(db, a), root=".")
        vb = resolve_version(check_spec(b), stack, lake=_lake_for(db, b), root=".")
        return diff_versions(va, vb)


def _lake_for(db: LakeView, spec: str) -> str:
    """The lake a side is found in: the served lake, or at a revision the lake's path in the repository."""
    return db.lake_in_repo if ":" in spec else str(db.lake)


def diff_page(db: LakeView, a: str, b: str, report: dict[str, Any] | None, error: str | None = None) -> str:
    from tracelake.explore.diff_html import render_body

    shown = None if report is None else trusted(render_body(report))
    return render("diff.html", report=shown, error=error, label=db.label, **_form(db, a, b))
