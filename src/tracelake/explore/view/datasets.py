"""The dataset pages of `tracelake view`: every dataset version of the lake (pool, selections, SFT
exports) with what it holds, and the page form of `tracelake diff` between two versions, computed by
the same code (explore/diff.py) and shown with the same HTML parts (explore/diff_html.py)."""

from __future__ import annotations

import re
from contextlib import ExitStack
from typing import Any

from tracelake.core.errors import BadInput
from tracelake.explore.view.db import LakeView
from tracelake.explore.view.html import esc, page, url

_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")                 # pool, 1k, sft-1k, an id or a prefix
_REV = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/~^@{}-]*$")           # a git revision, never an option


def diff_name(view: str) -> str:
    """The `tracelake diff` name of a dataset view: pool, <scale> (a selection), sft-<scale>."""
    if view.startswith("selection_"):
        return view[len("selection_"):]
    if view.startswith("sft_"):
        return "sft-" + view[len("sft_"):]
    return view


def summaries(db: LakeView) -> list[dict[str, Any]]:
    """Per dataset: rows, trajectories, rows per source, median turns and tokens of its rows."""
    out = []
    for d in db.datasets:
        view = d["view"]      # a name from the lake's views, quoted
        stats = db._rows(f'SELECT median(v.n_assistant_turns) AS turns, median(v.n_tokens) AS tokens, '
                         f'max(v.n_tokens) AS max_tokens FROM "{view}" d JOIN view_rows v USING (trajectory_id)')[0]
        sources = db._rows(f'SELECT source, count(*) AS n FROM "{view}" GROUP BY source ORDER BY source')
        out.append({**d, **stats, "sources": sources})
    return out


def _built_from(d: dict[str, Any]) -> str:
    inputs = d["manifest"].get("inputs", {})
    if d["kind"] == "selection":
        return f"pool <code>{esc(inputs.get('pool'))}</code>"
    if d["kind"] == "export_sft":
        return f"<code>{esc(inputs.get('selection_dataset'))}</code>"
    return ", ".join(f"{esc(source)} <code>{esc(v)}</code>" for source, v in sorted(inputs.get("trajectories", {}).items()))


def _params(d: dict[str, Any]) -> str:
    params = d["manifest"].get("params", {})
    keys = {"pool": ("min_assistant_turns", "max_tokens", "episodes", "success_only"),
            "selection": ("score", "total", "min_per_task", "max_per_task", "mix"),
            "export_sft": ("template", "cutoff_len")}.get(d["kind"], ())
    shown = [(k, params[k]) for k in keys if k in params]
    return " ".join(f"<span class=\"param\">{esc(k)}={esc(v)}</span>" for k, v in shown)


def datasets_page(db: LakeView) -> str:
    """The lake's datasets: a table of versions, each linking to its rows and to a diff with the one
    before it of the same kind, and a form to diff any two (also at another git revision)."""
    rows = summaries(db)
    sources = sorted({s["source"] for d in rows for s in d["sources"]})
    head = ("<tr><th>dataset</th><th>kind</th><th>content id</th><th class=\"n\">rows</th>"
            "<th class=\"n\">trajectories</th><th class=\"n\">median turns</th><th class=\"n\">median tokens</th>"
            + "".join(f"<th class=\"n src\">{esc(s)}</th>" for s in sources) + "<th>built from</th><th>params</th><th></th></tr>")
    body, previous = [], {}
    for d in rows:
        per_source = {s["source"]: s["n"] for s in d["sources"]}
        before = previous.get(d["kind"])
        diff = (f"<a class=\"diff\" href=\"{url('/diff', {'a': diff_name(before), 'b': diff_name(d['view'])})}\">"
                f"diff with {esc(diff_name(before))}</a>") if before else ""
        previous[d["kind"]] = d["view"]
        body.append(
            f"<tr class=\"dataset\" data-view=\"{esc(d['view'])}\"><td><a class=\"rows\" href=\"{url('/', {'dataset': d['view']})}\">"
            f"{esc(d['view'])}</a></td><td>{esc(d['kind'])}</td><td><code>{esc(d['dataset_id'])}</code></td>"
            f"<td class=\"n\">{d['rows']:,}</td><td class=\"n\">{d['trajectories']:,}</td>"
            f"<td class=\"n\">{_num(d['turns'])}</td><td class=\"n\">{_num(d['tokens'])}</td>"
            + "".join(f"<td class=\"n src\">{per_source.get(s, 0):,}</td>" for s in sources)
            + f"<td>{_built_from(d)}</td><td>{_params(d)}</td><td>{diff}</td></tr>")
    table = (f"<table class=\"list datasets\"><thead>{head}</thead><tbody>{''.join(body)}</tbody></table>"
             if body else "<p class=\"none\">no dataset is built yet: run <code>dvc repro</code></p>")
    content = (f"<h1>Datasets</h1><p>Every version built in this lake, each named by its content. A dataset's "
               f"rows open in the list (with every facet and search); a diff says what changed between two "
               f"versions, row by row, and why.</p>{table}{diff_form(db, '', '')}")
    return page("datasets · tracelake view", content, label=db.label)


def _num(value: Any) -> str:
    return "" if value is None else f"{value:,.0f}"


def diff_form(db: LakeView, a: str, b: str) -> str:
    names = [diff_name(d["view"]) for d in db.datasets]

    def field(name: str, value: str) -> str:
        options = "".join(f"<option value=\"{esc(n)}\"></option>" for n in names)
        return (f"<label>{name.upper()} <input type=\"text\" name=\"{name}\" id=\"d-{name}\" list=\"versions\" "
                f"value=\"{esc(value)}\" size=\"28\" spellcheck=\"false\" placeholder=\"pool, 1k, sft-1k, HEAD~1:1k\"></label>"
                + (f"<datalist id=\"versions\">{options}</datalist>" if name == "a" else ""))

    return (f"<form class=\"facets diff-form\" method=\"get\" action=\"/diff\"><div class=\"row\">"
            f"{field('a', a)} {field('b', b)} <button type=\"submit\">Diff</button></div>"
            "<p class=\"hint\">A version is <code>pool</code>, a scale (its selection), <code>sft-&lt;scale&gt;</code>, a "
            "content id or its prefix; <code>REV:</code> before it reads it at a git revision (through DVC), as "
            "<code>tracelake diff</code> does.</p></form>")


def check_spec(spec: str) -> str:
    """A diff side from a request: a version of this lake, optionally at a revision; never a path."""
    spec = spec.strip()
    rev, sep, ref = spec.rpartition(":")
    if not _REF.match(ref) or (sep and not _REV.match(rev)):
        raise BadInput(f"view: diff side {spec!r}: expected pool, a scale, sft-<scale> or a content id, "
                       "optionally REV: before it (no paths)")
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
    from tracelake.explore.view.html import error_line

    shown = ""
    if report is not None:
        shown = f"<div class=\"diff\" id=\"diff\">{render_body(report)}</div>"
    content = (f"<h1>Diff</h1>{diff_form(db, a, b)}{error_line(error)}{shown}")
    title = f"diff {a} {b} · tracelake view" if a and b else "diff · tracelake view"
    return page(title, content, label=db.label)
