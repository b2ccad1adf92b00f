"""The pages of `tracelake view`, as Python functions returning HTML. A trace holds hostile text:
every value goes into a page through `esc` (html.escape, quotes included), URLs through `url`.
No inline script or style: the page's JavaScript and CSS are files of this package (static/)."""

from __future__ import annotations

import html
import json
import re
from typing import Any, Iterable
from urllib.parse import quote, urlencode

from tracelake.explore.view.ansi import ansi_html, has_ansi, strip_ansi
from tracelake.explore.view.db import Query

FOLD_LINES = 12     # an observation or message longer than this (or FOLD_CHARS) is folded
FOLD_CHARS = 2000
_THINK = re.compile(r"(<think>.*?(?:</think>|\Z))", re.DOTALL)


def esc(value: Any) -> str:
    """Text as HTML: &, <, >, " and ' escaped; None is empty."""
    return "" if value is None else html.escape(str(value), quote=True)


def url(path: str, params: dict[str, str] | None = None) -> str:
    """A URL (escaped for an attribute) for a path and query parameters."""
    query = urlencode(params or {})
    return esc(path + ("?" + query if query else ""))


def trace_url(trajectory_id: str, query: Query) -> str:
    return url(f"/t/{quote(trajectory_id, safe='')}", query.params())


def page(title: str, body: str, *, label: str) -> str:
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{esc(title)}</title>"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        "<link rel=\"stylesheet\" href=\"/static/view.css\"><link rel=\"stylesheet\" href=\"/static/ansi.css\">"
        "<script src=\"/static/view.js\" defer></script></head>\n"
        f"<body><header><a class=\"home\" href=\"/\">tracelake view</a> <nav class=\"top\"><a href=\"/\">trajectories</a> "
        f"<a href=\"/datasets\">datasets</a> <a href=\"/diff\">diff</a></nav> <span class=\"lake\">{esc(label)}</span></header>\n"
        f"<main>{body}</main></body></html>\n"
    )


def error_line(message: str | None) -> str:
    """A refusal or error as one visible line."""
    return f"<p class=\"error\" role=\"alert\">tracelake: {esc(message)}</p>" if message else ""


# --- the list ----------------------------------------------------------------------------------

def _options(name: str, values: Iterable[tuple[str, int]], chosen: str | None, any_label: str = "any") -> str:
    opts = [f"<option value=\"\">{esc(any_label)}</option>"]
    for value, n in values:
        sel = " selected" if value == chosen else ""
        opts.append(f"<option value=\"{esc(value)}\"{sel}>{esc(value)} ({n:,})</option>")
    return f"<select name=\"{esc(name)}\" id=\"f-{esc(name)}\" class=\"autosubmit\">{''.join(opts)}</select>"


def _yes_no(name: str, chosen: bool | None) -> str:
    vals = {"": "any", "yes": "yes", "no": "no"}
    current = "" if chosen is None else ("yes" if chosen else "no")
    opts = "".join(f"<option value=\"{v}\"{' selected' if v == current else ''}>{label}</option>" for v, label in vals.items())
    return f"<select name=\"{name}\" id=\"f-{name}\" class=\"autosubmit\">{opts}</select>"


def _num(name: str, value: Any, placeholder: str) -> str:
    return (f"<input type=\"text\" inputmode=\"decimal\" size=\"6\" name=\"{name}\" id=\"f-{name}\" "
            f"placeholder=\"{esc(placeholder)}\" value=\"{esc(value)}\">")


