"""`tracelake sql` in DuckDB's sandbox: it reads only the lake's finished tables, writes nothing,
never reaches the network or installs an extension, and answers every refusal, awkward result and
race with a rebuild in one line, never a traceback."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
from functools import partial
from pathlib import Path

import pytest

from tracelake.core.errors import BadInput
from tracelake.core.outputs import read_manifest
from tracelake.explore.sql import lake_connection, run_query

from ..helpers import run_ok, run_tracelake
from .test_sql import sql_changing_nothing

SECRET = "tracelake-test-secret-7f3a9c"


ENV = {"TRACELAKE_TEST_TOKEN": SECRET}  # in every command's environment: no query may show it
tracelake = partial(run_tracelake, env=ENV)


def one_line_error(proc: subprocess.CompletedProcess) -> bool:
    """Exit 2 and one line `tracelake: ...` on stderr (after --rev's line naming the revision)."""
    lines = [line for line in proc.stderr.splitlines(keepends=True) if not line.startswith("lake at ")]
    return proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("tracelake: ") and lines[0].endswith("\n")


@pytest.fixture(scope="module")
def project(sample_project, tmp_path_factory) -> Path:
    """A copy of the built sample project, committed (for --rev), with bait around its lake: another
    lake beside it, a directory whose name extends the lake's, and symlinks inside the lake pointing
    out of it. These tests attack it; the shared sample stays clean."""
    base = tmp_path_factory.mktemp("sandbox")
    repo = shutil.copytree(sample_project, base / "project", symlinks=True)
    run_ok(["git", "add", "-A"], repo)
    run_ok(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "built"], repo)
    shutil.copytree(repo / "lake" / "pool", base / "other-lake" / "pool")
    shutil.copytree(repo / "lake" / "pool", repo / "lake2")
    (repo / "lake" / "escape").symlink_to("/etc")
    (repo / "lake" / "passwd.txt").symlink_to("/etc/passwd")
    (repo / "lake" / "other.parquet").symlink_to(base / "other-lake" / "pool" / "pool.parquet")
    return repo


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM read_text('/etc/passwd')",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM sniff_csv('/etc/passwd')",
        "SELECT * FROM read_text('.dvc/config')",
        "SELECT * FROM read_text('lake/../.dvc/config')",
        "SELECT * FROM read_parquet('../other-lake/pool/pool.parquet')",
        "SELECT * FROM read_parquet('lake2/pool.parquet')",
        "SELECT * FROM read_text('lake/escape/passwd')",
        "SELECT * FROM read_text('lake/passwd.txt')",
        "SELECT * FROM read_parquet('lake/other.parquet')",
        "SELECT * FROM glob('lake/escape/*')",
        "SELECT * FROM glob('/*')",
        "SELECT * FROM glob('~/*')",
        # the process's own environment, where secrets live (SECRET is in it)
        "SELECT * FROM read_text('/proc/self/environ')",
        "SELECT * FROM read_blob('/proc/self/environ')",
        "SELECT * FROM read_csv('/proc/self/environ', header = false)",
        "SELECT * FROM glob('/proc/self/*')",
    ],
)
def test_nothing_outside_the_lake_is_readable(project, query):
    proc = tracelake(project, "sql", query, "--format", "json")
    assert one_line_error(proc), proc.stderr
    assert proc.stdout == "" and "root:" not in proc.stderr
    assert SECRET not in proc.stdout + proc.stderr


def test_the_home_directory_cannot_be_listed(project):
    proc = tracelake(project, "sql", f"SELECT * FROM glob('{Path.home()}/*')", "--format", "json")
    assert one_line_error(proc) and proc.stdout == "", proc.stderr


@pytest.mark.parametrize(
    "statement",
    [
        "WITH x AS (COPY (SELECT 1 AS a) TO 'lake/pool/pool.parquet') SELECT 1",
        "WITH x AS (COPY pool TO 'lake/evil.parquet') SELECT * FROM x",
        "WITH x AS (COPY (SELECT 1 AS a) TO '../evil.csv') SELECT 1",
        "select 1; with x as (copy (select 1 as a) to 'lake/evil.csv') select 1",
        "SELECT * FROM (WITH x AS (COPY (SELECT 1 AS a) TO 'lake/evil.csv') SELECT 1)",
        "EXPLAIN ANALYZE COPY (SELECT 1 AS a) TO 'lake/evil.csv'",
        "EXPLAIN ANALYZE COPY (SELECT 1 AS a) TO '../evil.csv'",
        "explain analyse copy pool to 'lake/pool/pool.parquet'",
        "EXPLAIN ANALYZE WITH x AS (COPY (SELECT 1 AS a) TO 'lake/evil.csv') SELECT 1",
        "/* hi */ EXPLAIN /* there */ ANALYZE COPY (SELECT 1 AS a) TO 'lake/evil.csv'",
        "EXPLAIN COPY (SELECT 1 AS a) TO 'lake/evil.csv'",
        "EXPLAIN ANALYZE CREATE TABLE t AS SELECT 1",
        "EXPLAIN (ANALYZE, FORMAT json) COPY (SELECT 1 AS a) TO 'lake/evil.csv'",
        "EXPLAIN (ANALYZE) WITH x AS (COPY (SELECT 1 AS a) TO 'lake/evil.csv') SELECT 1",
        "SELECT * FROM query('COPY (SELECT 1 AS a) TO ''lake/evil.csv''')",
        "ATTACH 'lake/evil.duckdb'",
    ],
)
def test_writes_are_refused_inside_and_outside_the_lake(project, statement):
    proc = sql_changing_nothing(project, statement, env=ENV)
    assert one_line_error(proc) and proc.stderr.startswith("tracelake: sql: ") and proc.stdout == "", proc.stderr
    assert not (project.parent / "evil.csv").exists()


