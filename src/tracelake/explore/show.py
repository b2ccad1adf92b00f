"""`tracelake show ID`: one trajectory, found by its id or a unique prefix of it (6+ hex, like git),
rendered for a terminal (roles, <think> blocks dimmed, long tool or terminal output folded) or as JSON.
Every value of the row prints as it is (`core.ui.literal`): no markup of its own, controls visible.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import duckdb
import orjson
from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from tracelake.core.errors import BadInput
from tracelake.core.ids import MIN_PREFIX
from tracelake.core.ui import json_for_terminal, literal, printable

FOLD_LINES = 12  # a message longer than this shows its first and last FOLD_LINES // 2 lines
_HEX = re.compile(r"^[0-9a-f]+$")
_THINK = re.compile(r"(<think>.*?</think>)", re.DOTALL)
ROLE_STYLE = {"system": "magenta", "user": "cyan", "assistant": "green", "tool": "yellow"}


def find_trajectory(lake: Path | str, ref: str) -> dict[str, Any]:
    """The trajectory row whose id is `ref` or starts with it (at least 6 hex digits, unique)."""
    ref = ref.strip().lower()
    if not _HEX.match(ref) or len(ref) < MIN_PREFIX:
        raise BadInput(f"show: {ref!r} is not a trajectory id or a prefix of at least {MIN_PREFIX} hex digits")
    files = sorted(str(p) for p in Path(lake).glob("trajectories/*/trajectories/part-*.parquet"))
    if not files:
        raise BadInput(f"{lake} has no trajectories: run `dvc repro` (or `tracelake ingest`)")
    rel = duckdb.connect().read_parquet(files, union_by_name=True)
    hits = (
        rel.filter(
            duckdb.FunctionExpression(
                "starts_with", duckdb.ColumnExpression("trajectory_id"), duckdb.ConstantExpression(ref)
            )
        )
        .limit(11)
        .to_arrow_table()
    )
    ids = hits["trajectory_id"].to_pylist()
    if not ids:
        raise BadInput(f"show: no trajectory id starts with {ref!r}")
    if len(ids) > 1:
        shown = ", ".join(ids[:10]) + (" …" if len(ids) > 10 else "")
        raise BadInput(f"show: {ref!r} is ambiguous ({shown}); give more digits")
    return hits.to_pylist()[0]


def to_json(row: dict[str, Any]) -> bytes:
    return json_for_terminal(orjson.dumps(row, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS, default=str) + b"\n")


def fold(text: str, lines: int = FOLD_LINES) -> str:
    parts = text.split("\n")
    if len(parts) <= lines:
        return text
    head, tail = parts[: lines // 2], parts[-(lines // 2) :]
    return "\n".join([*head, f"… {len(parts) - len(head) - len(tail)} more lines …", *tail])


def headline(row: dict[str, Any]) -> Text:
    """`ID  source / task  (trace_source, N messages, N assistant turns, outcome)`, the values literal."""
    outcome = row.get("exception_type") or (
        f"reward {row['reward']}" if row.get("reward") is not None else "no verifier"
    )
    return Text.assemble(
        literal(row["trajectory_id"], "bold"),
        "  ",
        literal(row["source"]),
        " / ",
        literal(row["task"]),
        "  (",
        literal(row["trace_source"]),
        f", {row['n_messages']} messages, {row['n_assistant_turns']} assistant turns, ",
        literal(outcome),
        ")",
    )


def message_body(role: str, content: str, full: bool) -> Text:
    """A message's text made printable, its <think> blocks dimmed, long pieces folded unless `full`
    (an assistant's own words are never folded)."""
    body = Text()
    for piece in _THINK.split(printable(content)):
        if not piece:
            continue
        if piece.startswith("<think>") and piece.endswith("</think>"):
            body.append(piece if full else fold(piece), style="dim italic")
        else:
            body.append(piece if full or role == "assistant" else fold(piece))
    return body


def render(row: dict[str, Any], console: Console, full: bool = False) -> None:
    console.print(headline(row))
    for i, m in enumerate(row["messages"]):
        role, content = m["role"], m["content"] or ""
        title = Text.assemble(f"{i} ", literal(role))
        style = ROLE_STYLE.get(role, "white")
        console.print(Panel(message_body(role, content, full), title=title, title_align="left", border_style=style))
