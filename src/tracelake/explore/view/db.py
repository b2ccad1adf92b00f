"""The queries behind `tracelake view`, on one `lake_connection` connection (the same sandboxed, read-only
views as `tracelake sql`), one request at a time (a DuckDB connection is not thread-safe).

The list is `view_index`, built in memory once when the viewer opens the lake (sql/viewer/rows.sql:
the trajectories' slim columns with the filter's outcome, sorted by id, and where each row lives), so
a page, a facet count or a search's rows never scan the lake's files; a trajectory's messages are read
from the one file that holds it. A lake rebuilt while the viewer runs is seen after a restart (a
trajectory whose file changed says so in one line).

Every query is a file in sql/viewer/ with its values bound as $parameters. The WHERE box's text is the
only SQL a request brings: `SELECT * FROM view_rows WHERE <text>` must be one statement that
`guard_query` accepts, and then runs as the CTE `matched` that the facets narrow.

A request's DuckDB work is bounded: inside `db.request_budget()` (every route of app.py), the queries of
one request run at most REQUEST_SECONDS together (each is interrupted when the request's time is spent)
and the request ends in one line, `Unavailable`, answered 503. Outside a request (opening the lake, an
export's body) each query has QUERY_SECONDS. A lake being rebuilt under the viewer (a view's file gone
or replaced, a view missing from the catalog) is `Rebuilding`, also answered 503.
"""

from __future__ import annotations

import os
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import duckdb

from tracelake.core import assets
from tracelake.core.datasets import KINDS, dataset_kind
from tracelake.core.errors import BadInput
from tracelake.core.freshness import Freshness, pipeline_freshness
from tracelake.core.lake import Lake
from tracelake.core.outputs import read_manifest
from tracelake.explore.sql import guard_query, lake_connection, query_error
from tracelake.explore.view.search import BATCH_ROWS, MAX_HITS, SearchIndex

PAGE_ROWS = 50
QUERY_SECONDS = 30  # one query outside a request (opening the lake, an export's body)
REQUEST_SECONDS = 2.0  # every query of one request together
REBUILDING = "the lake is being rebuilt"  # how explore/sql.py and this module begin that error
_SELECTION = re.compile(r"^selection_[A-Za-z0-9_-]+$")
_ID = re.compile(r"^[0-9a-f]{1,64}$")
_QUOTED = re.compile(r'"([^"]+)"')
_MISSING = re.compile(r'(?:Table|View) with name "?([^"\s!]+)"? does not exist')
NOT_FACETS = ("where", "after", "dataset", "q", "page")  # Query fields that are not facets.sql parameters


class Unavailable(BadInput):
    """A request the viewer stopped (its queries ran past REQUEST_SECONDS) or cannot answer now (the
    lake is being rebuilt): the status is 503, the message one line."""


class Rebuilding(Unavailable):
    """The lake's files changed under the viewer: a rebuild (`dvc repro`) is swapping them."""


def rebuilding(e: BaseException) -> bool:
    """Whether an error says the lake is being rebuilt (this module's, or explore/sql.py's one line)."""
    return isinstance(e, Rebuilding) or (isinstance(e, BadInput) and str(e).startswith(REBUILDING))


_budget = threading.local()  # the request this thread serves: its deadline for DuckDB work


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
    dataset: str | None = None
    q: str | None = None
    page: int | None = None
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
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in NOT_FACETS}