def facets_form(q: Query, facet_values: dict[str, list[tuple[str, int]]]) -> str:
    return f"""<form class="facets" method="get" action="/" id="query">
<div class="where"><label for="f-q">search</label>
<input type="search" name="q" id="f-q" value="{esc(q.q)}" spellcheck="false"
 placeholder="words in any message (BM25), e.g. permission denied">
<label>in {_options('dataset', facet_values.get('dataset', []), q.dataset, 'every trajectory')}</label></div>
<div class="where"><label for="f-where">WHERE</label>
<input type="text" name="where" id="f-where" value="{esc(q.where)}" spellcheck="false"
 placeholder="SQL over view_rows, e.g. n_assistant_turns &gt;= 10 AND reward &gt; 0">
<button type="submit">Find</button> <a href="/">reset</a></div>
<div class="row">
<label>source {_options('source', facet_values.get('source', []), q.source)}</label>
<label>task <input type="text" name="task" id="f-task" size="18" value="{esc(q.task)}"></label>
<label>filter rule {_options('rule', facet_values.get('rule', []), q.rule)}</label>
<label>timed out {_yes_no('timed_out', q.timed_out)}</label>
<label>subagent {_yes_no('subagent', q.subagent)}</label>
</div><div class="row">
<label>reward {_num('reward_min', q.reward_min, 'min')}–{_num('reward_max', q.reward_max, 'max')}</label>
<label>assistant turns {_num('turns_min', q.turns_min, 'min')}–{_num('turns_max', q.turns_max, 'max')}</label>
<label>tokens {_num('tokens_min', q.tokens_min, 'min')}–{_num('tokens_max', q.tokens_max, 'max')}</label>
</div></form>"""


def _reward(row: dict) -> str:
    return "" if row.get("reward") is None else f"{row['reward']:g}"


def _status(row: dict) -> str:
    if row.get("kept"):
        return "<span class=\"kept\">kept</span>"
    if row.get("rule"):
        return f"<span class=\"dropped\">{esc(row['rule'])}</span>"
    return ""


_WORD = re.compile(r"\w+")
SNIPPET = 90


def snippet(content: str, text: str) -> str:
    """The part of a message around the first of the search's words it holds (case-insensitive, whole
    words), escaped, the words marked."""
    words = {w.lower() for w in _WORD.findall(text)}
    if not words:
        return esc(content[:2 * SNIPPET])
    pattern = re.compile(r"(?<!\w)(" + "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)) + r")(?!\w)",
                         re.IGNORECASE)
    first = pattern.search(content)
    start = max(0, first.start() - SNIPPET) if first else 0
    piece = content[start:start + 2 * SNIPPET + (len(first.group(0)) if first else 0)]
    out, last = [], 0
    for m in pattern.finditer(piece):
        out.append(esc(piece[last:m.start()]) + f"<mark>{esc(m.group(0))}</mark>")
        last = m.end()
    out.append(esc(piece[last:]))
    return ("…" if start else "") + "".join(out) + ("…" if start + len(piece) < len(content) else "")


def _hits_cell(r: dict, q: Query) -> str:
    """A search row's matching messages: the best one's snippet and links to each matching turn."""
    hits = r["hits"]
    best = hits[0]
    turns = " ".join(f"<a class=\"turn\" href=\"{trace_url(r['trajectory_id'], q)}#m{h.position}\">#{h.position}</a>"
                     for h in sorted(hits[:12], key=lambda h: h.position))
    more = f" +{len(hits) - 12}" if len(hits) > 12 else ""
    return (f"<td class=\"hit\"><a class=\"best\" href=\"{trace_url(r['trajectory_id'], q)}#m{best.position}\">"
            f"#{best.position} {esc(best.role)}</a> <span class=\"snippet\">{snippet(best.content, q.q or '')}</span>"
            f"<div class=\"turns\">{turns}{more}</div></td>")


def exports_links(q: Query) -> str:
    """Links that download the current selection."""
    params = {k: v for k, v in q.params().items() if k not in ("after", "page")}
    return ("<p class=\"exports\">export this selection: "
            + " · ".join(f"<a class=\"export-{fmt}\" href=\"{url('/export', {**params, 'format': fmt})}\">{label}</a>"
                         for fmt, label in (("jsonl", "JSONL"), ("parquet", "Parquet"), ("html", "HTML page")))
            + "</p>")


