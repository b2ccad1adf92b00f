"""One trajectory's page of `tracelake view`, as values for templates/trace_body.html: its messages
(assistant turns paired with the observation that answers them, <think> and long blocks folded), its
task with the files of its archive, the datasets it is in, its other traces and rollouts, and its SFT
export row as LLaMA-Factory renders it. Nothing here writes HTML: the templates do, autoescaped."""

from __future__ import annotations

import json
import re
from typing import Any

from tracelake.explore.view.ansi import strip_ansi
from tracelake.explore.view.db import Query
from tracelake.explore.view.render import render, trace_url, url

FOLD_LINES = 12  # an observation or message longer than this (or FOLD_CHARS) is folded
FOLD_CHARS = 2000
_THINK = re.compile(r"(<think>.*?(?:</think>|\Z))", re.DOTALL)
TASK_FILE_BYTES = 20_000  # a task file shown inline: text, at most this long
TASK_FILES_BYTES = 400_000  # and at most this much of them a task
TASK_MEMBERS = 2_000  # members looked at (a task page never walks a huge archive)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def fold(text: str, what: str) -> dict[str, Any]:
    """Text as a block: a <pre>, or for a long one a closed <details> whose summary is its first line."""
    lines = text.split("\n")
    if len(lines) <= FOLD_LINES and len(text) <= FOLD_CHARS:
        return {"kind": "pre", "text": text}
    first = next((line for line in strip_ansi(text).split("\n") if line.strip()), "")[:120]
    return {"kind": "fold", "what": what, "lines": len(lines), "chars": len(text), "first": first, "text": text}


def blocks(text: str, fold_rest: bool) -> list[dict[str, Any]]:
    """A message's text as blocks, each <think> block a closed <details>, the rest folded when long
    (`fold_rest`) or shown whole."""
    out = []
    for piece in _THINK.split(text):
        if not piece:
            continue
        if piece.startswith("<think>"):
            inner = piece[len("<think>") :].removesuffix("</think>")
            out.append({"kind": "think", "text": inner, "words": len(inner.split())})
        else:
            out.append(fold(piece, "message") if fold_rest else {"kind": "pre", "text": piece})
    return out


def tool_calls(text: str) -> list[str]:
    """The commands an assistant turn issued (terminus-2's JSON `commands[].keystrokes`), else []."""
    body = _THINK.sub("", text).strip()
    start = body.find("{")
    if start < 0:
        return []
    try:
        parsed = json.loads(body[start : body.rfind("}") + 1])
    except ValueError:
        return []
    commands = parsed.get("commands") if isinstance(parsed, dict) else None
    if not isinstance(commands, list):
        return []
    return [str(c.get("keystrokes", "")) for c in commands if isinstance(c, dict)]


def message_items(messages: list[dict], tokens: list[int] | None = None) -> list[dict[str, Any]]:
    """Every message in order (with its tokens when `tokens` gives them). An assistant turn that called
    tools is paired with the observation that answers it (the next message: a tool result, or the
    terminal output the harness sent back as user): its commands, then that output, folded when long."""

    def count(position: int) -> int | None:
        return tokens[position] if tokens else None

    out, i = [], 0
    while i < len(messages):
        m = messages[i]
        role, content = m.get("role") or "", m.get("content") or ""
        item = {"position": i, "role": role, "tokens": count(i), "pair": None}
        if role != "assistant":
            out.append({**item, "blocks": blocks(content, fold_rest=True)})
            i += 1
            continue
        calls = tool_calls(content)
        following = messages[i + 1].get("role") if i + 1 < len(messages) else None
        obs = messages[i + 1] if following == "tool" or (calls and following == "user") else None
        if calls or obs is not None:
            item["pair"] = {
                "calls": [c.rstrip() for c in calls],
                "obs": None
                if obs is None
                else {
                    "position": i + 1,
                    "role": obs.get("role"),
                    "tokens": count(i + 1),
                    "blocks": blocks(obs.get("content") or "", fold_rest=True),
                },
            }
        out.append({**item, "blocks": blocks(content, fold_rest=False)})
        i += 2 if obs is not None else 1
    return out


def messages_html(messages: list[dict], tokens: list[int] | None = None) -> str:
    """The messages as HTML (templates/macros.html's `messages`)."""
    return render("messages.html", items=message_items(messages, tokens))


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


def _task(task: dict) -> dict[str, Any]:
    """A task: its instruction, task.toml (as its JSON), its files, the small text ones readable."""
    files = task_files(task.get("task_binary"))
    return {
        "source": task["source"],
        "name": task["name"],
        "derived_from": task.get("derived_from"),
        "instruction": fold(task["instruction"] or "", "instruction"),
        "metadata_json": task.get("metadata_json"),
        "files": files,
        "n_files": task.get("n_files") or len(files),
    }


