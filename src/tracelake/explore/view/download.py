"""Download the list's current selection from `tracelake view`: its trajectories, whole, as JSONL or
Parquet (every column of the trajectories table, in the lake's order), or as one self-contained HTML
file (the trajectory pages with their stylesheet inlined, no script, nothing fetched: it opens
anywhere, offline).

The matching ids come from the list's own query; the rows are then read from the trajectories' Parquet
parts directly, in the lake's order, one row group at a time (only groups holding a selected id are
read whole), so an export of 100K trajectories holds one row group in memory, not the selection, and
the same selection always gives the same bytes.
"""

from __future__ import annotations

import os
import tempfile
from importlib import resources
from typing import Iterator

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracelake.core.errors import BadInput, check
from tracelake.explore.view.db import REBUILDING, LakeView, Query, Rebuilding

BATCH = 256
HTML_MAX = 200  # trajectories in one HTML file (each can be megabytes)
FORMATS = {
    "jsonl": "application/x-ndjson",
    "parquet": "application/vnd.apache.parquet",
    "html": "text/html; charset=utf-8",
}


def selected_ids(db: LakeView, query: Query) -> list[str]:
    """The ids the list shows for `query` over all its pages: ranked for a search, else by id."""
    if query.q and query.q.strip():
        rows, _, _, state = db.searched(query)
        if state != "ready":  # never an empty file for a search that could not run
            raise BadInput(f"view: cannot export the search: {state}")
        return [r["trajectory_id"] for r in rows]
    sql, params = db._faceted(query, "viewer/export_ids")
    return [r["trajectory_id"] for r in db._rows(sql, params)]


def trajectory_files(db: LakeView) -> list[str]:
    """The trajectories' files the viewer opened the lake with, each checked to be there still: one
    gone (a rebuild swapping its directory) is Rebuilding, raised before an export's first byte."""
    files = db.files.get("trajectories", [])
    gone = next((path for path in files if not os.path.exists(path)), None)
    if gone is not None:
        raise Rebuilding(f"{REBUILDING} ({gone} vanished); export again")
    return files


def batches(db: LakeView, ids: list[str]) -> Iterator[pa.RecordBatch]:
    """The trajectories with these ids, every column, in the lake's order (source, part, row): only
    the row groups holding one of them are read whole. The files are those the viewer opened the lake
    with; one gone (a rebuild swapping its directory) is Rebuilding, found before the first batch."""
    wanted = pa.array(sorted(set(ids)), pa.string())
    schema = None
    for path in trajectory_files(db):
        f = pq.ParquetFile(path)
        for group in range(f.num_row_groups):
            mask = pc.is_in(f.read_row_group(group, columns=["trajectory_id"]).column(0), value_set=wanted)
            if not pc.any(mask).as_py():
                continue
            rows = f.read_row_group(group).filter(mask)
            schema = schema or rows.schema
            yield from rows.cast(schema).to_batches(BATCH)


def jsonl(db: LakeView, ids: list[str]) -> Iterator[bytes]:
    for batch in batches(db, ids):
        yield b"".join(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE) for row in batch.to_pylist())


def parquet(db: LakeView, ids: list[str]) -> Iterator[bytes]:
    """One Parquet file (row groups of BATCH rows), spooled to a temporary file and streamed from it."""
    with tempfile.TemporaryFile() as f:
        writer = None
        for batch in batches(db, ids):
            if writer is None:
                writer = pq.ParquetWriter(f, batch.schema, compression="zstd")
            writer.write_batch(batch, row_group_size=BATCH)
        if writer is None:
            return
        writer.close()
        f.seek(0)
        while chunk := f.read(1 << 20):
            yield chunk


def html_file(db: LakeView, ids: list[str], query: Query) -> Iterator[bytes]:
    """One HTML file: a contents list, then each trajectory's page body (the first HTML_MAX), from
    templates/export_head.html and export_article.html."""
    from tracelake.explore.view.render import render, trusted
    from tracelake.explore.view.trace import trace_context

    css = "".join(
        (resources.files("tracelake.explore.view") / "static" / name).read_text() for name in ("view.css", "ansi.css")
    )
    check("</style" not in css.lower(), "view: a stylesheet of the package closes its <style> element")
    trajectory_files(db)
    shown = ids[:HTML_MAX]
    described = ", ".join(f"{k}={v}" for k, v in query.params().items() if k not in ("after", "page", "format"))
    yield render(
        "export_head.html",
        css=trusted(css),
        label=db.label,
        shown=shown,
        total=len(ids),
        most=HTML_MAX,
        described=described,
    ).encode()
    for tid in shown:
        t = db.trajectory(tid)
        if t is None:
            continue
        yield render(
            "export_article.html", tid=tid, **trace_context(t, query, tokenizer=db.tokenizer, standalone=True)
        ).encode()
    yield b"</main></body></html>\n"