def list_page(q: Query, rows: list[dict], total: int, next_after: str | None,
              facet_values: dict, *, label: str, error: str | None = None, opened: str | None = None,
              columns: Iterable[str] = (), search_state: str | None = None, capped: bool = False) -> str:
    """The list; `opened` (the trajectory the reader came back from) is marked and scrolled to. With a
    search (`q.q`), rows are ranked by their best message and carry `hits`; pages are numbered."""
    searching = bool(q.q and q.q.strip())
    head = ("<tr><th>trajectory</th><th>source</th><th>task</th><th>trace</th><th>episode</th>"
            "<th class=\"n\">turns</th><th class=\"n\">tokens</th><th class=\"n\">reward</th>"
            "<th>exception</th><th>filter</th>" + ("<th>best match</th>" if searching else "") + "</tr>")
    body = []
    for r in rows:
        flags = (" subagent" if r["is_subagent"] else "") + (" opened" if r["trajectory_id"] == opened else "")
        body.append(
            f"<tr class=\"traj{flags}\" id=\"r-{esc(r['trajectory_id'])}\" data-id=\"{esc(r['trajectory_id'])}\">"
            f"<td><a class=\"open\" href=\"{trace_url(r['trajectory_id'], q)}\"><code>{esc(r['trajectory_id'])}</code></a></td>"
            f"<td><a href=\"{url('/', {**q.params(), 'source': r['source'], 'after': ''})}\">{esc(r['source'])}</a></td>"
            f"<td><a href=\"{url('/', {**q.params(), 'task': r['task'], 'after': ''})}\">{esc(r['task'])}</a></td>"
            f"<td>{esc(r['trace_source'])}</td><td>{esc(r['episode'])}</td>"
            f"<td class=\"n\">{esc(r['n_assistant_turns'])}</td><td class=\"n\">{esc(r['n_tokens'])}</td>"
            f"<td class=\"n\">{_reward(r)}</td><td>{esc(r['exception_type'])}</td><td>{_status(r)}</td>"
            + (_hits_cell(r, q) if searching else "") + "</tr>")
    first = {k: v for k, v in q.params().items() if k not in ("after", "page")}
    nav = []
    if searching:
        number = q.page or 1
        if number > 1:
            nav.append(f"<a class=\"prev\" href=\"{url('/', {**first, 'page': str(number - 1)})}\">« page {number - 1}</a>")
        if next_after:
            nav.append(f"<a class=\"next\" rel=\"next\" href=\"{url('/', {**first, 'page': next_after})}\">page {next_after} »</a>")
    else:
        if q.after:
            nav.append(f"<a class=\"first\" href=\"{url('/', first)}\">« first page</a>")
        if next_after:
            nav.append(f"<a class=\"next\" rel=\"next\" href=\"{url('/', {**first, 'after': next_after})}\">next page »</a>")
    if error is not None:
        summary = ""
    elif searching and search_state != "ready":
        summary = f"<p class=\"searching\" role=\"status\">{esc(search_state)}</p>"
    elif searching:
        summary = (f"<p class=\"count\"><span id=\"total\">{total:,}</span> trajectories match the search "
                   f"<q>{esc(q.q)}</q>" + (" among its best-ranked messages (the first 2,000; narrow it with words or facets)"
                                            if capped else "") + ", best first</p>")
    else:
        summary = (f"<p class=\"count\"><span id=\"total\">{total:,}</span> trajectories match"
                   f"{' (after ' + esc(q.after) + ')' if q.after else ''}</p>")
    summary += exports_links(q) if error is None and total else ""
    table = (f"<table class=\"list\"><thead>{head}</thead><tbody>{''.join(body)}</tbody></table>"
             if error is None else "")
    names = ", ".join(f"<code>{esc(c)}</code>" for c in columns)
    help_line = (f"<details class=\"columns\"><summary>WHERE columns (view <code>view_rows</code>; other views "
                 f"as in <code>tracelake sql</code>)</summary><p>{names}</p></details>") if names else ""
    content = (f"{facets_form(q, facet_values)}{help_line}{error_line(error)}{summary}{table}"
               f"<nav class=\"pages\">{' '.join(nav)}</nav>")
    return page("tracelake view", content, label=label)


# --- one trajectory ----------------------------------------------------------------------------

def text_html(text: str) -> str:
    """Text for a <pre>: escaped, its ANSI colours (terminal output) as classes of ansi.css."""
    return ansi_html(text) if has_ansi(text) else esc(text)


