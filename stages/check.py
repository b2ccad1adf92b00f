"""Stage `check`: params.yaml checked whole whenever it changes: every section, and the checks that
span sections (a mix weight names a source, select.score a configured scorer, ...). Each other stage
checks the sections it reads; this one catches what no stage reads, such as a misspelled top-level
key, which DVC would otherwise let pass as "up to date". Run alone (`python -m stages check`), it
names what DVC cannot: a source without `tasks`, which stops DVC's own parsing of dvc.yaml."""

from __future__ import annotations

from tracelake.core.stage import Context, Result, Stage
from tracelake.params import SECTION_HOMES


def run(ctx: Context) -> Result:
    return Result(summary=[f"check: params.yaml: {len(SECTION_HOMES)} sections, all valid"])


STAGE = Stage("check", __doc__, run, params=(), untracked=tuple(SECTION_HOMES), deps=("params.yaml",))