class LakeView:
    """The lake's views and the view's own queries, behind one lock."""

    def __init__(self, lake: Path | str, label: str = "", lake_in_repo: str = "lake"):
        self.lake, self.label, self.lake_in_repo = Path(lake), label or str(lake), lake_in_repo
        files: dict[str, list[str]] = {}
        self.con, self.views = lake_connection(lake, files=files)
        self.files = files  # view -> the Parquet files it was made over (the trajectories': in the lake's order)
        if "trajectories" not in self.views:
            raise BadInput(f"{lake} has no trajectories: run `dvc repro` (or `tracelake ingest`)")
        self.filtered = "pool" in self.views and "dropped" in self.views
        self.lock = threading.Lock()
        none = (
            "(SELECT NULL::VARCHAR AS trajectory_id, NULL::BIGINT AS n_tokens, NULL::VARCHAR AS rule, "
            "NULL::VARCHAR AS detail WHERE false)"
        )
        rows = assets.sql("viewer/rows").format(
            filtered=str(self.filtered).lower(),
            pool_rows="pool" if self.filtered else none,
            dropped_rows="dropped" if self.filtered else none,
        )
        for statement in rows.split(";\n"):
            if statement.strip():
                self._execute(statement, {"files": files["trajectories"]} if "$files" in statement else None)
        self.selections = sorted((name[len("selection_") :], name) for name in self.views if _SELECTION.match(name))
        names = {name for _, name in self.selections}
        self.dataset_ids = {what: view for view, what in self.views.items() if what in names}  # view -> its id
        self.columns = [r["column_name"] for r in self._rows("DESCRIBE view_rows")]
        rows = self._rows(assets.sql("viewer/facet_values"))
        self.facet_values = {
            facet: [(r["value"], r["n"]) for r in rows if r["facet"] == facet] for facet in ("source", "rule")
        }
        self.datasets = self._datasets()
        self.facet_values["dataset"] = [(d["view"], d["rows"]) for d in self.datasets]
        self.search: SearchIndex | None = None
        self.tokenizer = _tokenizer(self.lake)
        self.freshness: Freshness | None = None  # DVC's status of the datasets, once start_freshness has it
        self.freshness_note = "not checked (a lake at a revision is what that commit recorded)"

    def _datasets(self) -> list[dict[str, Any]]:
        """Every dataset of the lake with one trajectory per row (pool, selections, SFT exports): its
        view, content id, kind, rows, distinct trajectories, columns and manifest."""
        found = []
        lake = Lake(self.lake)
        for kind in (k for k in KINDS if k.per_trajectory):  # core/datasets.py: in the order declared
            for scale, directory in sorted(kind.built(lake).items(), key=lambda sd: _scale_order(sd[0])):
                view = kind.view.format(scale=scale)
                if view not in self.views:
                    continue
                manifest = read_manifest(directory)
                counts = self._rows(f'SELECT count(*) AS n, count(DISTINCT trajectory_id) AS t FROM "{view}"')[0]
                found.append(
                    {
                        "view": view,
                        "kind": kind.name,
                        "scale": scale,
                        "dataset_id": manifest.get("dataset_id") or f"pool-{manifest['version_id']}",
                        "rows": counts["n"],
                        "trajectories": counts["t"],
                        "manifest": manifest,
                        "directory": directory,
                        "columns": {c[0] for c in self._execute(f'SELECT * FROM "{view}" LIMIT 0').description},
                    }
                )
        return found

    # --- running ---------------------------------------------------------------------------------

    def _execute(self, sql: str, params: dict | None = None) -> duckdb.DuckDBPyConnection:
        try:
            return self.con.execute(sql, params or {})
        except duckdb.InterruptException:
            raise
        except duckdb.Error as e:
            raise self._error(e, sql) from None

    def _error(self, e: duckdb.Error, sql: str) -> BadInput:
        """One line for a DuckDB error; Rebuilding when the lake changed under the viewer: a file of
        the lake that the query did not name itself is gone or no longer readable (an IO error), or a
        view of the lake is missing from the catalog. The viewer's own queries name no file (the
        trajectory's file is a $parameter): only a WHERE box can, and its errors stay its own."""
        found = query_error(e, sql)
        if rebuilding(found):
            return Rebuilding(str(found))
        line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        root = os.path.realpath(self.lake) + os.sep
        if isinstance(e, duckdb.IOException):
            quoted = _QUOTED.search(line)
            if quoted and quoted[1] not in sql and os.path.realpath(quoted[1]).startswith(root):
                return Rebuilding(f"{REBUILDING} ({quoted[1]} changed: {line}); reload the page")
        if isinstance(e, duckdb.CatalogException):
            named = _MISSING.search(line)
            if named and (named[1] in self.views or named[1] in ("view_index", "view_rows")):
                return Rebuilding(f"{REBUILDING} (the view {named[1]} is missing); reload the page")
        return found

    @contextmanager
    def request_budget(self, seconds: float = REQUEST_SECONDS):
        """Within it, this thread's queries (one request's) run at most `seconds` together: the query
        that reaches the limit is interrupted and the request raises Unavailable."""
        _budget.left = seconds
        try:
            yield
        finally:
            del _budget.left

    def _rows(self, sql: str, params: dict | None = None) -> list[dict[str, Any]]:
        """The rows as dicts. A query is interrupted when it runs past what the request has left of
        REQUEST_SECONDS (QUERY_SECONDS outside a request): a WHERE box can ask for anything, and the
        connection serves one request at a time."""
        left = getattr(_budget, "left", None)
        if left is not None and left <= 0:
            raise Unavailable(_over(REQUEST_SECONDS))
        limit = QUERY_SECONDS if left is None else left
        with self.lock:
            timer = threading.Timer(limit, self.con.interrupt)
            started = time.monotonic()
            timer.start()
            try:
                cur = self._execute(sql, params)
                names = [d[0] for d in cur.description]
                return [dict(zip(names, row)) for row in cur.fetchall()]
            except duckdb.InterruptException:
                raise Unavailable(_over(REQUEST_SECONDS if left is not None else QUERY_SECONDS)) from None
            except duckdb.Error as e:  # raised while fetching
                raise self._error(e, sql) from None
            finally:
                timer.cancel()
                if left is not None:
                    _budget.left = left - (time.monotonic() - started)

    # --- the list --------------------------------------------------------------------------------

    def matched(self, where: str | None) -> str:
        """The CTE body for the WHERE box: view_rows narrowed by the user's condition, checked by the
        same guard as `tracelake sql` and kept on lines of its own (a trailing -- comment ends there)."""
        where = (where or "").strip().rstrip(";").rstrip()  # a condition typed as a statement
        if not where:
            return "SELECT * FROM view_rows"
        with self.lock:
            statements = guard_query(self.con, f"SELECT * FROM view_rows WHERE {where}")
        if len(statements) != 1:
            raise BadInput("sql: the WHERE box takes one condition, not several statements")
        return statements[0]

    def _faceted(self, query: Query, tail: str) -> tuple[str, dict]:
        matched = self.matched(query.where)
        if query.dataset is not None:  # a view name from the lake (checked), never a request's text
            if query.dataset not in {d["view"] for d in self.datasets}:
                raise BadInput(
                    f"view: no dataset {query.dataset!r}; datasets: "
                    f"{', '.join(d['view'] for d in self.datasets) or 'none'}"
                )
            matched = (
                f'SELECT * FROM (\n{matched}\n) WHERE trajectory_id IN (SELECT trajectory_id FROM "{query.dataset}")'
            )
        sql = f"WITH matched AS (\n{matched}\n),\nfaceted AS (\n{assets.sql('viewer/facets')}\n)\n{assets.sql(tail)}"
        return sql, query.facets()

    def page(self, query: Query, n: int = PAGE_ROWS) -> tuple[list[dict], int, str | None]:
        """(rows of this page, rows matched in all, the `after` of the next page or None)."""
        sql, params = self._faceted(query, "viewer/page")
        rows = self._rows(sql, {**params, "after": query.after, "n": n + 1})
        sql, params = self._faceted(query, "viewer/count")
        total = self._rows(sql, params)[0]["n"]
        more = len(rows) > n
        rows = rows[:n]
        return rows, total, rows[-1]["trajectory_id"] if more else None

    # --- freshness ------------------------------------------------------------------------------

    def start_freshness(self, project: Path, background: bool = True) -> None:
        """Ask DVC (core/freshness.py) whether each dataset is up to date, on a thread of its own: it
        takes as long as `dvc status`, and the pages work meanwhile."""
        self.freshness_note = "checking (dvc status) ..."

        def check() -> None:
            found = pipeline_freshness(project)
            self.freshness_note = (
                f"stale: changed since built: {found.describe(found.changed)}; `dvc repro` rebuilds the datasets "
                f"marked STALE"
                if found.changed
                else found.why
            )
            self.freshness = found

        if background:
            threading.Thread(target=check, name="tracelake-freshness", daemon=True).start()
        else:
            check()

    # --- search ---------------------------------------------------------------------------------

    def start_search(self, cache: Path | str, background: bool = True, announce=lambda line: None) -> SearchIndex:
        """Open or build the lake's message index (search.py) in `cache`."""
        self.search = SearchIndex(self.lake, cache)
        self.search.start(self._messages, background=background, announce=announce)
        return self.search

    def _messages(self):
        """(messages in all, RecordBatches of every non-empty message) on a connection of their own, so
        that building the index never holds the pages' connection."""
        con, _ = lake_connection(self.lake)
        total = con.execute("SELECT coalesce(sum(n_messages), 0) FROM trajectories").fetchall()[0][0]
        reader = con.sql(assets.sql("viewer/search_messages")).to_arrow_reader(BATCH_ROWS)

        def batches():
            try:
                yield from reader
            finally:
                con.close()

        return total, batches()

    def searched(self, query: Query) -> tuple[list[dict], dict[str, list], bool, str]:
        """Every trajectory the search matches, best first: (their list rows, each one's matching
        messages best first, whether the hits were capped at MAX_HITS messages, the index's state).
        Trajectories are ranked by their best message's BM25 score and narrowed by the facets and the
        WHERE box."""
        index = self.search
        if index is None or not index.ready:
            return [], {}, False, index.state() if index else "search is off (started with --no-search)"
        hits = index.search(query.q or "")
        best: dict[str, list] = {}
        for h in hits:
            best.setdefault(h.trajectory_id, []).append(h)
        sql, params = self._faceted(query, "viewer/search_rows")
        rows = {r["trajectory_id"]: r for r in self._rows(sql, {**params, "ids": list(best)})}
        return [rows[tid] for tid in best if tid in rows], best, len(hits) >= MAX_HITS, "ready"

    def search_page(self, query: Query, n: int = PAGE_ROWS) -> tuple[list[dict], int, bool, str]:
        """Page `query.page` (1-based) of `searched`: (its rows, each with `hits`, trajectories matched,
        capped, the index's state)."""
        rows, best, capped, state = self.searched(query)
        start = ((query.page or 1) - 1) * n
        page = [{**r, "hits": best[r["trajectory_id"]]} for r in rows[start : start + n]]
        return page, len(rows), capped, state

    # --- one trajectory --------------------------------------------------------------------------

    def trajectory(self, trajectory_id: str) -> dict[str, Any] | None:
        """The trajectory, with `related` (the other traces of its trial), `tasks`, `copies` (scale ->
        (dataset id, copies)) and `export_rejects`; None when no trajectory has this id."""
        if not _ID.match(trajectory_id):
            return None
        found = self._rows("SELECT * FROM view_index WHERE trajectory_id = $id", {"id": trajectory_id})
        if not found:
            return None
        listed = found[0]
        whole = self._rows(assets.sql("viewer/trajectory"), {"file": listed["file"], "id": trajectory_id})
        if not whole:
            raise Rebuilding(f"{REBUILDING} ({listed['file']} changed); restart tracelake view")
        row = {**whole[0], **{k: listed[k] for k in ("n_tokens", "kept", "rule", "detail")}}
        row["related"] = (
            []
            if row["trial_name"] is None
            else self._rows(
                assets.sql("viewer/related"),
                {
                    "id": trajectory_id,
                    "source": row["source"],
                    "trial_name": row["trial_name"],
                    "run_id": row["run_id"],
                    "trace_source": row["trace_source"],
                },
            )
        )
        row["tasks"] = (
            self._rows(assets.sql("viewer/task"), {"task_id": row["task_id"]}) if "tasks" in self.views else []
        )
        template = assets.sql("viewer/copies")
        row["copies"] = {
            scale: (
                self.dataset_ids.get(name, ""),
                self._rows(template.replace("{selection}", f'"{name}"'), {"id": trajectory_id})[0]["copies"],
            )
            for scale, name in self.selections
        }
        row["export_rejects"] = (
            self._rows(assets.sql("viewer/export_rejects"), {"id": trajectory_id})
            if "export_rejects" in self.views
            else []
        )
        row["rollouts"] = self._rows(
            assets.sql("viewer/rollouts"),
            {"id": trajectory_id, "task_id": row["task_id"], "trace_source": row["trace_source"]},
        )
        row["export"] = self.export_row(trajectory_id)
        row["turn_tokens"] = self.turn_tokens(row["messages"])
        return row

    def export_row(self, trajectory_id: str) -> dict[str, Any] | None:
        """Its row in the smallest training export of rendered conversations holding it (conversations,
        system, n_tokens: the SFT export) with that export's `scale`, `dataset_id` and `template`; None
        when no export holds it."""
        for d in self.datasets:
            if not dataset_kind(d["kind"]).is_export or not {"conversations", "system"} <= d["columns"]:
                continue
            found = self._rows(
                f'SELECT conversations, system, n_tokens FROM "{d["view"]}" WHERE trajectory_id = $id LIMIT 1',
                {"id": trajectory_id},
            )
            if found:
                return {
                    **found[0],
                    "scale": d["scale"],
                    "dataset_id": d["dataset_id"],
                    "template": d["manifest"].get("params", {}).get("template"),
                }
        return None

    def turn_tokens(self, messages: list[dict]) -> list[int] | None:
        """Each message's ChatML tokens (`<|im_start|>role\\n…<|im_end|>\\n`) with the pool's tokenizer: a
        message's weight. The pool's n_tokens is the trained rendering (tokens/rendering.py: turns merged,
        think blocks added), so they sum close to it, not to it. None when that tokenizer is not here."""
        if self.tokenizer is None or not messages:
            return None
        from tracelake.tokens.tokenizer import render_chatml

        encoded = self.tokenizer[1].encode_batch([render_chatml([m]) for m in messages], add_special_tokens=False)
        return [len(e.ids) for e in encoded]


