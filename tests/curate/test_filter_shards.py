"""The filter's token counting as shards (curate/filter.py `_count_tokens`, tokens/rendering.py
`count_rendering_shard`): the same counts on every executor, and a run killed mid-way is resumed by a
rerun that counts only the shards not yet written to the token cache."""

from __future__ import annotations

import math

import pytest

from tracelake.core.duckdb_views import connect
from tracelake.core.executor import Executor
from tracelake.curate import filter as filter_module
from tracelake.curate.filter import run_filters
from tracelake.curate.filter_params import FilterParams
from tracelake.tokens.rendering import RenderCounting
from tracelake.tokens.tokenizer import build_tokenizer

from ..helpers import killed_after
from .test_filters import RENDERING, build_lake, trow

ROWS, BATCH = 300, 40  # rows, all counted (the default rules keep them); conversations a shard


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    tokenizer = build_tokenizer(root / "tokenizer")
    lake, sources = build_lake(root, {"s": [trow(f"r{i}", turns=5 + i % 7) for i in range(ROWS)]})
    return lake, sources, tokenizer


def run(lake, executor: Executor, cache, stats: list | None = None) -> dict[str, int]:
    lake_dir, sources, tokenizer = lake
    con = connect(lake_dir, sources, tables=("trajectories",))
    params = FilterParams(tokenizer=str(tokenizer), count_tokens=True, max_tokens=10**6)
    result = run_filters(con, params, token_cache=cache, rendering=RENDERING, executor=executor)
    if stats is not None:
        stats.append(result.token_stats)
    return dict(con.execute("SELECT trajectory_id, n_tokens FROM tokens").fetchall())


@pytest.fixture(autouse=True)
def small_shards(monkeypatch):
    monkeypatch.setattr(filter_module, "TOKEN_BATCH", BATCH)


def test_every_executor_counts_the_same_shards_the_same(lake, tmp_path):
    local = Executor("local")
    expected = run(lake, local, tmp_path / "local")
    assert len(expected) == ROWS and local.shards >= math.ceil(ROWS / BATCH)
    processes = Executor("processes", 2)
    assert run(lake, processes, tmp_path / "processes") == expected
    assert processes.shards == local.shards
    assert run(lake, Executor("local"), None) == expected  # no cache at all


def local_shards(lake, tmp_path) -> int:
    ex = Executor("local")
    run(lake, ex, tmp_path / "fresh")
    return ex.shards


def test_a_killed_run_is_resumed_shard_by_shard(lake, tmp_path, monkeypatch):
    expected = run(lake, Executor("local"), tmp_path / "clean")
    cache = tmp_path / "cache"
    monkeypatch.setattr(filter_module, "CHECKPOINT_S", 0.0)  # every finished shard is written at once
    real, executed = RenderCounting.count, []
    monkeypatch.setattr(
        RenderCounting, "count", staticmethod(killed_after(real, 3, executed))
    )  # killed in the 4th shard
    with pytest.raises(KeyboardInterrupt):
        run(lake, Executor("local"), cache)
    monkeypatch.setattr(RenderCounting, "count", staticmethod(real))
    finished = sum(len(shard.messages) for shard in executed)
    stats, full = [], []
    rerun = Executor("local")
    assert run(lake, rerun, cache, stats) == expected
    run(lake, Executor("local"), tmp_path / "fresh-full", full)
    # only the conversations of the shards never finished are rendered and counted again
    assert stats[0].recalled == finished and 0 < stats[0].texts < full[0].texts
    assert 0 < rerun.shards < local_shards(lake, tmp_path)
    again = Executor("local")
    assert run(lake, again, cache) == expected
    assert again.shards == 0  # everything counted is recalled