def _fold(text: str, what: str, *, css: str = "fold") -> str:
    """Text as a <pre>; a long one inside a closed <details> whose summary is its first line."""
    lines = text.split("\n")
    if len(lines) <= FOLD_LINES and len(text) <= FOLD_CHARS:
        return f"<pre>{text_html(text)}</pre>"
    first = next((line for line in strip_ansi(text).split("\n") if line.strip()), "")[:120]
    return (f"<details class=\"{css}\"><summary>{esc(what)}: {len(lines):,} lines, {len(text):,} chars "
            f"<span class=\"first\">{esc(first)}</span></summary><pre>{text_html(text)}</pre></details>")


def _with_thinking(text: str, fold_rest: bool) -> str:
    """A message's text, each <think> block in a closed <details>."""
    out = []
    for piece in _THINK.split(text):
        if not piece:
            continue
        if piece.startswith("<think>"):
            inner = piece[len("<think>"):].removesuffix("</think>")
            out.append(f"<details class=\"think\"><summary>&lt;think&gt; {len(inner.split()):,} words</summary>"
                       f"<pre>{esc(inner)}</pre></details>")
        else:
            out.append(_fold(piece, "message") if fold_rest else f"<pre>{text_html(piece)}</pre>")
    return "".join(out)


def tool_calls(text: str) -> list[str]:
    """The commands an assistant turn issued (terminus-2's JSON `commands[].keystrokes`), else []."""
    body = _THINK.sub("", text).strip()
    start = body.find("{")
    if start < 0:
        return []
    try:
        parsed = json.loads(body[start:body.rfind("}") + 1])
    except ValueError:
        return []
    commands = parsed.get("commands") if isinstance(parsed, dict) else None
    if not isinstance(commands, list):
        return []
    return [str(c.get("keystrokes", "")) for c in commands if isinstance(c, dict)]


def _tokens(tokens: list[int] | None, position: int) -> str:
    return f" <span class=\"tok\">{tokens[position]:,} tokens</span>" if tokens else ""


def _message(position: int, role: str, inner: str, extra: str = "", tokens: list[int] | None = None) -> str:
    return (f"<section class=\"msg {esc(role)}\" id=\"m{position}\"><h3><span class=\"pos\">{position}</span> "
            f"<span class=\"role\">{esc(role)}</span>{_tokens(tokens, position)}</h3>{inner}{extra}</section>")


def messages_html(messages: list[dict], tokens: list[int] | None = None) -> str:
    """Every message in order (with its tokens when `tokens` gives them). An assistant turn that called
    tools is paired with the observation that answers it (the next message: a tool result, or the
    terminal output the harness sent back as user): its commands, then that output, folded when long."""
    out, i = [], 0
    while i < len(messages):
        m = messages[i]
        role, content = m.get("role") or "", m.get("content") or ""
        if role != "assistant":
            out.append(_message(i, role, _with_thinking(content, fold_rest=True), tokens=tokens))
            i += 1
            continue
        calls = tool_calls(content)
        following = messages[i + 1].get("role") if i + 1 < len(messages) else None
        obs = messages[i + 1] if following == "tool" or (calls and following == "user") else None
        pair = ""
        if calls or obs is not None:
            call_html = "".join(f"<li><code>{esc(c.rstrip())}</code></li>" for c in calls)
            obs_html = ""
            if obs is not None:
                obs_html = (f"<div class=\"obs\" id=\"m{i + 1}\"><h4><span class=\"pos\">{i + 1}</span> "
                            f"observation ({esc(obs.get('role'))}){_tokens(tokens, i + 1)}</h4>"
                            f"{_with_thinking(obs.get('content') or '', fold_rest=True)}</div>")
            calls_html = f"<ul class=\"calls\">{call_html}</ul>" if calls else ""
            pair = f"<div class=\"toolpair\">{calls_html}{obs_html}</div>"
        out.append(_message(i, role, _with_thinking(content, fold_rest=False), pair, tokens=tokens))
        i += 2 if obs is not None else 1
    return "".join(out)


def _kv(pairs: list[tuple[str, Any]]) -> str:
    return "<dl class=\"kv\">" + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in pairs) + "</dl>"