def test_guard_query_is_the_reusable_check(project):
    from tracelake.explore.sql import guard_query

    con, _ = lake_connection(project / "lake")
    assert len(guard_query(con, "SELECT 1; FROM pool LIMIT 1")) == 2
    for explain in (
        "EXPLAIN ANALYZE SELECT count(*) FROM pool",
        "EXPLAIN (SELECT 1)",
        "explain analyze (from pool)",
        "EXPLAIN (FORMAT json) SELECT 1",
        "EXPLAIN (ANALYZE) SUMMARIZE pool",
    ):
        assert len(guard_query(con, explain)) == 1, explain
        assert run_query(con, explain).num_rows >= 1, explain
    for refused in (
        "WITH x AS (COPY pool TO 'lake/evil.csv') SELECT 1",
        "EXPLAIN ANALYZE COPY pool TO 'x.csv'",
        "DELETE FROM pool",
        "",
    ):
        with pytest.raises(BadInput):
            guard_query(con, refused)


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM 'https://example.com/data.parquet'",
        "SELECT * FROM read_parquet('s3://bucket/data.parquet')",
        "SELECT * FROM read_json('http://example.com/x.json')",
    ],
)
def test_no_network_and_no_extension_install(project, query):
    proc = tracelake(project, "sql", query)
    assert one_line_error(proc), proc.stderr
    assert "install" not in proc.stderr.lower()


@pytest.mark.parametrize(
    "query, fmt",
    [
        ("SELECT * FROM sniff_csv('/etc/passwd')", "csv"),
        ("SELECT * FROM sniff_csv('lake/pool/manifest.json')", "csv"),
        ("SELECT * FROM duckdb_secrets()", "csv"),
        ("SELECT * FROM duckdb_secrets()", "table"),
        ("SELECT ['a', 'b'] AS l", "csv"),
        ("SELECT * FROM nope", "csv"),
    ],
)
def test_awkward_queries_never_end_in_a_traceback(project, query, fmt):
    proc = tracelake(project, "sql", query, "--format", fmt)
    assert "Traceback" not in proc.stderr and "╭" not in proc.stderr, proc.stderr
    assert proc.returncode == 0 or one_line_error(proc), proc.stderr


