"""The lake in a notebook: the views of `tracelake sql` as DuckDB relations and Polars LazyFrames,
read-only, at any revision.

    from tracelake.explore.notebook import open_lake
    lake = open_lake("lake")                      # or open_lake("lake", rev="HEAD~1")
    lake.sql("SELECT source, count(*) FROM trajectories GROUP BY ALL").pl()
    lake.scan("pool").filter(pl.col("n_tokens") > 8000).collect()
    lake.scan("trajectories").join(lake.scan("dropped"), on="trajectory_id").collect()
    lake.tables()                                 # the views, with what each reads

Both go through one `lake_connection` of `tracelake.explore.sql`: the same views, the same
sandbox (no network, no extension, settings locked) and, for `sql`, the same guard (SELECT-like
statements, no COPY). The connection is sealed: its views read the lake's Parquet files through
Arrow datasets and DuckDB itself may open no file, so nothing the notebook holds can write one: not
`lake.con.execute("COPY … TO …")`, not a relation's `.query(…)`, `.write_parquet(…)` or `.to_csv(…)`,
inside the lake or anywhere else. A file read by its path (`read_parquet('lake/…')`) is refused the
same way: read the views. `scan` is a Polars LazyFrame over the view's relation, on a connection of
its own (the same sealed views over the same Arrow datasets), so that scans join and concatenate:
one DuckDB connection serves one stream at a time. Filters and projections are pushed down to the
Arrow scan of the same Parquet files. pandas is optional: `df(query)` says so in one line when it is
missing. A lake table missing while it is rebuilt is the one-line "being rebuilt" error of `sql`
and `scan` alike (explore/sql.py), never DuckDB's catalog error. With `rev`, the lake is read
from the DVC cache as `tracelake sql --rev` does; `close()` (or a `with` block) removes the temporary
tree, as does the end of the process.
"""

from __future__ import annotations

import atexit
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import duckdb

from tracelake.core.errors import BadInput
from tracelake.explore.sql import guarded_relation, missing_table, reopen
from tracelake.explore.sql import lake_connection as _open_views


class NotebookLake:
    """An open lake: `sql(query)` -> duckdb relation, `scan(view)` -> polars LazyFrame, `views`."""

    def __init__(self, path: Path | str = "lake", rev: str | None = None, root: Path | str = "."):
        self._stack = ExitStack()
        self.revision = None
        lake = Path(path)
        try:
            if rev is not None:
                from tracelake.core.revisions import tree_at

                if lake.is_absolute():
                    raise BadInput("with rev, path is the lake's path inside the repository (e.g. 'lake')")
                tree = self._stack.enter_context(tree_at(rev, [str(lake)], root=root))
                self.revision, lake = tree.revision, tree.root / lake
            self._steps: list = []
            self.con, self.views = _open_views(lake, sealed=True, steps=self._steps)
            self.path = lake
            self._scans: list[duckdb.DuckDBPyConnection] = []
        except BaseException:
            self._stack.close()
            raise
        atexit.register(self.close)

    def sql(self, query: str) -> duckdb.DuckDBPyRelation:
        """The relation of a read-only query (its last statement; the others are run for their errors)."""
        return guarded_relation(self.con, query)

    def scan(self, view: str) -> Any:
        """A polars LazyFrame over one view (`pool`, `trajectories`, `selection_1k`, a dataset id, ...)."""
        if self.con is None:
            raise BadInput("this lake is closed: open_lake(...) again")
        if view not in self.views:
            raise missing_table(self.con, view) or BadInput(f"no view {view!r}; views: {', '.join(sorted(self.views))}")
        con = reopen(self._steps)  # its own connection: scans compose (module docstring)
        self._scans.append(con)
        return con.sql(f'SELECT * FROM "{view}"').pl(lazy=True)  # a name from self.views, quoted

    def df(self, query: str) -> Any:
        """A pandas DataFrame of a read-only query (pandas is optional: `.pl()` and `.arrow()` need none)."""
        try:
            import pandas  # noqa: F401
        except ImportError:
            raise BadInput(
                "pandas is not installed: `uv pip install pandas`, or use lake.sql(query).pl() (polars) or .arrow()"
            ) from None
        return self.sql(query).df()

    def tables(self) -> dict[str, str]:
        """Every view, sorted, with what it reads (a table's files, a dataset id's export, ...)."""
        return {name: self.views[name] for name in sorted(self.views)}

    def __repr__(self) -> str:
        at = f" at {self.revision}" if self.revision else ""
        if self.con is None:
            return f"<tracelake lake {self.path}{at}: closed>"
        names = sorted(self.views)
        return (
            f"<tracelake lake {self.path}{at}: {len(names)} views: {', '.join(names)}>\n"
            f"  .sql(query) -> DuckDB relation (.pl(), .arrow()); .scan(view) -> polars LazyFrame; "
            f".df(query) -> pandas; .tables()"
        )

    def close(self) -> None:
        """Close the connection and remove a revision's temporary tree."""
        con = getattr(self, "con", None)
        if con is not None:
            con.close()
            self.con = None
        for scan in getattr(self, "_scans", []):
            scan.close()
        self._scans = []
        self._stack.close()

    def __enter__(self) -> "NotebookLake":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_lake(path: Path | str = "lake", rev: str | None = None, root: Path | str = ".") -> NotebookLake:
    """The lake at `path` (with `rev`: as it was at that git revision, `path` inside the repository at
    `root`), read-only: `.sql(query)` gives DuckDB relations, `.scan(view)` Polars LazyFrames."""
    return NotebookLake(path, rev=rev, root=root)
