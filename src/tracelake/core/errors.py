"""Errors, named by what to do about them.

- `UserError` (BadParams, BadInput): fix the command line, params.yaml or the input, then run
  again. Printed as one line, `tracelake: <message>`, exit 2, no traceback.
- `RejectedInput`: one input could not become a row and `--strict` asked to stop there. Without
  --strict the same input is a rejects row and the run goes on. One line, exit 2.
- `SchemaViolation`: a table does not match its declared schema: a foreign or damaged file (one
  line, exit 2), or, when tracelake wrote it, a bug.
- `Bug`: an invariant of tracelake itself broke (`check`): report it with the traceback, exit 70.
  Raised by `check(condition, message)`, never by `assert`, so `python -O` cannot switch it off.
"""

from __future__ import annotations


class TracelakeError(Exception):
    """A user-facing error: printed as `tracelake: <message>` with exit code 2, no traceback."""

    exit_code = 2


class UserError(TracelakeError):
    """Something the user gave is wrong; nothing was changed. Fix it and run again."""


class BadInput(UserError):
    """An input file or directory is unusable as a whole (not found, wrong kind)."""


class BadParams(UserError):
    """params.yaml or a command-line option is wrong; nothing was done."""


class RejectedInput(TracelakeError):
    """--strict was given and an input had to be rejected."""


class SchemaViolation(TracelakeError):
    """A table does not match its declared schema (a bug or a foreign file, never silently fixed)."""


class Bug(Exception):
    """An internal invariant failed: tracelake itself is wrong. Not a TracelakeError: it keeps its
    traceback, because that is what a bug report needs."""

    exit_code = 70  # EX_SOFTWARE


def check(condition: object, message: str) -> None:
    """Raise Bug(message) unless `condition` holds: an invariant that `python -O` cannot disable."""
    if not condition:
        raise Bug(message)
