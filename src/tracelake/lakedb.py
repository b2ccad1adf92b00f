"""DuckDB over the lake: views on the Parquet tables of the configured sources, read in place."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import duckdb

from .errors import BadInput
from .lake import read_manifest, table_dir


def table_files(lake: Path | str, table: str, sources: Iterable[str]) -> list[str]:
    """The <lake>/<table>/<source>/<table>.parquet files, each checked to be a finished output."""
    files = []
    for source in sources:
        directory = table_dir(Path(lake), table, source)
        if not (directory / "manifest.json").is_file():
            raise BadInput(f"{directory} is not built: run `dvc repro` (or `tracelake ingest`) first")
        files.append(str(directory / f"{table}.parquet"))
    return files


def connect(lake: Path | str, sources: Iterable[str], tables: Iterable[str] = ("trajectories", "tasks"),
            threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with one view per table over every source's file."""
    con = duckdb.connect()
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    sources = list(sources)
    for table in tables:
        files = table_files(lake, table, sources)
        con.read_parquet(files).create_view(table)
    return con


def input_versions(lake: Path | str, table: str, sources: Iterable[str]) -> dict[str, str]:
    """source -> version id of each input directory (recorded in the consuming stage's manifest)."""
    return {s: read_manifest(table_dir(Path(lake), table, s))["version_id"] for s in sources}
