"""Stage `check`: params.yaml checked whole whenever it changes: every section, the checks that span
sections (a mix weight names a source, select.score a configured scorer, ...), and dvc.yaml listing
the same sources. Each other stage checks the sections it reads; this one catches what no stage
reads, such as a misspelled top-level key, which DVC would otherwise let pass as "up to date"."""

from __future__ import annotations

from tracelake.core.stage import Context, Result, Stage
from tracelake.params import SECTION_HOMES


def run(ctx: Context) -> Result:
    return Result(
        summary=[f"check: params.yaml: {len(SECTION_HOMES)} sections, all valid; dvc.yaml lists every source"]
    )


STAGE = Stage("check", __doc__, run, params=(), untracked=tuple(SECTION_HOMES), deps=("params.yaml",))