def _datasets(t: dict) -> str:
    items = []
    if t["kept"]:
        items.append("<li class=\"kept\">in the pool: the filter kept it</li>")
    elif t["rule"]:
        items.append(f"<li class=\"dropped\">dropped by the filter: <code>{esc(t['rule'])}</code> — "
                     f"<span class=\"detail\">{esc(t['detail'])}</span> (so in no dataset)</li>")
    else:
        items.append("<li>the filter has not run on this lake</li>")
    for scale, (dataset_id, copies) in t["copies"].items():
        ds = f" <code>{esc(dataset_id)}</code>" if dataset_id else ""
        what = f"{copies} upsampled cop{'y' if copies == 1 else 'ies'}" if copies else "not selected"
        items.append(f"<li class=\"scale\" data-scale=\"{esc(scale)}\">selection_{esc(scale)}{ds}: {what}</li>")
    for r in t["export_rejects"]:
        items.append(f"<li class=\"dropped\">export reject {esc(r['name'])}: <code>{esc(r['reason'])}</code> "
                     f"{esc(r['detail'])}</li>")
    return "<ul class=\"datasets\">" + "".join(items) + "</ul>"


def _related(t: dict, link) -> str:
    subs = [r for r in t["related"] if r["subagent"]]
    conts = [r for r in t["related"] if not r["subagent"]]

    def links(rows: list[dict], css: str) -> str:
        if not rows:
            return "<p class=\"none\">none</p>"
        return f"<ul class=\"{css}\">" + "".join(
            f"<li><a href=\"{link(r['trajectory_id'])}\">{esc(r['trace_source'])} {esc(r['episode'])}</a> "
            f"<code>{esc(r['trajectory_id'])}</code> ({esc(r['n_assistant_turns'])} turns)</li>" for r in rows) + "</ul>"

    return (f"<h2>Subagent traces (same trial, another trace_source)</h2>{links(subs, 'subagents')}"
            f"<h2>Continuation episodes (same trial and trace)</h2>{links(conts, 'episodes')}")


TASK_FILE_BYTES = 20_000       # a task file shown inline: text, at most this long
TASK_FILES_BYTES = 400_000     # and at most this much of them a task
TASK_MEMBERS = 2_000           # members looked at (a task page never walks a huge archive)


def task_files(binary: bytes | None) -> list[tuple[str, int, str | None]]:
    """The files of a task's gzipped tar, read in memory, never extracted: (path, bytes, text), text
    only for a small UTF-8 file within the page's budget (TASK_FILE_BYTES each, TASK_FILES_BYTES in
    all); at most TASK_MEMBERS members are looked at."""
    import io
    import tarfile

    out: list[tuple[str, int, str | None]] = []
    if not binary:
        return out
    budget = TASK_FILES_BYTES
    try:
        with tarfile.open(fileobj=io.BytesIO(binary), mode="r:gz") as tar:
            for k, member in enumerate(tar):
                if k >= TASK_MEMBERS:
                    break
                if not member.isfile():
                    continue
                text = None
                if member.size <= min(TASK_FILE_BYTES, budget):
                    try:
                        text = tar.extractfile(member).read().decode("utf-8")
                        budget -= member.size
                    except UnicodeDecodeError:
                        text = None
                out.append((member.name, member.size, text))
    except (tarfile.TarError, OSError, EOFError):
        pass
    return out


def _task(task: dict) -> str:
    """A task: its instruction, task.toml (as its JSON), its files listed, the small text ones readable."""
    files = []
    for path, size, text in task_files(task.get("task_binary")):
        if text is None:
            files.append(f"<li><code>{esc(path)}</code> <span class=\"none\">{size:,} bytes</span></li>")
        else:
            files.append(f"<li><details class=\"file\"><summary><code>{esc(path)}</code> "
                         f"<span class=\"none\">{size:,} bytes</span></summary><pre>{text_html(text)}</pre></details></li>")
    meta = (f"<details class=\"meta\"><summary>task.toml</summary><pre>{esc(task['metadata_json'])}</pre></details>"
            if task.get("metadata_json") else "")
    listing = (f"<details class=\"files\"><summary>{task.get('n_files') or len(files):,} files</summary>"
               f"<ul class=\"files\">{''.join(files)}</ul></details>") if files else ""
    derived = (f"<p class=\"none\">derived from the first user message of <code>{esc(task['derived_from'])}</code></p>"
               if task.get("derived_from") else "")
    return (f"<div class=\"task\"><p><code>{esc(task['source'])}/{esc(task['name'])}</code></p>{derived}"
            f"{_fold(task['instruction'] or '', 'instruction')}{meta}{listing}</div>")


