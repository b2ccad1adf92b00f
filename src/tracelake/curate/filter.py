"""Rollout filters: named, versioned rules in DuckDB SQL (sql/filter_rules/), applied in the order
curate/filter_rules.py declares them (RULES: each rule's SQL, param and needs, declared once).

Each rule is a query over the view `candidates` (the rows every earlier rule kept) returning the
(trajectory_id, detail) pairs it drops. A row is dropped by the first rule that matches it, so
every ingested row ends as exactly one of: kept, or dropped by one named rule, and the funnel
`in = kept + sum(dropped)` holds per source by construction (and is checked).

Order: benchmark contamination first (the funnel shows every rollout a benchmark leaked into), cheap
structural rules next, then control-token literals in message text (`filter.special_tokens: reject`),
token counting only for rows still standing, duplicates last (near-duplicate tasks, then identical
conversations). The two task-level rules read the dedup stage's tables, the
views `contamination` and `task_clusters`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import duckdb
import pyarrow as pa

from tracelake.core.assets import sql
from tracelake.core.errors import BadInput, check
from tracelake.core.executor import Executor
from tracelake.core.ids import COPY_SUFFIX
from tracelake.core.lake import Lake, is_built
from tracelake.core.schema import load_schema
from tracelake.curate.filter_params import FilterParams
from tracelake.curate.filter_rules import RULES, FilterRule
from tracelake.curate.screen_cache import ScreenCache
from tracelake.tokens.special_tokens import ControlTokens
from tracelake.tokens.token_count import (
    CHECKPOINT_S,
    CountStats,
    TokenCounter,
    absorb,
    rendering_key,
    share,
    unshare,
)
from tracelake.tokens.tokenizer import tokenizer_file, tokenizer_fingerprint

TOKEN_BATCH = 128  # conversations read and rendered at a time (~10 MB of text: memory stays flat)


@dataclass
class FilterResult:
    rules: list[str]  # the enabled rules, in order
    funnel: dict[str, dict[str, Any]]  # source -> {"in", "dropped": {rule: n}, "kept"}
    formulas: dict[str, str]
    token_stats: CountStats | None = None  # what counting encoded and what the cache answered
    # trial names shared by rows of different agents or models (kept apart by earlier_episode_v2)
    shared_trial_names: int = 0

    def totals(self) -> dict[str, Any]:
        """The funnel over every source: in, kept, dropped per rule."""
        sources = self.funnel.values()
        return {
            "in": sum(f["in"] for f in sources),
            "kept": sum(f["kept"] for f in sources),
            "dropped": {r: sum(f["dropped"][r] for f in sources) for r in self.rules},
        }

    def metrics(self) -> dict[str, Any]:
        """metrics/filter.json and the pool manifest's counts: rules, per-source funnel, totals."""
        return {
            "rules": self.rules,
            "sources": self.funnel,
            "total": self.totals(),
            "shared_trial_names": self.shared_trial_names,
        }


def run_filters(
    con: duckdb.DuckDBPyConnection,
    params: FilterParams,
    on_tokens: Callable[[int], None] | None = None,
    sources: list[str] = (),
    token_cache: Path | None = None,
    *,
    rendering: Any,
    executor: Executor | None = None,
) -> FilterResult:
    """Apply the enabled rules to the `trajectories` view; leaves tables `pool` and `dropped`.
    `sources` are listed in the funnel even when they have no rows (an empty source shows as 0).
    `token_cache`: the segment token count cache (params tokenizer.cache); None counts without one.
    `rendering`: what LLaMA-Factory encodes for a row (tokens/rendering.py `Rendering`, given by the
    stage: curation does not import the export). Its markup, with filter.tokenizer, decides which
    literals are control tokens (tokens/special_tokens.py); n_tokens counts it, and a row it cannot
    render is dropped (not_exportable_v1)."""
    control = ControlTokens.open(tokenizer_file(params.tokenizer), rendering.markup())
    _default_dedup_views(con)
    con.execute(f"CREATE TEMP TABLE base AS {sql('filter/base')}", {"copy_suffix": COPY_SUFFIX.pattern})
    con.execute("CREATE TEMP TABLE dropped (trajectory_id VARCHAR, rule VARCHAR, detail VARCHAR)")
    con.execute("CREATE TEMP TABLE tokens (trajectory_id VARCHAR, n_tokens BIGINT)")
    con.execute("CREATE TEMP TABLE unexportable (trajectory_id VARCHAR, reason VARCHAR, detail VARCHAR)")
    con.execute(sql("filter/candidates"))
    formulas: dict[str, str] = {}
    enabled = [r for r in RULES if r.enabled(params)]
    stats = None
    formulas["special_tokens"] = f"{params.special_tokens}: {control.describe()}"
    patterns = {"anywhere": control.pattern(response=False), "in_response": control.pattern(response=True)}
    counted = False
    for rule in RULES:
        if rule.needs_counts and params.count_tokens and not counted:  # before the first rule that reads n_tokens
            counted = True
            cache = str(token_cache) if token_cache else None
            counting = rendering.counting(str(params.tokenizer), cache, control, params.special_tokens)
            stats = _count_tokens(con, counting, on_tokens, executor)
            formulas["tokens"] = f"{counting.describe()}, tokenizer sha256 {tokenizer_fingerprint(params.tokenizer)}"
        if rule in enabled and rule.control_patterns:
            _screen(con, rule, {**rule.bind(params), **patterns}, ScreenCache(token_cache, patterns))
            formulas[rule.name] = rule.name
        elif rule in enabled:
            con.execute(
                f"INSERT INTO dropped SELECT trajectory_id, $rule_name, detail "
                f"FROM ({sql('filter_rules/' + rule.sql_name)})",
                {"rule_name": rule.name, **rule.bind(params)},
            )
            formulas[rule.name] = rule.name
    con.execute(sql("filter/pool"))
    [(shared,)] = con.execute(sql("filter/shared_trials")).fetchall()
    return FilterResult(
        [r.name for r in enabled], _funnel(con, [r.name for r in enabled], sources), formulas, stats, shared
    )


