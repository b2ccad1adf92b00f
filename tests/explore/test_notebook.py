"""`tracelake.explore.notebook.open_lake`: the lake's views as DuckDB relations and Polars LazyFrames,
read-only (the guard and the sandbox of `tracelake sql`), in the work tree and at a git revision."""

from __future__ import annotations

import glob
import shutil
import subprocess
import tempfile

import pytest

from tracelake import open_lake  # the package root's one function (tracelake.explore.notebook)
from tracelake.core.errors import BadInput

from ..helpers import tree_bytes


@pytest.fixture(scope="module")
def committed(sample_project, tmp_path_factory):
    """A copy of the built sample, committed (its lake tracked by DVC through dvc.lock)."""
    repo = tmp_path_factory.mktemp("notebook") / "repo"
    shutil.copytree(sample_project, repo, symlinks=True)
    for args in (["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "built"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    return repo


def test_relations_and_lazyframes_over_the_same_views(committed):
    import polars as pl

    before = tree_bytes(committed / "lake")
    with open_lake(committed / "lake") as lake:
        n = lake.sql("SELECT count(*) AS n FROM pool").fetchall()[0][0]
        assert n > 0
        pool = lake.scan("pool")
        assert isinstance(pool, pl.LazyFrame)
        assert pool.select(pl.len()).collect().item() == n
        long = pool.filter(pl.col("n_assistant_turns") >= 10).select("trajectory_id").collect()
        assert long.height == lake.sql("SELECT count(*) FROM pool WHERE n_assistant_turns >= 10").fetchall()[0][0]
        assert "messages" in lake.views and "selection_1k" in lake.views
        for statement in (
            "COPY pool TO 'evil.parquet'",
            "WITH x AS (COPY pool TO 'evil.parquet') SELECT 1",
            "CREATE TABLE t AS SELECT 1",
        ):
            with pytest.raises(BadInput, match="read-only"):
                lake.sql(statement)
        with pytest.raises(BadInput, match="Permission Error"):
            lake.sql("SELECT * FROM read_text('/etc/passwd')").fetchall()
        with pytest.raises(BadInput, match="no view 'nope'"):
            lake.scan("nope")
    assert tree_bytes(committed / "lake") == before
    assert not list(committed.rglob("evil.parquet"))


def test_a_revision_is_read_from_the_dvc_cache(committed):
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=committed, check=True, capture_output=True, text=True).stdout
    trees = f"{tempfile.gettempdir()}/tracelake-{sha[:8]}-*"  # this commit's trees only: other tests make tracelake-*
    before = set(glob.glob(trees))
    with open_lake(committed / "lake") as now:
        expected = now.sql("SELECT count(*) FROM trajectories").fetchall()[0][0]
    lake = open_lake("lake", rev="HEAD", root=committed)
    try:
        assert lake.revision is not None and len(lake.revision.sha) == 40
        assert lake.sql("SELECT count(*) FROM trajectories").fetchall()[0][0] == expected
        assert lake.scan("trajectories").select("trajectory_id").collect().height == expected
    finally:
        lake.close()
    assert set(glob.glob(trees)) == before  # its temporary tree is gone
    with pytest.raises(BadInput, match="unknown revision"):
        open_lake("lake", rev="no-such-branch", root=committed)


def test_nothing_the_notebook_holds_writes_a_file(committed, tmp_path):
    """DuckDB's sandbox lets a statement write inside the directories it may read, and the notebook
    hands out its connection and relations, which run SQL without the guard. Before: each of these
    wrote into the lake (the last one over pool.parquet itself). Now the connection opens no file;
    reads (views, joins, scans) work as before."""
    import duckdb
    import polars as pl

    lake_dir = committed / "lake"
    before = tree_bytes(lake_dir)
    pool = lake_dir / "pool" / "pool.parquet"
    with open_lake(lake_dir) as lake:
        attempts = {
            "relation.query": lambda: lake.sql("SELECT 1 AS a").query(
                "v", f"COPY (SELECT 1) TO '{lake_dir}/pool/x.csv'"
            ),
            "relation.write_parquet": lambda: lake.sql("SELECT * FROM pool LIMIT 1").write_parquet(
                f"{lake_dir}/pool/x.parquet"
            ),
            "relation.to_csv": lambda: lake.sql("SELECT 1 AS a").to_csv(f"{lake_dir}/x.csv"),
            "con.execute COPY": lambda: lake.con.execute(f"COPY (SELECT 1) TO '{lake_dir}/pool/x.csv'"),
            "con.execute COPY over pool.parquet": lambda: lake.con.execute(
                f"COPY (SELECT * FROM pool LIMIT 1) TO '{pool}' (FORMAT parquet, USE_TMP_FILE false)"
            ),
            "con.sql write_parquet elsewhere": lambda: lake.con.sql("SELECT 1 AS a").write_parquet(
                str(tmp_path / "x.parquet")
            ),
            "read by path": lambda: lake.con.sql(f"SELECT count(*) FROM read_parquet('{pool}')").fetchall(),
        }
        for name, attempt in attempts.items():
            with pytest.raises(duckdb.PermissionException, match="disabled by configuration"):
                attempt()
                pytest.fail(f"{name} was allowed")
        joined = lake.sql(
            "SELECT count(*) FROM pool p JOIN trajectories t USING (trajectory_id) JOIN selection_1k s USING (trajectory_id)"
        ).fetchall()[0][0]
        assert joined > 0
        kept = lake.scan("pool").filter(pl.col("n_assistant_turns") >= 5).select("trajectory_id").collect()
        assert kept.height == lake.sql("SELECT count(*) FROM pool WHERE n_assistant_turns >= 5").fetchall()[0][0] > 0
        assert lake.sql("SELECT count(*) FROM messages").fetchall()[0][0] > 0
    assert tree_bytes(lake_dir) == before
    assert not list(tmp_path.iterdir())


def test_every_pair_of_views_joins_and_concatenates(committed):
    """Scans compose: each runs on a connection of its own (one DuckDB connection serves one stream at a
    time: a join of two scans of one connection raised `connection is busy`). Every pair of views, a
    view with itself included, is joined (on a column both have, else a cross join of a few rows) and
    concatenated (their row counts), and each result is checked against DuckDB's own count."""
    import itertools

    import polars as pl

    with open_lake(committed / "lake") as lake:
        views = lake.tables()
        # a dataset id's view is its scale's (CREATE VIEW id AS SELECT * FROM name): paired with it alone
        aliases = {name: base for name, base in views.items() if base in views}
        names = [name for name in views if name not in aliases]
        rows = {name: lake.sql(f'SELECT count(*) FROM "{name}"').fetchall()[0][0] for name in views}
        columns = {name: set(lake.sql(f'SELECT * FROM "{name}" LIMIT 0').columns) for name in names}
        pairs = [*itertools.combinations_with_replacement(names, 2), *((base, a) for a, base in aliases.items())]
        for a, b in pairs:
            left, right = lake.scan(a), lake.scan(b)
            counts = pl.concat([left.select(pl.len()), right.select(pl.len())]).collect()
            assert counts["len"].to_list() == [rows[a], rows[b]], (a, b)
            if b in aliases:
                assert left.collect().equals(right.collect()), (a, b)
                continue
            key = sorted(columns[a] & columns[b] & {"trajectory_id", "task_id", "source", "dataset_id"})
            left, right = left.head(50), right.head(50)
            if key:
                joined = left.select(key[0]).join(right.select(key[0]), on=key[0]).collect()
                assert joined.width == 1, (a, b)
            else:
                joined = left.select(pl.nth(0).alias("x")).join(right.select(pl.nth(0).alias("y")), how="cross")
                assert joined.collect().height == min(rows[a], 50) * min(rows[b], 50), (a, b)
        assert "pool" in repr(lake) and ".scan(view)" in repr(lake)
    assert "closed" in repr(lake)


def test_pandas_is_optional_and_says_so(committed, monkeypatch):
    import sys

    with open_lake(committed / "lake") as lake:
        monkeypatch.setitem(sys.modules, "pandas", None)  # as where pandas is not installed
        with pytest.raises(BadInput, match=r"^pandas is not installed: .*\.pl\(\)"):
            lake.df("SELECT 1")