def test_csv_writes_nested_values_as_json(project):
    query = "SELECT 1 AS n, ['a', 'b'] AS l, {'x': 1, 'y': [2, 3]} AS s, NULL::INTEGER[] AS e, MAP {'k': 'v'} AS m"
    proc = tracelake(project, "sql", query, "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.reader(io.StringIO(proc.stdout)))
    assert rows[0] == ["n", "l", "s", "e", "m"]
    assert rows[1][:4] == ["1", '["a","b"]', '{"x":1,"y":[2,3]}', ""] and json.loads(rows[1][4])
    messages = tracelake(project, "sql", "SELECT trajectory_id, messages FROM trajectories LIMIT 2", "--format", "csv")
    assert messages.returncode == 0, messages.stderr
    for row in list(csv.reader(io.StringIO(messages.stdout)))[1:]:
        assert isinstance(json.loads(row[1]), list)


def test_every_view_and_the_lake_files_stay_readable(project):
    lake = project / "lake"
    con, views = lake_connection(lake)
    for name in views:
        assert run_query(con, f'SELECT count(*) AS n FROM "{name}"').num_rows == 1, name
    pool = read_manifest(lake / "pool")["tables"]["pool"]["rows"]
    for query, n in (
        ("SELECT count(*) AS n FROM pool", pool),
        ("SELECT count(*) AS n FROM read_parquet('lake/pool/pool.parquet')", pool),
        ("SELECT count(*) AS n FROM glob('lake/pool/*.parquet')", 2),
    ):
        proc = tracelake(project, "sql", query, "--format", "csv")
        assert proc.returncode == 0 and proc.stdout.splitlines()[1] == str(n), proc.stderr
    manifest = tracelake(project, "sql", "SELECT kind FROM read_json('lake/pool/manifest.json')", "--format", "json")
    assert manifest.returncode == 0, manifest.stderr
    assert json.loads(manifest.stdout)["kind"] == read_manifest(lake / "pool")["kind"]


def test_rev_reads_the_dvc_cache_and_nothing_else(project):
    lake = project / "lake"
    pool = read_manifest(lake / "pool")["tables"]["pool"]["rows"]
    proc = tracelake(project, "sql", "--rev", "HEAD", "SELECT count(*) AS n FROM pool", "--format", "csv")
    assert proc.returncode == 0 and proc.stdout.splitlines()[1] == str(pool), proc.stderr
    views = tracelake(project, "sql", "--rev", "HEAD", "SELECT count(*) AS n FROM sft_1k", "--format", "csv")
    assert views.returncode == 0, views.stderr
    cached = next((project / ".dvc" / "cache").rglob("*.dir"))  # a directory listing: never a view's file
    for query in (
        f"SELECT * FROM read_blob('{cached}')",
        "SELECT * FROM read_text('/etc/passwd')",
        "SELECT * FROM read_text('.dvc/config')",
    ):
        refused = tracelake(project, "sql", "--rev", "HEAD", query, "--format", "json")
        assert one_line_error(refused) and refused.stdout == "", refused.stderr


def plant_unfinished(lake: Path) -> None:
    """What killed runs leave: hidden temporary copies of finished directories (with and without a
    manifest), a half-written part, and a directory that never got its manifest."""
    for parent, name in (
        ("trajectories", "nl2bash"),
        ("tasks", "nl2bash"),
        ("selections", "1k"),
        ("exports/sft", "1k"),
    ):
        src = lake / parent / name
        shutil.copytree(src, lake / parent / f".{name}.tmp-999")
        shutil.copytree(src, lake / parent / f".{name}.old-998")
        (lake / parent / f".{name}.old-998" / "manifest.json").unlink()
    part = next((lake / "trajectories" / "nl2bash" / "trajectories").glob("part-*.parquet")).read_bytes()
    for d in (
        lake / "trajectories" / ".nl2bash.tmp-997" / "trajectories",
        lake / "trajectories" / "new" / "trajectories",
    ):
        d.mkdir(parents=True)
        (d / "part-00000.parquet").write_bytes(part[: len(part) // 2])
    shutil.copytree(lake / "tasks" / "nl2bash", lake / "tasks" / "unfinished")
    (lake / "tasks" / "unfinished" / "manifest.json").unlink()


def counts(lake: Path) -> dict[str, int]:
    con, views = lake_connection(lake)
    return {name: run_query(con, f'SELECT count(*) AS n FROM "{name}"').column("n")[0].as_py() for name in views}


def test_views_read_only_finished_directories(sample_project, tmp_path):
    lake = shutil.copytree(sample_project / "lake", tmp_path / "lake", symlinks=True)
    before = counts(lake)
    plant_unfinished(lake)
    assert counts(lake) == before


def test_a_file_that_vanishes_asks_to_run_again(sample_project, tmp_path):
    lake = shutil.copytree(sample_project / "lake", tmp_path / "lake", symlinks=True)
    con, _ = lake_connection(lake)
    part = sorted((lake / "trajectories" / "superuser" / "trajectories").glob("part-*.parquet"))[-1]
    part.rename(tmp_path / part.name)
    for query in ("SELECT count(*) FROM messages", "SELECT count(*) FROM trajectories"):
        with pytest.raises(
            BadInput,
            match=r"^the lake is being rebuilt \(.*part-\d+\.parquet vanished\); "
            r"run the query again$",
        ):
            run_query(con, query)
    (tmp_path / part.name).rename(part)
    (lake / "pool" / "pool.parquet").unlink()
    with pytest.raises(BadInput, match=r"^the lake is being rebuilt \(.*pool\.parquet vanished\)"):
        lake_connection(lake)
    with pytest.raises(BadInput, match=r"^sql: .*nope\.parquet"):  # a file the query names is the user's
        run_query(con, f"SELECT * FROM read_parquet('{lake / 'scores' / 'nope.parquet'}')")


def test_a_directory_caught_mid_rebuild_asks_to_run_again(sample_project, tmp_path):
    """DVC removes a stage's outputs before it runs it, then links their files back one by one: a
    directory can be missing, or hold its manifest before all its parts."""
    lake = shutil.copytree(sample_project / "lake", tmp_path / "lake", symlinks=True)
    source = lake / "trajectories" / "superuser"
    part = sorted((source / "trajectories").glob("part-*.parquet"))[-1]
    part.rename(tmp_path / part.name)
    with pytest.raises(BadInput, match=rf"^the lake is being rebuilt \({source} is incomplete\); run the query again$"):
        lake_connection(lake)
    (tmp_path / part.name).rename(part)
    (source / "manifest.json").unlink()
    with pytest.raises(
        BadInput, match=rf"^the lake is being rebuilt \({source}, which the pool was made from, is missing"
    ):
        lake_connection(lake)
    shutil.rmtree(source)
    with pytest.raises(BadInput, match=r"^the lake is being rebuilt \(.*superuser, which the pool"):
        lake_connection(lake)
