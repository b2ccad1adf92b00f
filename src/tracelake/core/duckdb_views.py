"""DuckDB over the lake: views on the Parquet tables of the configured sources, read in place."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import duckdb

from tracelake.core.lake import Lake
from tracelake.core.outputs import read_manifest


def connect(
    lake: Path | str,
    sources: Iterable[str],
    tables: Iterable[str] = ("trajectories", "tasks"),
    threads: int | None = None,
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with one view per table over every source's file."""
    con = duckdb.connect()
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    sources = list(sources)
    for table in tables:
        con.read_parquet(Lake(lake).table_files(table, sources)).create_view(table)
    return con


def input_versions(lake: Path | str, table: str, sources: Iterable[str]) -> dict[str, str]:
    """source -> version id of each input directory (recorded in the consuming stage's manifest)."""
    return {s: read_manifest(Lake(lake).table(table, s))["version_id"] for s in sources}