@contextmanager
def builds_on_the_ids(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Queries that read `messages` of the rows whose ids a list names (`trajectory_id IN (SELECT
    ...)`) keep the trajectories scan on the probe side of the join and build on the ids. DuckDB's
    build_side_probe_side optimizer builds on whichever side it estimates smaller, and it can
    estimate a Parquet scan at half its rows (1M rows as ten sources: 511,200): with as many ids
    as rows it would build its hash table from every message of every row, and spill them to disk
    (over 14 GB at 1M rows, until the disk was full). The ids are a few dozen bytes a row.
    Reset when the body ends; not when it raises: a streaming result may still be open then (DuckDB
    refuses any other statement), and the failed stage does not use the connection again."""
    con.execute("SET disabled_optimizers = 'build_side_probe_side'")
    yield
    con.execute("RESET disabled_optimizers")


def _screen(con: duckdb.DuckDBPyConnection, rule: FilterRule, bound: dict[str, Any], cache: ScreenCache) -> None:
    """The control-token rule's drops into `dropped`. Its query reads every message, but only of the
    candidates whose conversation the cache has no answer for (a CTE named `candidates` narrows it);
    the others take the kept answer, and the new answers join the cache (screen_cache.py)."""
    con.register("screen_known", cache.known())
    con.register(
        "screen_todo",
        con.sql("""SELECT trajectory_id, conversation_sha256 FROM base
                   WHERE trajectory_id IN (SELECT trajectory_id FROM candidates)
                     AND conversation_sha256 NOT IN (SELECT conversation_sha256 FROM screen_known)""").to_arrow_table(),
    )
    query = f"WITH candidates AS (SELECT trajectory_id FROM screen_todo) {sql('filter_rules/' + rule.sql_name)}"
    with builds_on_the_ids(con):
        con.register("screen_fresh", con.sql(query, params=bound).to_arrow_table())
    con.execute(
        """INSERT INTO dropped
           SELECT trajectory_id, $rule_name, detail FROM screen_fresh
           UNION ALL
           SELECT b.trajectory_id, $rule_name, k.detail FROM base b JOIN screen_known k USING (conversation_sha256)
           WHERE b.trajectory_id IN (SELECT trajectory_id FROM candidates) AND k.detail IS NOT NULL""",
        {"rule_name": rule.name},
    )
    cache.add(
        con.sql("""SELECT DISTINCT ON (t.conversation_sha256) t.conversation_sha256, f.detail
                   FROM screen_todo t LEFT JOIN screen_fresh f USING (trajectory_id)
                   ORDER BY t.conversation_sha256""").to_arrow_table()
    )
    for name in ("screen_known", "screen_todo", "screen_fresh"):
        con.unregister(name)


def _count_tokens(
    con: duckdb.DuckDBPyConnection,
    counting: Any,
    on_tokens: Callable[[int], None] | None,
    executor: Executor | None = None,
) -> CountStats:
    """n_tokens for every row still standing (the tokens table): the length of what LLaMA-Factory
    encodes for it (`counting`: tokens/rendering.py RenderCounting), and the rows it cannot render
    with their reasons (the unexportable table). A conversation counted by an earlier run or stage
    under the same rule and content hash is recalled without reading its messages; the rest are read
    batch by batch in storage order (sorting would hold every conversation in memory), each distinct
    segment encoded once. Each batch is a shard (`counting.count`) mapped on `executor` (default:
    this process); the counts come back in order, and what workers encoded joins this run's cache."""
    rule = counting.rule()
    standing = con.sql("""SELECT trajectory_id, conversation_sha256 FROM trajectories
                          WHERE trajectory_id IN (SELECT trajectory_id FROM candidates)""").to_arrow_table()
    ids: list[str] = []
    counts: list[int] = []
    refused: dict[str, list] = {"trajectory_id": [], "reason": [], "detail": []}
    executor = executor or Executor()
    where = (counting.tokenizer, counting.cache)
    with TokenCounter.open(*where) as counter:
        keys = [rendering_key(rule, h) for h in standing.column("conversation_sha256").to_pylist()]
        missing: list[str] = []
        for trajectory_id, n in zip(standing.column("trajectory_id").to_pylist(), counter.recall(keys)):
            if n is None:
                missing.append(trajectory_id)
            else:
                ids.append(trajectory_id)
                counts.append(n)
        if on_tokens:
            on_tokens(len(ids))
        con.execute("SET threads = 1")  # one row group of conversations in memory at a time, not one per thread
        with builds_on_the_ids(con):  # the plan is made when the reader starts; kept to its end
            con.register("uncounted", pa.table({"trajectory_id": pa.array(missing, pa.string())}))
            reader = con.sql("""SELECT trajectory_id, conversation_sha256, messages FROM trajectories
                                WHERE trajectory_id IN (SELECT trajectory_id FROM uncounted)""").to_arrow_reader(
                TOKEN_BATCH
            )
            order: deque[pa.RecordBatch] = deque()  # the batches in flight, in order: their ids

            def shards() -> Iterator[Any]:
                for batch in reader:
                    order.append(batch)
                    yield counting.shard(batch.column("messages"), batch.column("conversation_sha256").to_pylist())

            share(counter, *where)  # in this process, and in workers forked from it: the loaded cache
            try:
                for counted in executor.map(counting.count, shards()):
                    batch = order.popleft()
                    absorb(counter, counted.fresh, counted.stats)
                    for trajectory_id, n in zip(batch.column("trajectory_id").to_pylist(), counted.totals):
                        if n is not None:
                            ids.append(trajectory_id)
                            counts.append(n)
                    batch_ids = batch.column("trajectory_id")
                    for i, (reason, detail) in sorted(counted.refused.items()):
                        refused["trajectory_id"].append(batch_ids[i].as_py())
                        refused["reason"].append(reason)
                        refused["detail"].append(detail)
                    if on_tokens:
                        on_tokens(batch.num_rows)
                    counter.checkpoint(CHECKPOINT_S)  # a rerun after a crash recalls these shards
            finally:
                unshare(*where)
        con.unregister("uncounted")
        con.execute("RESET threads")
    con.register(
        "token_counts",
        pa.table({"trajectory_id": pa.array(ids, pa.string()), "n_tokens": pa.array(counts, pa.int64())}),
    )
    con.execute("INSERT INTO tokens SELECT * FROM token_counts")
    con.unregister("token_counts")
    con.register("refused_rows", pa.table({k: pa.array(v, pa.string()) for k, v in refused.items()}))
    con.execute("INSERT INTO unexportable SELECT * FROM refused_rows")
    con.unregister("refused_rows")
    return counter.stats


def _funnel(con: duckdb.DuckDBPyConnection, rules: list[str], sources: list[str]) -> dict[str, dict[str, Any]]:
    counts = dict.fromkeys(sources, 0) | dict(con.execute("SELECT source, count(*) FROM base GROUP BY 1").fetchall())
    funnel = {source: {"in": counts[source], "dropped": {r: 0 for r in rules}, "kept": 0} for source in sorted(counts)}
    for source, rule, n in con.execute("""SELECT b.source, d.rule, count(*) FROM dropped d
                                          JOIN base b USING (trajectory_id) GROUP BY 1, 2""").fetchall():
        funnel[source]["dropped"][rule] = n
    for source, n in con.execute("SELECT source, count(*) FROM pool GROUP BY 1").fetchall():
        funnel[source]["kept"] = n
    for source, f in funnel.items():
        check(f["in"] == f["kept"] + sum(f["dropped"].values()), f"funnel does not reconcile for {source}: {f}")
    return funnel


def _default_dedup_views(con: duckdb.DuckDBPyConnection) -> None:
    """Empty `task_clusters` / `contamination` where no dedup output is attached (a connection built
    by hand, e.g. in a notebook): the task-level rules then drop nothing. The filter stage always
    attaches the dedup stage's tables (attach_dedup)."""
    present = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    for table in ("task_clusters", "contamination"):
        if table not in present:
            con.register(f"_{table}_empty", load_schema(table).arrow.empty_table())
            con.execute(f"CREATE TEMP VIEW {table} AS SELECT * FROM _{table}_empty")


def attach_dedup(con: duckdb.DuckDBPyConnection, lake: Lake) -> None:
    """Views `task_clusters` and `contamination` over the dedup stage's output (the task-level rules)."""
    if not is_built(lake.dedup):
        raise BadInput(f"{lake.dedup} is not built: run `dvc repro dedup` first")
    for table in ("task_clusters", "contamination"):
        con.read_parquet(str(lake.dedup / f"{table}.parquet")).create_view(table)
