"""SQL over the lake (`tracelake sql`): one sandboxed DuckDB connection with a view per table.

    from tracelake.explore.sql import lake_connection, run_query
    con, views = lake_connection("lake")             # views: tasks, trajectories, messages, scores, ...
    table = run_query(con, "SELECT source, count(*) FROM trajectories GROUP BY ALL")

Views, each over the Parquet files that a finished directory's manifest.json names (every source
together); a hidden directory (a build's temporary or old copy) or one without a manifest is never read:
  tasks, trajectories, rejects (ingest), scores, responses (model scorers' answers), pool, dropped,
  task_clusters, contamination   near-duplicate clusters and benchmark copies (the dedup stage)
  messages   one row per message: trajectory_id, source, task, trace_source, position (0-based), role, content
  funnel     the filter funnel: source, rule, dropped, in, kept (from lake/pool/manifest.json)
  selection_<scale> and sft_<scale>   each built dataset, also under its content id ("sft-3.16k-…", quoted)
  rl_prompts, harbor_tasks, export_rejects   the exports
  rl_dropped   tasks the RL export left out by a rule (contaminated, near-duplicate, the pick)

Read-only, in two layers:
- DuckDB's sandbox (`sandbox`), set once the views exist: `allowed_directories` is the lake (its real
  path), `allowed_paths` the views' files that lie elsewhere (with --rev: their objects in the DVC
  cache); `enable_external_access = false` closes every other file, the network and extension
  loading; autoinstall and autoload of known extensions are off; `lock_configuration` freezes it
  all, so SET cannot undo it. DuckDB resolves symlinks and `..` before it checks a path, so a symlink
  in the lake pointing out of it is refused like any other path outside.
- `guard_query(con, query)`, called before any statement runs (by `run_query` here, and by any other
  reader of these views): only SELECT-like statements (SELECT, WITH, FROM, DESCRIBE, SHOW, SUMMARIZE,
  EXPLAIN of one of them), and no COPY anywhere in a statement's parsed tree (`json_serialize_sql`):
  `WITH x AS (COPY … TO 'f') SELECT …` parses as a SELECT, and the sandbox lets a COPY write inside
  the lake. `EXPLAIN [ANALYZE] <statement>` is checked as the statement it explains.
Every refusal, and every DuckDB error, is a one-line BadInput (`tracelake: sql: …`).

A rebuild may run while the lake is read: `dvc repro` removes a stage's outputs before it runs it,
and links their files back one by one afterwards. A reader gives the old answer, the new one, or
one line, `tracelake: the lake is being rebuilt (<what>); run the query again`: when a view's file
vanished during the query, when a directory's files do not hold the rows its manifest counts, when
a source the pool was made from is missing, or when a query names a lake table (pool, scores,
selection_1k, ...) that has no view because its directory was missing when the views were made
and a build of it is under way or has finished since (`swap.being_built`: a live temporary name,
or a running DVC command holding it). A lake table that is simply not built is one line too
(`sql: no table pool: lake/pool is not built; run `dvc repro``), never DuckDB's catalog error.
"""

from __future__ import annotations

import os
import re
import weakref
from functools import partial
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa

from tracelake.core import assets
from tracelake.core.datasets import KINDS
from tracelake.core.errors import BadInput
from tracelake.core.lake import Lake, built_children, is_built
from tracelake.core.outputs import manifest_files, read_manifest
from tracelake.core.swap import being_built, sweep
from tracelake.core.ui import json_for_terminal, literal, literals, printable, terminal_console

SELECT_LIKE = "SELECT, WITH, FROM, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN"
_EXPLAIN = re.compile(r"\s*EXPLAIN\s+(?:ANALY[SZ]E\s+)?(?P<rest>.*)\Z", re.I | re.S)
_OPTIONS = re.compile(r"\s*\([^()]*\)(?P<rest>.*)\Z", re.S)  # EXPLAIN (ANALYZE, FORMAT json) ...
_QUOTED = re.compile(r'"([^"]+)"')
_NO_TABLE = re.compile(r"Catalog Error: Table with name (?P<name>.+?) does not exist!")


