"""Shared entry for stages/*.py: one way to read the command line and params.yaml, and user errors
as one line on stderr with a non-zero exit."""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from .config import Params, load_params
from .errors import TracelakeError


def stage_args(doc: str | None, argv: list[str] | None, key: str | None = None) -> tuple[Params, str | None]:
    """Parse `[KEY] [--params FILE]` and load params.yaml (checked whole, before any work).

    `key` names the stage's positional argument (a `foreach` key such as the source or the scale).
    """
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if key:
        parser.add_argument(key)
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args(argv)
    return load_params(args.params), getattr(args, key) if key else None


def run_stage(main: Callable[[], None]) -> None:
    try:
        main()
    except TracelakeError as e:
        print(f"tracelake: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