def _over(seconds: float) -> str:
    return (
        f"view: the request's queries ran past {seconds:g} s and were stopped "
        "(narrow the WHERE box, the facets or the search)"
    )


def _scale_order(scale: str) -> tuple[float, str]:
    """Scales in size order (316 < 1k < 3k < 10k), by their number and suffix."""
    m = re.match(r"^([0-9.]+)([kKmM]?)", scale)
    if not m:
        return (float("inf"), scale)
    return (float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6}[m.group(2).lower()], scale)


def _tokenizer(lake: Path):
    """The tokenizer the pool counted with (its manifest's params: a path relative to the project, the
    working directory or the lake's parent), as (path, Tokenizer); None when the lake has no pool, the
    path is in neither place, or the file there is not the one the lake's SFT exports record (e.g. a
    lake served at an older revision): no token counts then, rather than wrong ones."""
    pool = Lake(lake).pool
    try:
        path = read_manifest(pool).get("params", {}).get("tokenizer")
    except (BadInput, OSError):
        return None
    if not path:
        return None
    found = next(
        (p for p in (Path(path), lake.parent / path) if p.exists()), None
    )  # the project: here, or the lake's parent
    if found is None:
        return None
    path = str(found)
    from tracelake.tokens.tokenizer import load_tokenizer, tokenizer_fingerprint

    exports = [d for k in KINDS if k.is_export for d in k.built(Lake(lake)).values()]
    recorded = {read_manifest(d).get("inputs", {}).get("tokenizer") for d in exports}
    recorded.discard(None)
    try:
        if recorded and tokenizer_fingerprint(path) not in recorded:  # not the one the lake was built with
            return None
        return path, load_tokenizer(path)
    except Exception:
        return None