# --- views ---------------------------------------------------------------------------------------


class _Views:
    """The views made on one connection (name -> what it reads) and every file they read. Sealed, a
    view reads its files through an Arrow dataset, so DuckDB itself never opens a file."""

    def __init__(self, con: duckdb.DuckDBPyConnection, sealed: bool = False):
        self.con, self.what, self.files, self.parts, self.sealed = con, {}, [], {}, sealed
        self.steps: list[tuple[str, str, Any]] = []  # what made the views, to make them again (reopen)

    def register(self, name: str, obj: Any) -> None:
        self.con.register(name, obj)
        self.steps.append(("register", name, obj))

    def execute(self, statement: str) -> None:
        self.con.execute(statement)
        self.steps.append(("execute", statement, None))

    def add(self, name: str, files: list[str]) -> None:
        if files:
            if self.sealed:
                self.register(name, _arrow_dataset(files))
            else:
                self.con.read_parquet(files, union_by_name=True).create_view(name)
            self.parts[name] = list(files)
            self.what[name] = f"{len(files)} file(s)"
            self.files += files

    def dataset(self, name: str, dataset_id: str, files: list[str]) -> None:
        """A dataset's view, also under its content id (names come from params, scale names: letters,
        digits, - and _; ids: [a-z0-9.-])."""
        if files:
            self.add(name, files)
            self.execute(f'CREATE VIEW "{dataset_id}" AS SELECT * FROM "{name}"')
            self.what[dataset_id] = name


