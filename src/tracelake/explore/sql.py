"""SQL over the lake (`tracelake sql`): one read-only DuckDB connection with a view per table.

    from tracelake.explore.sql import open_lake, run_query
    con = open_lake("lake")                    # views: tasks, trajectories, messages, scores, ...
    table = run_query(con, "SELECT source, count(*) FROM trajectories GROUP BY ALL")

Views (each over the Parquet files found under the lake, every source together):
  tasks, trajectories, rejects (ingest), scores, responses (model scorers' answers), pool, dropped,
  task_clusters, contamination   near-duplicate clusters and benchmark copies (the dedup stage)
  messages   one row per message: trajectory_id, source, task, trace_source, position (0-based), role, content
  funnel     the filter funnel: source, rule, dropped, in, kept (from lake/pool/manifest.json)
  selection_<scale> and sft_<scale>   each built dataset, also under its content id ("sft-3.16k-…", quoted)
  rl_prompts, harbor_tasks, export_rejects   the exports
Read-only: only SELECT-like statements (SELECT, WITH, FROM, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN) run;
COPY, CREATE, INSERT, ATTACH, SET, INSTALL and the rest are refused before anything executes, and the
connection's configuration is locked.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import orjson
import pyarrow as pa

from tracelake.core import assets
from tracelake.core.errors import BadInput
from tracelake.core.lake import read_manifest
from tracelake.core.layout import Lake, is_built

ALLOWED = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


def _files(pattern_root: Path, pattern: str) -> list[str]:
    return sorted(str(p) for p in pattern_root.glob(pattern) if p.is_file())


def _view(con: duckdb.DuckDBPyConnection, name: str, files: list[str], views: dict[str, str]) -> None:
    if files:
        con.read_parquet(files, union_by_name=True).create_view(name)
        views[name] = f"{len(files)} file(s)"


def open_lake(lake: Path | str) -> tuple[duckdb.DuckDBPyConnection, dict[str, str]]:
    """A read-only connection with every view the lake supports; (connection, view -> what it reads)."""
    lake = Path(lake)
    if not lake.is_dir():
        raise BadInput(f"{lake} is not a lake directory (run `dvc repro`, or pass --lake)")
    con, views, layout = duckdb.connect(), {}, Lake(lake)
    _view(con, "trajectories", _files(lake, "trajectories/*/trajectories/part-*.parquet"), views)
    _view(con, "tasks", _files(lake, "tasks/*/tasks.parquet"), views)
    _view(con, "rejects", _files(lake, "trajectories/*/rejects.parquet") + _files(lake, "tasks/*/rejects.parquet"), views)
    _view(con, "scores", _files(lake, "scores/scores.parquet"), views)
    _view(con, "responses", _files(lake, "scores/responses.parquet"), views)
    _view(con, "task_clusters", _files(lake, "dedup/task_clusters.parquet"), views)
    _view(con, "contamination", _files(lake, "dedup/contamination.parquet"), views)
    _view(con, "pool", _files(lake, "pool/pool.parquet"), views)
    _view(con, "dropped", _files(lake, "pool/dropped.parquet"), views)
    if "trajectories" in views:
        con.execute(assets.sql("views/messages"))
        views["messages"] = "trajectories, one row per message"
    if is_built(layout.pool):
        funnel = read_manifest(layout.pool)["counts"]
        rows = [{"source": s, "rule": rule, "dropped": n, "in": f["in"], "kept": f["kept"]}
                for s, f in funnel["sources"].items() for rule, n in f["dropped"].items()]
        con.register("funnel", pa.Table.from_pylist(rows))
        views["funnel"] = "lake/pool/manifest.json"
    for scale, d in layout.built_selections().items():
        _dataset_views(con, views, f"selection_{scale}", read_manifest(d)["dataset_id"], [str(d / "selection.parquet")])
    for scale, d in layout.built_sft_exports().items():
        m = read_manifest(d)
        _dataset_views(con, views, f"sft_{scale}", m["dataset_id"], [str(d / f) for f in m["counts"]["files"]])
    rl = layout.rl_export
    if is_built(rl):
        m = read_manifest(rl)
        _dataset_views(con, views, "rl_prompts", m["dataset_id"], [str(rl / f) for f in m["counts"]["files"]["prompts"]])
        _view(con, "harbor_tasks", [str(rl / f) for f in m["counts"]["files"]["tasks"]], views)
    _view(con, "export_rejects", _files(lake, "exports/sft/*/export_rejects.parquet")
          + _files(lake, "exports/rl/export_rejects.parquet"), views)
    if not views:
        raise BadInput(f"{lake} holds no tables yet: run `dvc repro`")
    con.execute("SET lock_configuration = true")
    return con, views


def _dataset_views(con, views: dict[str, str], name: str, dataset_id: str, files: list[str]) -> None:
    _view(con, name, files, views)
    # names come from params (scale names: letters, digits, - and _) and from dataset ids ([a-z0-9.-])
    con.execute(f'CREATE VIEW "{dataset_id}" AS SELECT * FROM "{name}"')
    views[dataset_id] = name


def check_read_only(con: duckdb.DuckDBPyConnection, query: str) -> None:
    """Refuse anything but SELECT-like statements, before any of them runs."""
    try:
        statements = con.extract_statements(query)
    except duckdb.Error as e:
        raise BadInput(f"sql: {str(e).splitlines()[0]}") from None
    if not statements:
        raise BadInput("sql: the query is empty")
    for s in statements:
        if s.type not in ALLOWED:
            raise BadInput(f"sql: {s.type.name} statements are refused: tracelake sql is read-only "
                           f"(SELECT, WITH, FROM, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN)")


def run_query(con: duckdb.DuckDBPyConnection, query: str) -> pa.Table:
    """Run a read-only query (its last statement's result) as an Arrow table."""
    check_read_only(con, query)
    statements = con.extract_statements(query)
    try:
        for s in statements[:-1]:
            con.execute(s.query)
        return con.sql(statements[-1].query).to_arrow_table()
    except duckdb.Error as e:
        raise BadInput(f"sql: {str(e).splitlines()[0]}") from None


def to_json_lines(table: pa.Table) -> bytes:
    return b"".join(orjson.dumps(row, default=str) + b"\n" for row in table.to_pylist())


def write_result(table: pa.Table, fmt: str, path: Path | None, console) -> None:
    """table (rich), csv, json lines or parquet, to a file or stdout."""
    import io
    import sys

    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    if fmt == "parquet":
        pq.write_table(table, path, compression="zstd")
        return
    if fmt == "table":
        from rich.table import Table

        view = Table(show_lines=False)
        for name in table.column_names:
            view.add_column(name, overflow="fold")
        for row in table.to_pylist():
            view.add_row(*("" if v is None else str(v) for v in row.values()))
        if path is None:
            console.print(view)
            console.print(f"{table.num_rows:,} row(s)", style="dim")
            return
        from rich.console import Console

        with open(path, "w") as f:
            Console(file=f, width=200).print(view)
        return
    if fmt == "csv":
        buf = io.BytesIO()
        pacsv.write_csv(table, buf)
        data = buf.getvalue()
    else:
        data = to_json_lines(table)
    if path is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        Path(path).write_bytes(data)


def interactive(con: duckdb.DuckDBPyConnection, views: dict[str, str], console) -> None:
    """A prompt over the same read-only views: statements end with ';', `.tables` lists the views,
    `.quit` (or Ctrl-D) leaves."""
    try:
        import readline  # noqa: F401  (line editing and history when available)
    except ImportError:
        pass
    console.print(f"tracelake sql: {len(views)} views (.tables lists them); read-only; end statements with ';'")
    buffer = ""
    while True:
        try:
            line = input("tracelake> " if not buffer else "      ...> ")
        except (EOFError, KeyboardInterrupt):
            console.print()
            return
        if not buffer and line.strip() in (".quit", ".exit"):
            return
        if not buffer and line.strip() == ".tables":
            for name, what in views.items():
                console.print(f"  {name:<28} {what}", markup=False, highlight=False)
            continue
        buffer += line + "\n"
        if buffer.strip().endswith(";"):
            query, buffer = buffer, ""
            try:
                write_result(run_query(con, query), "table", None, console)
            except BadInput as e:
                console.print(f"tracelake: {e}", markup=False, highlight=False)
