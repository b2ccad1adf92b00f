"""params.yaml `ingest` and `sources` (one ingest stage per source)."""

from __future__ import annotations

from pathlib import PurePath
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from tracelake.core.params import Invalid, Name, Section

Format = Literal["harbor", "traces"]  # harbor: job directories; traces: Parquet/JSON/JSONL trace tables


def _source_selection(value: Any) -> Any:
    if value == "all" or (isinstance(value, list) and value and all(isinstance(s, str) for s in value)):
        return value
    raise Invalid(f'must be "all" or a non-empty list of source names, got {value!r}')


SourceSelection = Annotated[Literal["all"] | list[str], BeforeValidator(_source_selection)]
"""Which sources a stage draws on: "all", or a list of names under `sources` (the whole file checks
the names: tracelake/params.py)."""


MAX_MEMBERS = 100_000
MAX_TOTAL_BYTES = 2 << 30  # 2 GiB


class ArchiveParams(Section):
    """Caps on one task (a task_binary read at ingest or extract, or a task directory): past either, the
    task is rejected `archive_too_large` as soon as the cap is crossed, before the rest is read."""

    max_members: Annotated[int, Field(ge=1)] = MAX_MEMBERS  # files and directories in one task
    max_total_bytes: Annotated[int, Field(ge=1)] = MAX_TOTAL_BYTES  # the task's file contents, uncompressed


class IngestParams(Section):
    strict: bool = False  # true: the first reject stops the stage with a one-line error
    cache: str = ".tracelake/cache/ingest"  # parsed trace table files by content: unchanged files are not parsed again
    archive: ArchiveParams = Field(default_factory=ArchiveParams)  # caps on one task's archive or directory (zip bombs)


class SourceParams(Section):
    """One source: dvc.yaml's ingest stage iterates params.yaml's `sources` itself (`foreach:
    ${sources}`); the `scan` stage lists the files under its `path` and `tasks` (ingest/sources.py),
    so every source names its `tasks`."""

    format: Format
    path: str
    # task directories or a (path, task_binary) table; `path` itself: a trace table published
    # without task directories, whose tasks are derived from its traces (derived_task_v2)
    tasks: str

    @model_validator(mode="before")
    @classmethod
    def _tasks_required(cls, data: Any) -> Any:
        # say what to write, in the words of this file
        if isinstance(data, dict) and data.get("tasks") is None:
            path = data.get("path")
            own = f"tasks: {path}" if isinstance(path, str) else "its own path"
            raise Invalid(
                f": required: its task directories or (path, task_binary) table, or, when its tasks are "
                f"derived from its traces, the traces' own path ({own})",
                at=("tasks",),
            )
        return data

    @property
    def derives_tasks(self) -> bool:
        """True when the source has no tasks of its own (`tasks` is its `path`): they are derived from
        its traces."""
        return PurePath(self.tasks) == PurePath(self.path)


def _sources(value: Any) -> Any:
    if not isinstance(value, dict) or not value:
        raise Invalid("must map at least one source name to its settings")
    return value


SECTIONS: dict[str, tuple[Any, Any]] = {
    "ingest": (IngestParams, Field(default_factory=IngestParams)),
    "sources": (Annotated[dict[Name, SourceParams], BeforeValidator(_sources)], ...),
}
