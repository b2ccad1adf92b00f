"""params.yaml `ingest` and `sources` (one ingest stage per source)."""

from __future__ import annotations

from pathlib import PurePath
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from tracelake.core.params import Invalid, Section

Format = Literal["harbor", "traces"]   # harbor: job directories; traces: Parquet/JSON/JSONL trace tables


def _source_selection(value: Any) -> Any:
    if value == "all" or (isinstance(value, list) and value and all(isinstance(s, str) for s in value)):
        return value
    raise Invalid(f'must be "all" or a non-empty list of source names, got {value!r}')


SourceSelection = Annotated[Literal["all"] | list[str], BeforeValidator(_source_selection)]
"""Which sources a stage draws on: "all", or a list of names under `sources` (the whole file checks
the names: tracelake/params.py)."""


MAX_MEMBERS = 100_000
MAX_TOTAL_BYTES = 2 << 30   # 2 GiB


class ArchiveParams(Section):
    """Caps on one task (a task_binary read at ingest or extract, or a task directory): past either, the
    task is rejected `archive_too_large` as soon as the cap is crossed, before the rest is read."""

    max_members: Annotated[int, Field(ge=1)] = MAX_MEMBERS           # files and directories in one task
    max_total_bytes: Annotated[int, Field(ge=1)] = MAX_TOTAL_BYTES   # the task's file contents, uncompressed


class IngestParams(Section):
    strict: bool = False   # true: the first reject stops the stage with a one-line error
    workers: Annotated[int, Field(ge=0)] = 0   # processes parsing trace tables, Harbor trials and task directories; 0: one per core (same bytes either way)
    cache: str = ".tracelake/cache/ingest"      # parsed trace table files by content: unchanged files are not parsed again
    archive: ArchiveParams = Field(default_factory=ArchiveParams)   # caps on one task's archive or directory (zip bombs)


class SourceParams(Section):
    format: Format
    path: str
    # task directories, a (path, task_binary) table, or `path` itself: a trace table published without
    # task directories, whose tasks are derived from its traces (rule derived_task_v1). The key is
    # required: DVC cannot interpolate a missing ${item.tasks} into the ingest stage's deps.
    tasks: str

    @model_validator(mode="before")
    @classmethod
    def _tasks_named(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("tasks") is None and isinstance(data.get("path"), str):
            raise Invalid(f"is required: task directories, a (path, task_binary) table, or `tasks: "
                          f"{data['path']}` (the trace table itself) to derive the tasks from its traces",
                          at=("tasks",))
        return data

    @property
    def derives_tasks(self) -> bool:
        """True when the source names its own traces as its tasks: they are derived from the traces."""
        return PurePath(self.tasks) == PurePath(self.path)