def compare_url(a: str, b: str, q: Query) -> str:
    return url("/compare", {**q.params(), "a": a, "b": b})


def _rollouts(t: dict, q: Query, link, standalone: bool) -> str:
    rows = t.get("rollouts") or []
    if not rows:
        return "<p class=\"none\">none</p>"
    return "<table class=\"rollouts list\"><thead><tr><th>trajectory</th><th>trial</th><th class=\"n\">turns</th>" \
           "<th class=\"n\">reward</th><th>exception</th><th>filter</th><th></th></tr></thead><tbody>" + "".join(
        f"<tr><td><a href=\"{link(r['trajectory_id'])}\"><code>{esc(r['trajectory_id'])}</code></a></td>"
        f"<td>{esc(r['trial_name'])}</td><td class=\"n\">{esc(r['n_assistant_turns'])}</td><td class=\"n\">{_reward(r)}</td>"
        f"<td>{esc(r['exception_type'])}</td><td>{_status(r)}</td>"
        + ("<td></td></tr>" if standalone else
           f"<td><a class=\"compare\" href=\"{compare_url(t['trajectory_id'], r['trajectory_id'], q)}\">compare side by side</a></td></tr>")
        for r in rows) + "</tbody></table>"


def training_html(export: dict | None, tokenizer) -> str:
    """The trajectory's SFT export row as LLaMA-Factory renders it (its template's text, piece by piece),
    the trained (label) pieces marked, with their tokens when the tokenizer is here."""
    if export is None:
        return "<p class=\"none\">in no SFT export</p>"
    from tracelake.export.sharegpt import SharegptRow
    from tracelake.export.templates import TEMPLATES, render_segments

    template = export.get("template")
    if template not in TEMPLATES:
        return f"<p class=\"none\">template {esc(template)} is not one tracelake renders</p>"
    row = SharegptRow(system=export["system"] or "", conversations=list(export["conversations"]), merged=0, trimmed=0)
    segments = render_segments(row, TEMPLATES[template])
    counts = ([len(e.ids) for e in tokenizer[1].encode_batch([seg.text for seg in segments], add_special_tokens=False)]
              if tokenizer else None)
    trained = sum(n for n, seg in zip(counts or [], segments) if seg.trained)
    parts = []
    for k, seg in enumerate(segments):
        tok = f"{counts[k]:,} tokens" if counts else ""
        what = "trained" if seg.trained else "prompt (not trained)"
        parts.append(f"<span class=\"seg {'label' if seg.trained else 'prompt'}\" title=\"{esc(seg.role)}: {what} {tok}\">"
                     f"{text_html(seg.text)}</span>")
    total = f"{export['n_tokens']:,} tokens, of which {trained:,} trained" if counts else f"{export['n_tokens']:,} tokens"
    return (f"<p>Row of <code>{esc(export['dataset_id'])}</code> (sft_{esc(export['scale'])}), template "
            f"<code>{esc(template)}</code>, LLaMA-Factory's default supervised mode: {total}. "
            "<span class=\"seg label\">highlighted</span> text is in the labels.</p>"
            f"<details class=\"training\"><summary>the rendering, {len(segments):,} pieces</summary>"
            f"<pre class=\"training\">{''.join(parts)}</pre></details>")


def trace_page(t: dict, q: Query, *, label: str, tokenizer=None) -> str:
    return page(f"{t['trajectory_id']} · tracelake view", trace_body(t, q, tokenizer=tokenizer), label=label)


