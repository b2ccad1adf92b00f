"""Full-text search over every message of the lake, ranked by BM25, for `tracelake view`.

The index is LanceDB's native full-text index over one row per message (trajectory_id, position,
role, content): words lower-cased and ASCII-folded, neither stemmed nor stop-word filtered (terminal
output and code are not prose). DuckDB's own `fts` extension would be the natural home, but duckdb
2.0 does not bundle it and nothing can be downloaded here; LanceDB is already the project's vector
store.

The index lives outside the lake, so the lake stays read-only: in a cache directory keyed by the
content of the trajectories it indexes (`<cache>/<key>/`, key = the trajectories' version ids), so a
lake rebuilt with the same trajectories, or the same lake served at another revision, reuses it, and
a changed lake gets a new one. It is built once, on a background thread while the viewer already
serves pages (a search meanwhile says how far the build is), into a temporary directory renamed into
place when complete; a killed build leaves only that temporary directory, removed by the next one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import orjson

from tracelake.core.lake import Lake
from tracelake.core.outputs import read_manifest
from tracelake.core.swap import remove_stale, temp_path

SEARCH_FORMAT = "tracelake_search_v1"
DEFAULT_CACHE = Path(".tracelake/cache/search")
MAX_HITS = 2000  # messages a search ranks; the list shows the trajectories among them
BATCH_ROWS = 20_000  # messages written to the index at a time (bounded memory)
MAX_TOKEN = 64  # the longest word the index holds (a longer one is left out: no search can match it)
TABLE = "messages"
COLUMNS = ["trajectory_id", "position", "role", "content"]


def index_key(lake: Path | str) -> str | None:
    """The content key of the lake's trajectories (None: it has none): the search index of another
    lake, or of another revision, with the same trajectories is the same index."""
    versions = sorted(
        (source, read_manifest(directory)["version_id"])
        for table, source, directory in Lake(lake).ingested()
        if table == "trajectories"
    )
    if not versions:
        return None
    return hashlib.sha256(orjson.dumps([SEARCH_FORMAT, versions])).hexdigest()[:32]


@dataclass(frozen=True)
class Hit:
    trajectory_id: str
    position: int
    role: str
    score: float
    content: str


class SearchIndex:
    """The lake's message index: `state()` says whether it is ready; `search(text)` ranks messages.

    `start()` opens a complete index from the cache, or builds one on a background thread; `messages`
    is a callable giving (total messages, iterator of pyarrow RecordBatches with COLUMNS)."""

    def __init__(self, lake: Path | str, cache: Path | str = DEFAULT_CACHE):
        self.key = index_key(lake)
        self.cache = Path(cache)
        self.path = self.cache / self.key if self.key else None
        self._lock = threading.Lock()
        self._table = None
        self._written = 0
        self._total = 0
        self._phase = "not started"
        self._error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.seconds = 0.0

    # --- state -----------------------------------------------------------------------------------

    def state(self) -> str:
        """One line: ready, or how far the build is, or why there is no search."""
        if self._table is not None:
            return "ready"
        if self._error:
            return f"search is off: {self._error}"
        if self.key is None:
            return "search is off: the lake has no trajectories"
        if self._phase == "writing" and self._total:
            return (
                f"the search index is being built: {self._written:,} of {self._total:,} messages read "
                f"({100 * self._written // self._total}%); search again in a moment"
            )
        return f"the search index is being built ({self._phase}); search again in a moment"

    @property
    def ready(self) -> bool:
        return self._table is not None

    # --- building --------------------------------------------------------------------------------

    def start(
        self,
        messages: Callable[[], tuple[int, Any]],
        background: bool = True,
        announce: Callable[[str], None] = lambda line: None,
    ) -> None:
        """Open the cached index, or build it (on a thread when `background`)."""
        if self.path is None:
            return
        if (self.path / "complete").exists():
            self._open()
            return

        def run() -> None:
            try:
                self._build(messages, announce)
            except _Stopped:
                self._error = "the viewer stopped before the index was built"
            except Exception as e:  # the viewer keeps serving pages; search says why it is off
                self._error = (
                    f"building the index failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                )
                announce(f"tracelake view: {self._error}")

        if background:
            self._thread = threading.Thread(target=run, name="search-index", daemon=True)
            self._thread.start()
        else:
            run()
            if self._error:
                from tracelake.core.errors import BadInput

                raise BadInput(f"view: {self._error}")

    def stop(self, timeout: float = 20.0) -> None:
        """Stop a build under way (between batches; its temporary directory is removed) and wait for
        it, at most `timeout` seconds (the index step itself cannot be interrupted)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _open(self) -> None:
        import lancedb

        self._table = lancedb.connect(str(self.path)).open_table(TABLE)
        self._phase = "ready"

    def _build(self, messages: Callable[[], tuple[int, Any]], announce: Callable[[str], None]) -> None:
        import lancedb
        import pyarrow as pa
        from lancedb.index import FTS

        started = time.monotonic()
        self.cache.mkdir(parents=True, exist_ok=True)
        remove_stale(self.path)  # builds killed before they finished (their process is gone)
        tmp = temp_path(self.path, "tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        self._phase = "writing"
        self._total, batches = messages()
        schema = pa.schema(
            [
                ("trajectory_id", pa.string()),
                ("position", pa.int32()),
                ("role", pa.string()),
                ("content", pa.large_string()),
            ]
        )

        def counted():
            for batch in batches:
                if self._stop.is_set():
                    raise _Stopped
                batch = pa.RecordBatch.from_arrays(
                    [batch.column(c).cast(schema.field(c).type) for c in COLUMNS], schema=schema
                )
                self._written += batch.num_rows
                yield batch

        db = lancedb.connect(str(tmp))
        try:
            table = db.create_table(TABLE, data=pa.RecordBatchReader.from_batches(schema, counted()), schema=schema)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            if self._stop.is_set():
                raise _Stopped from None
            raise
        finally:
            close = getattr(batches, "close", None)
            if close:
                close()  # the messages' connection
        self._phase = f"indexing {self._written:,} messages"
        table.create_index(
            "content",
            config=FTS(
                with_position=False,
                base_tokenizer="simple",
                lower_case=True,
                stem=False,
                remove_stop_words=False,
                ascii_folding=True,
                max_token_length=MAX_TOKEN,
            ),
        )
        (tmp / "complete").write_text(orjson.dumps({"format": SEARCH_FORMAT, "messages": self._written}).decode())
        try:
            os.rename(tmp, self.path)
        except OSError:  # another viewer finished the same index first: use that one
            shutil.rmtree(tmp, ignore_errors=True)
        self.seconds = time.monotonic() - started
        self._open()
        announce(f"tracelake view: search index ready ({self._written:,} messages, {self.seconds:.0f} s)")

    # --- searching -------------------------------------------------------------------------------

    def search(self, text: str, limit: int = MAX_HITS) -> list[Hit]:
        """The best `limit` messages for `text` (its words, any of them; BM25), best first."""
        if self._table is None:
            return []
        with self._lock:
            found = (
                self._table.search(text, query_type="fts")
                .limit(limit)
                .select([*COLUMNS, "_score"])
                .to_arrow()
                .to_pylist()
            )
        hits = [Hit(r["trajectory_id"], r["position"], r["role"], r["_score"], r["content"]) for r in found]
        hits.sort(key=lambda h: (-h.score, h.trajectory_id, h.position))  # ties in a stable order
        return hits


class _Stopped(Exception):
    """The viewer stopped while the index was being built."""
