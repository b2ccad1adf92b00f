"""Terminal output: progress bars on stderr (only on a terminal) and one-line summaries."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable, Iterator

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

err = Console(stderr=True, highlight=False)
# On a terminal, its width; in a pipe or a log, wide enough that tables never truncate numbers.
out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)


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