def training(export: dict | None, tokenizer) -> dict[str, Any]:
    """The trajectory's SFT export row as LLaMA-Factory renders it (its template's text, piece by piece),
    the trained (label) pieces marked, with their tokens when the tokenizer is here; `none` says why
    there is nothing to show."""
    if export is None:
        return {"none": "in no SFT export"}
    from tracelake.tokens.sharegpt import SharegptRow
    from tracelake.tokens.templates import TEMPLATES, render_segments

    template = export.get("template")
    if template not in TEMPLATES:
        return {"none": f"template {_text(template)} is not one tracelake renders"}
    row = SharegptRow(system=export["system"] or "", conversations=list(export["conversations"]), merged=0, trimmed=0)
    segments = render_segments(row, TEMPLATES[template])
    counts = (
        [len(e.ids) for e in tokenizer[1].encode_batch([seg.text for seg in segments], add_special_tokens=False)]
        if tokenizer
        else None
    )
    trained = sum(n for n, seg in zip(counts or [], segments) if seg.trained)
    pieces = []
    for k, seg in enumerate(segments):
        tok = f"{counts[k]:,} tokens" if counts else ""
        what = "trained" if seg.trained else "prompt (not trained)"
        pieces.append(
            {"css": "label" if seg.trained else "prompt", "title": f"{seg.role}: {what} {tok}", "text": seg.text}
        )
    total = (
        f"{export['n_tokens']:,} tokens, of which {trained:,} trained" if counts else f"{export['n_tokens']:,} tokens"
    )
    return {
        "none": None,
        "dataset_id": export["dataset_id"],
        "scale": export["scale"],
        "template": template,
        "total": total,
        "pieces": pieces,
    }


def trace_context(t: dict, q: Query, *, tokenizer=None, standalone: bool = False) -> dict[str, Any]:
    """The values of templates/trace_body.html for a trajectory. `standalone` (an exported file): links
    to other trajectories are anchors in the same file, and nothing links back to the server."""
    params = q.params()

    def link(trajectory_id: str) -> str:
        return f"#t-{trajectory_id}" if standalone else trace_url(trajectory_id, params)

    def linked(rows: list[dict]) -> list[dict]:
        return [{**r, "link": link(r["trajectory_id"])} for r in rows]

    def compare(other: str) -> str | None:
        return None if standalone else url("/compare", {**params, "a": t["trajectory_id"], "b": other})

    episode = _text(t["episode"]) + (f" of {_text(t['n_episodes'])}" if t["n_episodes"] else "")
    facts = [
        ("source", t["source"]),
        ("task", t["task"]),
        ("trace_source", t["trace_source"]),
        ("trial", t["trial_name"]),
        ("run", t["run_id"]),
        ("episode", episode),
        ("agent / model", f"{_text(t['agent'])} / {_text(t['model'])}"),
        ("date", t["date"]),
        ("messages", t["n_messages"]),
        ("assistant turns", t["n_assistant_turns"]),
        ("tokens", t["n_tokens"]),
        ("chars", t["n_chars"]),
    ]
    outcome = [
        ("result", t["result"]),
        ("reward", t["reward"]),
        ("exception_type", t["exception_type"]),
        ("timed out", "yes" if t["timed_out"] else "no"),
    ]
    copies = [
        {
            "scale": scale,
            "dataset_id": dataset_id,
            "what": f"{n} upsampled cop{'y' if n == 1 else 'ies'}" if n else "not selected",
        }
        for scale, (dataset_id, n) in t["copies"].items()
    ]
    return {
        "t": t,
        "standalone": standalone,
        "facts": facts,
        "outcome": outcome,
        "copies": copies,
        "back": url("/", {**params, "open": t["trajectory_id"]}),
        "subagents": linked([r for r in t["related"] if r["subagent"]]),
        "episodes": linked([r for r in t["related"] if not r["subagent"]]),
        "rollouts": [{**r, "compare": compare(r["trajectory_id"])} for r in linked(t.get("rollouts") or [])],
        "tasks": [_task(task) for task in t["tasks"]],
        "items": message_items(t["messages"], t.get("turn_tokens")),
        "training": training(t.get("export"), tokenizer),
    }


def trace_body(t: dict, q: Query, *, tokenizer=None, standalone: bool = False) -> str:
    """A trajectory's page content (see `trace_context`)."""
    return render("trace_body.html", **trace_context(t, q, tokenizer=tokenizer, standalone=standalone))


def side(t: dict, params: dict[str, str]) -> dict[str, Any]:
    """One side of the compare page: the trajectory, its link and its messages."""
    return {
        "t": t,
        "link": trace_url(t["trajectory_id"], params),
        "items": message_items(t["messages"], t.get("turn_tokens")),
    }
