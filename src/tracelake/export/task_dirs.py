"""The Harbor task directories of an RL export, made from its task table when a run needs them.

SkyRL's Harbor entrypoint trains on a directory of task directories (`data.train_data`). export_rl
writes the same tasks as a table (tasks/*.parquet: `path`, `task_binary`, archives normalized), and
`tracelake train rl` extracts that table once per dataset, before the run starts:

    <train.runs>/<dataset id>/harbor/<source>.<name>/   instruction.md, task.toml, environment/, tests/

Why not in the export: DVC walks and hashes every file of a stage's outputs on every `dvc status`
and `dvc repro`. 3,333 tasks are about 13K directories and 16K files, which cost 10-20 s of every
status of a 20K-row project and most of export_rl's first run; a table of the same bytes costs
nothing. The directory is named by the dataset's content id, so it never holds another dataset's
tasks: when every task directory is there it is reused, else it is built whole beside and swapped
in (core/outputs.py output_dir), so a killed extraction leaves the previous state. Two runs of one
dataset starting together take turns (a lock file beside it): the second finds it extracted.
"""

from __future__ import annotations

import fcntl
from pathlib import Path, PurePosixPath
from typing import Any

from tracelake.core.errors import BadInput
from tracelake.core.outputs import output_dir
from tracelake.core.tables import open_parquet
from tracelake.core.ui import progress
from tracelake.ingest.params import ArchiveParams
from tracelake.ingest.task_archive import extract_table

HARBOR_DIR = "harbor"  # under <train.runs>/<dataset id>/: what route harbor's data.train_data names


def harbor_dir(run_root: str) -> str:
    """Where a dataset's task directories go: `<run_root>/harbor`, run_root being
    `<train.runs>/<dataset id>` (the directory of its checkpoints and trials)."""
    return str(PurePosixPath(run_root) / HARBOR_DIR)


def task_tables(export_dir: Path, manifest: dict[str, Any]) -> list[Path]:
    """The export's task table shards (manifest counts.files.tasks)."""
    return [export_dir / f for f in manifest["counts"]["files"]["tasks"]]


def task_paths(export_dir: Path, manifest: dict[str, Any]) -> list[str]:
    """Every task directory's name, in table order."""
    paths: list[str] = []
    for table in task_tables(export_dir, manifest):
        paths += open_parquet(table).read(columns=["path"]).column("path").to_pylist()
    return paths


def extracted(dest: Path, expected: list[str]) -> bool:
    """Whether dest holds exactly the expected task directories (each with its instruction.md)."""
    if not dest.is_dir():
        return False
    present = sorted(p.name for p in dest.iterdir())
    return present == sorted(expected) and all((dest / p / "instruction.md").is_file() for p in expected)


def describe(export_dir: Path, manifest: dict[str, Any], dest: Path) -> str:
    """One line for a dry run: what would be extracted where, or that it is there."""
    n = manifest["counts"]["task_dirs"]["count"]
    if extracted(dest, task_paths(export_dir, manifest)):
        return f"{n} Harbor task directories in {dest.as_posix()} (extracted before: reused)"
    return (
        f"{n} Harbor task directories -> {dest.as_posix()} (extracted from "
        f"{export_dir.as_posix()}/tasks/ when the run starts, once per dataset)"
    )


def materialize(
    export_dir: Path, manifest: dict[str, Any], dest: Path, limits: ArchiveParams | None = None
) -> tuple[int, bool]:
    """Extract every task of the export's task table into dest, unless it is there already.
    Returns (task directories, whether they were extracted now). `limits`: the caps on one task
    (ingest.archive; the tasks passed them at ingest)."""
    expected = task_paths(export_dir, manifest)
    count = manifest["counts"]["task_dirs"]["count"]
    if len(expected) != count:
        raise BadInput(
            f"{export_dir}: the task table holds {len(expected)} tasks, its manifest says {count}: "
            f"run `dvc repro export_rl`"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        if extracted(dest, expected):
            return count, False
        with output_dir(dest, clean_siblings=False) as tmp, progress("harbor task directories") as (total, advance):
            total(count)
            for table in task_tables(export_dir, manifest):
                extract_table(table, tmp, limits=limits or ArchiveParams(), advance=advance)
    return count, True
