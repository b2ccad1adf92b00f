"""The shared ends of every stages/*.py script: `run_stage` (user errors as one line, Ctrl-C names
the outputs left unwritten, a Bug keeps its traceback) and `write_metrics` (the DVC metrics file).
Reading the command line and params.yaml is `tracelake.params.stage_args`."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any, Callable

from tracelake.core.errors import Bug, TracelakeError
from tracelake.core.lake import unfinished_outputs, write_json


def run_stage(main: Callable[[], None]) -> None:
    """Run a stage's main: user errors as one line (exit 2); Ctrl-C names the outputs left unwritten
    (exit 130); a Bug keeps its traceback (exit 70)."""
    try:
        main()
    except TracelakeError as e:
        print(f"tracelake: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print(f"tracelake: {interrupted_message()}", file=sys.stderr)
        sys.exit(130)
    except Bug:
        traceback.print_exc()
        print("tracelake: this is a bug in tracelake (an internal check failed); please report it with "
              "the traceback above", file=sys.stderr)
        sys.exit(Bug.exit_code)


def interrupted_message() -> str:
    """What an interrupted run left: every output it had started is unwritten (the previous version,
    if any, is untouched)."""
    left = unfinished_outputs()
    if not left:
        return "interrupted before any output was started; nothing was written"
    return (f"interrupted; not written (the previous version, if any, is unchanged): "
            f"{', '.join(str(p) for p in left)}")


def write_metrics(path: Path | str, value: Any) -> Path:
    """The tail of every stage: its counts as a DVC metrics file (sorted, stable JSON)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, value)
    return path
