"""Terminal output: progress bars on stderr (only on a terminal) and one-line summaries.

Values from data (task names, messages, sources, error messages that quote them) come from sandboxes
where agents ran anything, so they reach the terminal only as text:
- `printable(text)` is the one escaping function: every control character shows as a visible escape
  (`\\x1b`, `\\x07`, `\\x9b`, `\\u202e`), so an OSC 8 hyperlink, an OSC 0 window title, a cursor move,
  a C1 control or a bidirectional override is read, never obeyed; \\n and \\t stay, \\r\\n reads as \\n,
  and an SGR sequence (ESC[...m, a captured terminal's colours) is dropped, its text kept.
- `literal(value)` is that text as a rich Text: printed as it is, no markup (`[/bold]`, `[link=...]`)
  or emoji code of the data interpreted. Data goes into tables, panels and lines as a `literal`,
  never inside a markup string.
- `terminal_console` (`out`, `err`) removes any control character still left in printed text, so
  the only escape sequences tracelake writes are its own styles (and progress bars' cursor moves).
- `json_for_terminal` gives JSON the same guarantee: the controls JSON does not escape itself (DEL,
  C1, bidirectional overrides) as \\u escapes, the same JSON value.
"""

from __future__ import annotations

import re
import sys
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.segment import Segment
from rich.text import Text

# C0 but \n and \t, DEL, C1, the bidirectional marks, overrides and isolates, lone surrogates
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_CONTROL = re.compile(f"[{_CONTROLS}]")
_ESCAPED = re.compile(f"\r\n|\x1b\\[[0-9;:]*m|[{_CONTROLS}]")  # CRLF, an SGR sequence, one control
_JSON_UNESCAPED = re.compile(rb"\x7f|\xc2[\x80-\x9f]|\xe2\x80[\x8e\x8f\xaa-\xae]|\xe2\x81[\xa6-\xa9]")


def _visible(match: re.Match) -> str:
    found = match.group()
    if found == "\r\n":
        return "\n"
    if len(found) > 1:  # an SGR sequence: colours only
        return ""
    code = ord(found)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with every control character shown as an escape (\\x1b, \\u202e) and SGR colours
    dropped: safe on any terminal, and every character of the data still visible."""
    return _ESCAPED.sub(_visible, text) if _ESCAPED.search(text) else text


def literal(value: Any, style: str = "") -> Text:
    """A value from data, as rich Text printed as it is: no markup, no emoji code, controls visible."""
    return Text(printable(value if isinstance(value, str) else str(value)), style=style)


def literals(values: Iterable[Any]) -> list[Text]:
    """Table cells from data (None as an empty cell)."""
    return [literal("" if v is None else v) for v in values]


def json_for_terminal(data: bytes) -> bytes:
    """UTF-8 JSON with DEL, C1 controls and bidirectional marks written as \\u escapes (JSON escapes
    the other controls itself): the same value, and nothing a terminal would obey. Such characters
    occur only inside strings, and their UTF-8 bytes are never part of another character."""
    return _JSON_UNESCAPED.sub(lambda m: b"\\u%04x" % ord(m.group().decode()), data)


class TerminalConsole(Console):
    """A rich Console that writes no control character of the text it prints: what `printable` left
    (it makes them visible) and what reached a print without it are removed from each segment of
    text. Control segments (rich's own cursor moves) and styles are rich's, so they stay."""

    def render(self, renderable, options=None) -> Iterator[Segment]:
        for segment in super().render(renderable, options):
            if segment.control or not _CONTROL.search(segment.text):
                yield segment
            else:
                yield Segment(_CONTROL.sub("", segment.text), segment.style)


def terminal_console(**kwargs) -> Console:
    """A TerminalConsole (rich Console arguments): any console that prints values from data."""
    return TerminalConsole(**kwargs)


err = terminal_console(stderr=True, highlight=False)
# On a terminal, its width; in a pipe or a log, wide enough that tables never truncate numbers.
out = terminal_console(highlight=False, width=None if sys.stdout.isatty() else 160)


def _bar(*extra: TextColumn) -> Progress:
    """Rendered on a terminal, nothing in logs (DVC, CI)."""
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        *extra[:1],
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        *extra[1:],
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )


@contextmanager
def progress(description: str) -> Iterator[tuple[Callable[[int], None], Callable[[int], None]]]:
    """Yield (set_total, advance). Renders a bar on a terminal, nothing in logs (DVC, CI)."""
    with _bar() as bar:
        task = bar.add_task(description, total=None)
        yield (lambda total: bar.update(task, total=total)), (lambda n=1: bar.advance(task, n))


@contextmanager
def progress_status(description: str) -> Iterator[tuple[Callable[[int], None], Callable[[int, object], None]]]:
    """Yield (set_total, advance(n, status)): `progress` with the rate and a status text (e.g. cache
    hits and failures) that each advance updates."""
    with _bar(TextColumn("{task.fields[rate]}"), TextColumn("{task.fields[status]}")) as bar:
        task = bar.add_task(description, total=None, rate="", status="")

        def advance(n: int, status: object) -> None:
            bar.advance(task, n)
            speed = bar.tasks[0].speed
            bar.update(task, status=str(status), rate=f"{speed:.1f}/s" if speed else "")

        yield (lambda total: bar.update(task, total=total)), advance