def _arrow_dataset(files: list[str]):
    """Parquet files as one Arrow dataset, their columns matched by name (as read_parquet's
    union_by_name): a column missing from a file reads as null."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    try:
        schema = pa.unify_schemas([pq.read_schema(f) for f in files], promote_options="permissive")
        return ds.dataset(files, format="parquet", schema=schema)
    except pa.ArrowException as e:
        raise BadInput(f"cannot read {files[0]} and the files beside it as one table: {_first_line(e)}") from None


def _finished(directory: Path) -> tuple[dict, dict[str, list[str]]]:
    """A built directory's manifest and its tables' files as the manifest names them: a table's one
    file, or the Parquet files of the directory it names (a parted table's parts, an export's shards).
    The files must hold the rows the manifest counts: DVC, checking a directory out again, links its
    files one by one, manifest included, so a directory can look built before it is whole."""
    try:
        manifest = read_manifest(directory)
    except (BadInput, ValueError):  # whole a moment ago, when the caller listed the directory
        if (directory / "manifest.json").is_file():
            raise  # there, but not a manifest: rebuilding will not change that
        raise _rebuilding(f"{directory / 'manifest.json'} vanished or is being written") from None
    tables = {}
    for name, info in manifest["tables"].items():
        files = [str(f) for f in manifest_files(directory, manifest, name)]
        counts = [_rows(f) for f in files]
        if None in counts or sum(counts) != info["rows"]:
            raise _rebuilding(f"{directory} is incomplete")
        tables[name] = files
    return manifest, tables


def _rows(file: str) -> int | None:
    """The rows of a Parquet file by its footer; None for a file not (yet) whole."""
    import pyarrow.parquet as pq

    try:
        return pq.read_metadata(file).num_rows
    except FileNotFoundError:
        raise _rebuilding(f"{file} vanished") from None
    except (OSError, pa.ArrowException):
        return None


def _ingest_views(v: _Views, layout: Lake, pool: dict | None) -> None:
    """trajectories, tasks and rejects over every built source; each source the pool was made from
    must be there (DVC removes a stage's outputs before it runs it again)."""
    built = {(table, source): _finished(d)[1] for table, source, d in layout.ingested()}
    for source in pool["inputs"].get("trajectories", {}) if pool else ():
        if ("trajectories", source) not in built:
            raise _rebuilding(
                f"{layout.table('trajectories', source)}, which the pool was made from, is missing "
                f"or unfinished; if no rebuild is running, run `dvc repro`"
            )

    def files(table: str, name: str) -> list[str]:
        return [f for (t, _), tables in built.items() if t == table for f in tables.get(name, [])]

    v.add("trajectories", files("trajectories", "trajectories"))
    v.add("tasks", files("tasks", "tasks"))
    v.add("rejects", files("trajectories", "rejects") + files("tasks", "rejects"))


def _make_views(v: _Views, layout: Lake) -> None:
    pool = _finished(layout.pool) if is_built(layout.pool) else None
    _ingest_views(v, layout, pool and pool[0])
    for directory, names in (
        (layout.scores, ("scores", "responses")),
        (layout.dedup, ("task_clusters", "contamination")),
    ):
        if is_built(directory):
            tables = _finished(directory)[1]
            for name in names:
                v.add(name, tables.get(name, []))
    if pool:
        v.add("pool", pool[1]["pool"])
        v.add("dropped", pool[1]["dropped"])
    if "trajectories" in v.what:
        v.execute(assets.sql("views/messages"))
        v.what["messages"] = "trajectories, one row per message"
    if pool:
        funnel = pool[0]["counts"]
        rows = [
            {"source": s, "rule": rule, "dropped": n, "in": f["in"], "kept": f["kept"]}
            for s, f in funnel["sources"].items()
            for rule, n in f["dropped"].items()
        ]
        v.register("funnel", pa.Table.from_pylist(rows))
        v.what["funnel"] = "lake/pool/manifest.json"
    export_rejects = []
    for kind in KINDS:  # core/datasets.py: each dataset under its view and its id
        if kind.id_prefix is None:  # the pool: its views above (the messages view reads it)
            continue
        for scale, d in kind.built(layout).items():
            manifest, tables = _finished(d)
            v.dataset(kind.view.format(scale=scale), manifest["dataset_id"], tables[kind.table])
            for name in kind.also:  # an RL export built before curation applied to it has no rl_dropped
                if name in tables:
                    v.add(name, tables[name])
            export_rejects += tables.get(kind.rejects, []) if kind.rejects else []
    v.add("export_rejects", export_rejects)


def lake_connection(
    lake: Path | str,
    files: dict[str, list[str]] | None = None,
    *,
    sealed: bool = False,
    steps: list | None = None,
) -> tuple[duckdb.DuckDBPyConnection, dict[str, str]]:
    """A sandboxed, read-only connection with every view the lake supports; (connection, view -> what
    it reads). `files`, when given, receives each Parquet view's files (view -> paths).

    `sealed`, for a connection handed to its caller whole (the notebook's): DuckDB's sandbox lets a
    statement write inside the directories it may read (`COPY … TO 'lake/pool/pool.parquet'`, a
    relation's `write_parquet`), and only `guard_query` stops that. Sealed, the views read their
    files through Arrow datasets and DuckDB may open no file at all, so nothing run on the connection
    writes anywhere; reading a file by its path (`read_parquet('lake/…')`) is refused too."""
    lake = Path(lake)
    if not lake.is_dir():
        raise BadInput(f"{lake} is not a lake directory (run `dvc repro`, or pass --lake)")
    sweep(lake)  # what killed builds left (DVC's run cache may restore a stage without running it)
    v = _Views(duckdb.connect(), sealed=sealed)
    try:
        _make_views(v, Lake(lake))
    except duckdb.Error as e:
        raise query_error(e, "") from None
    except FileNotFoundError as e:  # a directory replaced between listing it and reading it
        raise _rebuilding(f"{e.filename} vanished") from None
    if not v.what:
        layout = Lake(lake)
        if any(being_built(d) for d in (layout.root / "trajectories", layout.root / "tasks", layout.pool)):
            raise _rebuilding(f"{lake} holds no finished table yet")
        raise BadInput(f"{lake} holds no tables yet: run `dvc repro`")
    _OPENED[v.con] = _Opened(Lake(lake), set(v.what))
    sandbox(v.con, None if sealed else lake, v.files)
    if files is not None:
        files.update(v.parts)
    if steps is not None:
        steps.extend(v.steps)
    return v.con, v.what


class _Opened:
    """What `lake_connection` saw: the lake's layout, the views it made, and the directories they read
    (with their parents: a dataset id's home is the directory of every scale's), so that a missing
    view can be explained. Taken from the views themselves, not from the directories now: one may
    have been swapped in since."""

    def __init__(self, layout: Lake, views: set[str]):
        self.layout, self.views = layout, views
        homes = {home for home in map(partial(_home, layout), views) if home is not None}
        self.present = homes | {home.parent for home in homes}


_OPENED: "weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, _Opened]" = weakref.WeakKeyDictionary()

# view -> the directory that holds it, by the lake's own layout (core/lake.py)
_HOME = {
    **dict.fromkeys(("trajectories", "messages", "rejects"), lambda lake: lake.root / "trajectories"),
    "tasks": lambda lake: lake.root / "tasks",
    **dict.fromkeys(("scores", "responses"), lambda lake: lake.scores),
    **dict.fromkeys(("task_clusters", "contamination"), lambda lake: lake.dedup),
    **dict.fromkeys(("pool", "dropped", "funnel"), lambda lake: lake.pool),
    # a dataset kind not built per scale (core/datasets.py): its view and its other tables
    **{name: k.under for k in KINDS if k.id_prefix and not k.per_scale for name in (k.view, *k.also)},
    "export_rejects": lambda lake: lake.root / "exports",  # every export's rejects
}
# view-name prefix -> its directory: a scale's own (selection_<scale>, sft_<scale>), or the directory
# of every scale's for a dataset id (sel-…, sft-…, rl-…)
_HOME_PREFIX = {
    **{k.view.split("{scale}")[0]: k.home for k in KINDS if k.per_scale},  # core/datasets.py
    **{f"{k.id_prefix}-": lambda lake, _, k=k: k.under(lake) for k in KINDS if k.id_prefix},
}


def _home(layout: Lake, view: str) -> Path | None:
    """The directory a lake view reads; None for a name that is no lake table."""
    if view in _HOME:
        return _HOME[view](layout)
    for prefix, home in _HOME_PREFIX.items():
        if view.startswith(prefix) and len(view) > len(prefix):
            return home(layout, view[len(prefix) :])
    return None


def _built(directory: Path) -> bool:
    """A view's directory is built: an output with its manifest, or a directory of outputs (a table's
    sources, every scale's selections) with one of them."""
    return is_built(directory) or bool(built_children(directory))


def missing_table(con: duckdb.DuckDBPyConnection, view: str) -> BadInput | None:
    """The one-line error for a query on `con` (a `lake_connection`) that names a lake table
    with no view: `view`'s directory was missing when the views were made. A build of it under way,
    or finished since, is "being rebuilt"; else it is not built. None for a name that is no lake
    table, or whose directory was built (the view is simply not part of that version)."""
    opened = _OPENED.get(con)
    home = _home(opened.layout, view) if opened is not None and view not in opened.views else None
    if home is None or home in opened.present:
        return None
    if being_built(home) or _built(home):
        return _rebuilding(f"{home} is missing while it is rebuilt")
    return BadInput(f"sql: no table {view}: {home} is not built; run `dvc repro`")


def reopen(steps: list) -> duckdb.DuckDBPyConnection:
    """Another sealed connection with the same views, made from a sealed `lake_connection`'s `steps` (the same
    Arrow datasets, no file read again): one DuckDB connection serves one stream at a time, so each of
    the notebook's scans gets its own."""
    con = duckdb.connect()
    for kind, what, obj in steps:
        if kind == "register":
            con.register(what, obj)
        else:
            con.execute(what)
    sandbox(con, None, [])
    return con


def sandbox(con: duckdb.DuckDBPyConnection, lake: Path | None, files: list[str]) -> None:
    """Confine `con` to reading the lake and `files` (the views' files: a symlink's target counts,
    e.g. --rev's DVC cache objects): nothing else, no network, no extensions, settings locked. With
    `lake` None, no file at all (a sealed connection's views read through Arrow). Call it after the
    views exist; allowed paths must be set before external access is switched off."""
    if lake is not None:
        root = os.path.realpath(lake)
        outside = sorted({real for real in map(os.path.realpath, files) if not real.startswith(root + os.sep)})
        con.execute("SET allowed_directories = $d", {"d": [root + os.sep]})
        if outside:
            con.execute("SET allowed_paths = $p", {"p": outside})
    for setting in ("autoinstall_known_extensions", "autoload_known_extensions", "enable_external_access"):
        con.execute(f"SET {setting} = false")
    con.execute("SET lock_configuration = true")


# --- the guard and queries -----------------------------------------------------------------------


def guard_query(con: duckdb.DuckDBPyConnection, query: str) -> list[str]:
    """The statements of `query` once each is known to only read: SELECT-like, no COPY anywhere in its
    parsed tree, an EXPLAIN only of such a statement. Anything else is a one-line BadInput raised
    before any statement runs. Use it before running any user's SQL on a `lake_connection`."""
    statements = _parse(con, query)
    if not statements:
        raise BadInput("sql: the query is empty")
    for statement in statements:
        _check(con, statement)
    return [s.query for s in statements]


def _parse(con: duckdb.DuckDBPyConnection, query: str) -> list:
    try:
        return con.extract_statements(query)
    except duckdb.Error as e:
        raise BadInput(f"sql: {_first_line(e)}") from None


def _refused(what: str) -> BadInput:
    return BadInput(f"sql: {what} refused: tracelake sql is read-only ({SELECT_LIKE})")


def _check(con: duckdb.DuckDBPyConnection, statement, explained: bool = False) -> None:
    kind = statement.type
    if kind == duckdb.StatementType.EXPLAIN and not explained:
        inner = _explained(con, statement.query)
        if not inner:
            raise BadInput("sql: EXPLAIN must be followed by one statement (EXPLAIN [ANALYZE] SELECT ...)")
        for s in inner:
            _check(con, s, explained=True)
        return
    prefix = "EXPLAIN of " if explained else ""
    if kind != duckdb.StatementType.SELECT:
        raise _refused(f"{prefix}{kind.name} statements are")
    tree = orjson.loads(con.execute("SELECT json_serialize_sql($q)", {"q": statement.query}).fetchall()[0][0])
    if tree.get("error"):
        raise BadInput(f"sql: this statement cannot be checked to be read-only ({tree.get('error_message')})")
    if _has_copy(tree):
        raise _refused(f"{prefix}COPY (also inside WITH) is")


def _explained(con: duckdb.DuckDBPyConnection, text: str) -> list:
    """The statement an EXPLAIN explains: the text after `EXPLAIN [ANALYZE]`, or after its (options);
    `EXPLAIN (SELECT 1)` and `EXPLAIN (FORMAT json) SELECT 1` both parse. Every reading that parses
    as one statement, for the caller to check them all."""
    match = _EXPLAIN.match(text)
    options = _OPTIONS.match(match["rest"]) if match else None
    found = []
    for candidate in (match and match["rest"], options and options["rest"]):
        try:
            statements = con.extract_statements(candidate) if candidate else []
        except duckdb.Error:
            continue
        found += statements if len(statements) == 1 else []
    return found


def _has_copy(tree) -> bool:
    """Whether a parsed tree (json_serialize_sql) holds a COPY node anywhere."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("type") == "COPY_QUERY_NODE" or node.get("info_type") == "COPY_INFO":
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def guarded_relation(con: duckdb.DuckDBPyConnection, query: str) -> duckdb.DuckDBPyRelation:
    """The relation of a read-only query's last statement (the statements before it are run: being
    read-only, only their errors matter); every refusal or DuckDB error a one-line BadInput."""
    statements = guard_query(con, query)
    try:
        for statement in statements[:-1]:
            con.execute(statement).fetchall()
        return con.sql(statements[-1])
    except duckdb.Error as e:
        raise query_error(e, query, con) from None


def run_query(con: duckdb.DuckDBPyConnection, query: str) -> pa.Table:
    """Run a read-only query (its last statement's result) as an Arrow table."""
    relation = guarded_relation(con, query)
    try:
        return relation.to_arrow_table()
    except duckdb.Error as e:
        raise query_error(e, query, con) from None


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _rebuilding(what: str) -> BadInput:
    return BadInput(f"the lake is being rebuilt ({what}); run the query again")


def query_error(e: duckdb.Error, query: str, con: duckdb.DuckDBPyConnection | None = None) -> BadInput:
    """One line for a DuckDB error. A missing file that the query did not name itself is a view's:
    a rebuild removed it after the views were made. With `con` (the `lake_connection` connection the
    query ran on), a lake table without a view is explained (`missing_table`)."""
    line = _first_line(e)
    no_table = _NO_TABLE.match(line) if isinstance(e, duckdb.CatalogException) and con is not None else None
    if no_table and (explained := missing_table(con, no_table["name"])):
        return explained
    if isinstance(e, duckdb.IOException):
        quoted = _QUOTED.search(line)
        if quoted and quoted[1] not in query and not os.path.exists(quoted[1]):
            return _rebuilding(f"{quoted[1]} vanished")
    if isinstance(e, duckdb.PermissionException):
        return BadInput(f"sql: {line} (tracelake sql reads only the lake: no other file, no network, no extension)")
    return BadInput(f"sql: {line}")


# --- results -------------------------------------------------------------------------------------


def to_json_lines(table: pa.Table) -> bytes:
    return json_for_terminal(b"".join(orjson.dumps(row, default=str) + b"\n" for row in table.to_pylist()))


def to_csv(table: pa.Table) -> bytes:
    """CSV, nested values (lists, structs, maps) written as JSON text: Arrow's CSV writer has no form
    for them."""
    import io

    import pyarrow.csv as pacsv

    columns = [
        pa.array([None if v is None else orjson.dumps(v, default=str).decode() for v in c.to_pylist()], pa.string())
        if pa.types.is_nested(c.type)
        else c
        for c in table.columns
    ]
    buf = io.BytesIO()
    try:
        pacsv.write_csv(pa.Table.from_arrays(columns, names=table.column_names), buf)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise BadInput(f"sql: --format csv cannot write this result ({_first_line(e)}); --format json can") from None
    return buf.getvalue()


def write_result(table: pa.Table, fmt: str, path: Path | None, console) -> None:
    """table (rich), csv, json lines or parquet, to a file or stdout. Values print as they are (no
    markup; controls visible in a table, and in CSV written to a terminal: a pipe gets the data)."""
    import sys

    import pyarrow.parquet as pq

    try:
        if fmt == "parquet":
            pq.write_table(table, path, compression="zstd")
            return
        if fmt == "table":
            view = result_table(table)
            if path is None:
                console.print(view)
                console.print(f"{table.num_rows:,} row(s)", style="dim")
                return
            with open(path, "w") as f:
                terminal_console(file=f, width=200).print(view)
            return
        data = to_csv(table) if fmt == "csv" else to_json_lines(table)
        if path is None and fmt == "csv" and sys.stdout.isatty():
            data = printable(data.decode()).encode()
        if path is None:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        else:
            Path(path).write_bytes(data)
    except OSError as e:
        if path is None:
            raise
        raise BadInput(f"cannot write {path}: {e.strerror or e}") from None


def result_table(table: pa.Table):
    """A rich table of a result, its column names and values literal."""
    from rich.table import Table

    view = Table(show_lines=False)
    for name in table.column_names:
        view.add_column(literal(name), overflow="fold")
    for row in table.to_pylist():
        view.add_row(*literals(row.values()))
    return view


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
                console.print(literal(f"tracelake: {e}"))
