"""The queries behind `tracelake view`, on one `open_lake` connection (the same sandboxed, read-only
views as `tracelake sql`), one request at a time (a DuckDB connection is not thread-safe).

Every query is a file in sql/view/ with its values bound as $parameters. The WHERE box's text is the
only SQL a request brings: `SELECT * FROM view_rows WHERE <text>` must be one statement that
`guard_query` accepts, and then runs as the CTE `matched` that the facets narrow.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import duckdb

from tracelake.core import assets
from tracelake.core.errors import BadInput
from tracelake.explore.sql import guard_query, open_lake, query_error

PAGE_ROWS = 50
QUERY_SECONDS = 30
_SELECTION = re.compile(r"^selection_[A-Za-z0-9_-]+$")
_ID = re.compile(r"^[0-9a-f]{1,64}$")


@dataclass(frozen=True)
class Query:
    """What the list shows: the WHERE box, the facets (None: any) and the page (`after`: the last id of
    the page before). Its URL parameters are its field names."""

    where: str | None = None
    source: str | None = None
    task: str | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    timed_out: bool | None = None
    subagent: bool | None = None
    turns_min: int | None = None
    turns_max: int | None = None
    tokens_min: int | None = None
    tokens_max: int | None = None
    rule: str | None = None
    after: str = ""

    @classmethod
    def from_params(cls, params) -> "Query":
        """From URL parameters (a mapping); an empty value is "any"; a malformed number is a BadInput."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = (params.get(f.name) or "").strip() if f.name != "where" else (params.get(f.name) or "")
            if not raw.strip():
                continue
            kind = f.type.split(" ")[0]
            try:
                if kind == "int":
                    values[f.name] = int(raw)
                elif kind == "float":
                    values[f.name] = float(raw)
                elif kind == "bool":
                    if raw not in ("yes", "no"):
                        raise ValueError(raw)
                    values[f.name] = raw == "yes"
                else:
                    values[f.name] = raw
            except ValueError:
                raise BadInput(f"view: {f.name}={raw!r} is not a valid {kind}") from None
        return cls(**values)

    def params(self) -> dict[str, str]:
        """The URL parameters of this query (empty ones left out)."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or value == "":
                continue
            out[f.name] = ("yes" if value else "no") if isinstance(value, bool) else str(value)
        return out

    def facets(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("where", "after")}


class LakeView:
    """The lake's views and the view's own queries, behind one lock."""

    def __init__(self, lake: Path | str, label: str = ""):
        self.lake, self.label = Path(lake), label or str(lake)
        self.con, self.views = open_lake(lake)
        if "trajectories" not in self.views:
            raise BadInput(f"{lake} has no trajectories: run `dvc repro` (or `tracelake ingest`)")
        self.filtered = "pool" in self.views and "dropped" in self.views
        self.lock = threading.Lock()
        self._execute(assets.sql("view/rows" if self.filtered else "view/rows_unfiltered"))
        self.selections = sorted((name[len("selection_"):], name) for name in self.views
                                 if _SELECTION.match(name))
        names = {name for _, name in self.selections}
        self.dataset_ids = {what: view for view, what in self.views.items() if what in names}  # view -> its id
        self.columns = [r["column_name"] for r in self._rows("DESCRIBE view_rows")]
        rows = self._rows(assets.sql("view/facet_values"))
        self.facet_values = {facet: [(r["value"], r["n"]) for r in rows if r["facet"] == facet]
                             for facet in ("source", "rule")}

    # --- running ---------------------------------------------------------------------------------

    def _execute(self, sql: str, params: dict | None = None) -> duckdb.DuckDBPyConnection:
        try:
            return self.con.execute(sql, params or {})
        except duckdb.InterruptException:
            raise
        except duckdb.Error as e:
            raise query_error(e, "") from None

    def _rows(self, sql: str, params: dict | None = None) -> list[dict[str, Any]]:
        """The rows as dicts. A query running past QUERY_SECONDS (a WHERE box can ask for anything) is
        interrupted: the connection serves one request at a time."""
        with self.lock:
            timer = threading.Timer(QUERY_SECONDS, self.con.interrupt)
            timer.start()
            try:
                cur = self._execute(sql, params)
                names = [d[0] for d in cur.description]
                return [dict(zip(names, row)) for row in cur.fetchall()]
            except duckdb.InterruptException:
                raise BadInput(f"sql: the query ran past {QUERY_SECONDS} s and was stopped") from None
            finally:
                timer.cancel()

    # --- the list --------------------------------------------------------------------------------

    def matched(self, where: str | None) -> str:
        """The CTE body for the WHERE box: view_rows narrowed by the user's condition, checked by the
        same guard as `tracelake sql` and kept on lines of its own (a trailing -- comment ends there)."""
        where = (where or "").strip().rstrip(";").rstrip()   # a condition typed as a statement
        if not where:
            return "SELECT * FROM view_rows"
        with self.lock:
            statements = guard_query(self.con, f"SELECT * FROM view_rows WHERE {where}")
        if len(statements) != 1:
            raise BadInput("sql: the WHERE box takes one condition, not several statements")
        return statements[0]

    def _faceted(self, query: Query, tail: str) -> tuple[str, dict]:
        sql = (f"WITH matched AS (\n{self.matched(query.where)}\n),\nfaceted AS (\n{assets.sql('view/facets')}\n)\n"
               f"{assets.sql(tail)}")
        return sql, query.facets()

    def page(self, query: Query, n: int = PAGE_ROWS) -> tuple[list[dict], int, str | None]:
        """(rows of this page, rows matched in all, the `after` of the next page or None)."""
        sql, params = self._faceted(query, "view/page")
        rows = self._rows(sql, {**params, "after": query.after, "n": n + 1})
        sql, params = self._faceted(query, "view/count")
        total = self._rows(sql, params)[0]["n"]
        more = len(rows) > n
        rows = rows[:n]
        return rows, total, rows[-1]["trajectory_id"] if more else None

    # --- one trajectory --------------------------------------------------------------------------

    def trajectory(self, trajectory_id: str) -> dict[str, Any] | None:
        """The trajectory, with `related` (the other traces of its trial), `tasks`, `copies` (scale ->
        (dataset id, copies)) and `export_rejects`; None when no trajectory has this id."""
        if not _ID.match(trajectory_id):
            return None
        found = self._rows(assets.sql("view/trajectory"), {"id": trajectory_id})
        if not found:
            return None
        row = found[0]
        row["related"] = [] if row["trial_name"] is None else self._rows(assets.sql("view/related"), {
            "id": trajectory_id, "source": row["source"], "trial_name": row["trial_name"],
            "run_id": row["run_id"], "trace_source": row["trace_source"]})
        row["tasks"] = self._rows(assets.sql("view/task"), {"task_id": row["task_id"]}) if "tasks" in self.views else []
        template = assets.sql("view/copies")
        row["copies"] = {scale: (self.dataset_ids.get(name, ""),
                                 self._rows(template.replace("{selection}", f'"{name}"'), {"id": trajectory_id})[0]["copies"])
                         for scale, name in self.selections}
        row["export_rejects"] = (self._rows(assets.sql("view/export_rejects"), {"id": trajectory_id})
                                 if "export_rejects" in self.views else [])
        return row
