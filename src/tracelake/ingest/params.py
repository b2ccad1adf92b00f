"""params.yaml `ingest` and `sources` (one ingest stage per source)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from tracelake.core.params import Invalid, Section

Format = Literal["harbor", "traces"]   # harbor: job directories; traces: Parquet/JSON/JSONL trace tables


def _source_selection(value: Any) -> Any:
    if value == "all" or (isinstance(value, list) and value and all(isinstance(s, str) for s in value)):
        return value
    raise Invalid(f'must be "all" or a non-empty list of source names, got {value!r}')


SourceSelection = Annotated[Literal["all"] | list[str], BeforeValidator(_source_selection)]
"""Which sources a stage draws on: "all", or a list of names under `sources` (the whole file checks
the names: tracelake/params.py)."""


class IngestParams(Section):
    strict: bool = False   # true: the first reject stops the stage with a one-line error
    workers: Annotated[int, Field(ge=0)] = 0   # processes parsing trace tables, Harbor trials and task directories; 0: one per core (same bytes either way)
    cache: str = ".tracelake/cache/ingest"      # parsed trace table files by content: unchanged files are not parsed again


class SourceParams(Section):
    format: Format
    path: str
    tasks: str             # task directories or a (path, task_binary) table
