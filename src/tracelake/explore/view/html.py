"""The pages of `tracelake view`: each function gathers a page's values and renders its template
(templates/, autoescaped: render.py says how a value reaches a page). A trace holds hostile text:
nothing here builds HTML. No inline script or style: the page's JavaScript and CSS are files of this
package (static/)."""

from __future__ import annotations

import re
from typing import Any, Iterable

from tracelake.explore.view.db import Query
from tracelake.explore.view.render import esc, render, text_html, trace_url, url
from tracelake.explore.view.trace import (
    messages_html,
    side,
    task_files,
    tool_calls,
    trace_body,
    trace_context,
)

__all__ = [
    "esc",
    "url",
    "text_html",
    "messages_html",
    "task_files",
    "tool_calls",
    "trace_body",
    "snippet",
    "list_page",
    "trace_page",
    "compare_page",
    "not_found",
]

_WORD = re.compile(r"\w+")
SNIPPET = 90
TURN_LINKS = 12  # links to a search row's matching turns


def snippet(content: str, text: str) -> list[tuple[str, bool]]:
    """The part of a message around the first of the search's words it holds (case-insensitive, whole
    words), as (text, is a word of the search) pieces; "…" where it was cut."""
    words = {w.lower() for w in _WORD.findall(text)}
    if not words:
        return [(content[: 2 * SNIPPET], False)]
    pattern = re.compile(
        r"(?<!\w)(" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)) + r")(?!\w)", re.IGNORECASE
    )
    first = pattern.search(content)
    start = max(0, first.start() - SNIPPET) if first else 0
    piece = content[start : start + 2 * SNIPPET + (len(first.group(0)) if first else 0)]
    out: list[tuple[str, bool]] = [("…", False)] if start else []
    last = 0
    for m in pattern.finditer(piece):
        out += [(piece[last : m.start()], False), (m.group(0), True)]
        last = m.end()
    out.append((piece[last:], False))
    return out + ([("…", False)] if start + len(piece) < len(content) else [])


def _hits(r: dict, q: Query) -> dict[str, Any]:
    """A search row's matching messages: the best one's snippet and links to each matching turn."""
    hits = r["hits"]
    return {
        "best": hits[0],
        "snippet": snippet(hits[0].content, q.q or ""),
        "turns": sorted(hits[:TURN_LINKS], key=lambda h: h.position),
        "more": len(hits) - TURN_LINKS if len(hits) > TURN_LINKS else 0,
    }


def _options(values: Iterable[tuple[str, int]], chosen: str | None) -> list[tuple[str, int, bool]]:
    return [(value, n, value == chosen) for value, n in values]


def _yes_no(chosen: bool | None) -> str:
    return "" if chosen is None else ("yes" if chosen else "no")


def list_page(
    q: Query,
    rows: list[dict],
    total: int,
    next_after: str | None,
    facet_values: dict,
    *,
    label: str,
    error: str | None = None,
    opened: str | None = None,
    columns: Iterable[str] = (),
    search_state: str | None = None,
    capped: bool = False,
) -> str:
    """The list; `opened` (the trajectory the reader came back from) is marked and scrolled to. With a
    search (`q.q`), rows are ranked by their best message and carry `hits`; pages are numbered."""
    searching = bool(q.q and q.q.strip())
    params = q.params()
    first = {k: v for k, v in params.items() if k not in ("after", "page")}
    shown = [
        {
            **r,
            "link": trace_url(r["trajectory_id"], params),
            "flags": (" subagent" if r["is_subagent"] else "") + (" opened" if r["trajectory_id"] == opened else ""),
            "source_link": url("/", {**params, "source": r["source"], "after": ""}),
            "task_link": url("/", {**params, "task": r["task"], "after": ""}),
            "hit": _hits(r, q) if searching else None,
        }
        for r in rows
    ]
    nav = []  # (class, rel, href, text)
    if searching:
        number = q.page or 1
        if number > 1:
            nav.append(("prev", None, url("/", {**first, "page": str(number - 1)}), f"« page {number - 1}"))
        if next_after:
            nav.append(("next", "next", url("/", {**first, "page": next_after}), f"page {next_after} »"))
    else:
        if q.after:
            nav.append(("first", None, url("/", first), "« first page"))
        if next_after:
            nav.append(("next", "next", url("/", {**first, "after": next_after}), "next page »"))
    exports = [
        (fmt, name, url("/export", {**first, "format": fmt}))
        for fmt, name in (("jsonl", "JSONL"), ("parquet", "Parquet"), ("html", "HTML page"))
    ]
    facets = {name: _options(facet_values.get(name, []), getattr(q, name)) for name in ("dataset", "source", "rule")}
    return render(
        "list.html",
        q=q,
        params=params,
        rows=shown,
        total=total,
        error=error,
        searching=searching,
        search_state=search_state,
        capped=capped,
        nav=nav,
        exports=exports,
        columns=list(columns),
        facets=facets,
        timed_out=_yes_no(q.timed_out),
        subagent=_yes_no(q.subagent),
        label=label,
    )


def trace_page(t: dict, q: Query, *, label: str, tokenizer=None) -> str:
    """One trajectory's page (trace.py's trace_context; `q`: the list it was opened from)."""
    return render("trace.html", label=label, **trace_context(t, q, tokenizer=tokenizer))


def compare_page(a: dict, b: dict, q: Query, *, label: str) -> str:
    """Two rollouts side by side: their facts, outcome and messages in two columns."""
    params = q.params()
    return render(
        "compare.html",
        label=label,
        a=a,
        b=b,
        same=a["task_id"] == b["task_id"],
        sides=[("a", side(a, params)), ("b", side(b, params))],
    )


def not_found(message: str, *, label: str) -> str:
    """A missing page or a refused request: the message as one error line."""
    return render("not_found.html", message=message, label=label)