def trace_body(t: dict, q: Query, *, tokenizer=None, standalone: bool = False) -> str:
    """A trajectory's page content. `standalone` (an exported file): links to other trajectories are
    anchors in the same file, and nothing links back to the server."""
    def link(trajectory_id: str) -> str:
        return f"#t-{esc(trajectory_id)}" if standalone else trace_url(trajectory_id, q)

    back = url("/", {**q.params(), "open": t["trajectory_id"]}) + f"#r-{esc(t['trajectory_id'])}"
    outcome = [("result", esc(t["result"])), ("reward", esc(t["reward"])),
               ("exception_type", esc(t["exception_type"])), ("timed out", "yes" if t["timed_out"] else "no")]
    facts = [("source", esc(t["source"])), ("task", esc(t["task"])), ("trace_source", esc(t["trace_source"])),
             ("trial", esc(t["trial_name"])), ("run", esc(t["run_id"])),
             ("episode", f"{esc(t['episode'])}" + (f" of {esc(t['n_episodes'])}" if t["n_episodes"] else "")),
             ("agent / model", f"{esc(t['agent'])} / {esc(t['model'])}"), ("date", esc(t["date"])),
             ("messages", esc(t["n_messages"])), ("assistant turns", esc(t["n_assistant_turns"])),
             ("tokens", esc(t["n_tokens"])), ("chars", esc(t["n_chars"]))]
    tasks = "".join(_task(task) for task in t["tasks"]) or "<p class=\"none\">no task row</p>"
    back = "" if standalone else f"<p class=\"back\"><a href=\"{back}\">« results</a></p>"
    return f"""{back}
<h1><code{'' if standalone else ' id="tid"'}>{esc(t['trajectory_id'])}</code> {esc(t['source'])} / {esc(t['task'])}</h1>
<div class="cols"><div>{_kv(facts)}</div><div><h2>Harbor result</h2>{_kv(outcome)}
<h2>Datasets</h2>{_datasets(t)}</div></div>
{_related(t, link)}
<h2>Other rollouts of this task</h2>{_rollouts(t, q, link, standalone)}
<h2>Task</h2>{tasks}
<h2>Messages <button type="button" class="expand-all">expand all</button></h2>
<div class="messages">{messages_html(t['messages'], t.get('turn_tokens'))}</div>
<h2>What the model learns (LLaMA-Factory)</h2>{training_html(t.get('export'), tokenizer)}"""


def compare_page(a: dict, b: dict, q: Query, *, label: str) -> str:
    """Two rollouts side by side: their facts, outcome and messages in two columns."""
    def side(t: dict, name: str) -> str:
        facts = [("trajectory", f"<a href=\"{trace_url(t['trajectory_id'], q)}\"><code>{esc(t['trajectory_id'])}</code></a>"),
                 ("trial", esc(t["trial_name"])), ("assistant turns", esc(t["n_assistant_turns"])),
                 ("tokens", esc(t["n_tokens"])), ("reward", esc(t["reward"])),
                 ("exception_type", esc(t["exception_type"])), ("filter", _status(t) or "not filtered")]
        return (f"<div class=\"side side-{name}\"><h2>{name.upper()}</h2>{_kv(facts)}"
                f"<div class=\"messages\">{messages_html(t['messages'], t.get('turn_tokens'))}</div></div>")

    same = a["task_id"] == b["task_id"]
    head = (f"<p class=\"back\"><a href=\"{trace_url(a['trajectory_id'], q)}\">« {esc(a['trajectory_id'])}</a></p>"
            f"<h1>Compare: {esc(a['source'])} / {esc(a['task'])}"
            + ("" if same else f" and {esc(b['source'])} / {esc(b['task'])} (another task)") + "</h1>"
            "<p><button type=\"button\" class=\"expand-all\">expand all</button></p>")
    return page(f"compare {a['trajectory_id']} {b['trajectory_id']} · tracelake view",
                f"{head}<div class=\"compare\">{side(a, 'a')}{side(b, 'b')}</div>", label=label)


def not_found(message: str, *, label: str) -> str:
    return page("not found · tracelake view", f"{error_line(message)}<p><a href=\"/\">« results</a></p>", label=label)
