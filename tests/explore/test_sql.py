"""`tracelake sql`: read-only DuckDB views over the lake, one-shot and interactive."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tracelake.core.errors import BadInput
from tracelake.core.outputs import read_manifest
from tracelake.explore.sql import lake_connection, run_query

from ..helpers import ROOT, run_tracelake

EXAMPLES = sorted((ROOT / "sql" / "examples").glob("*.sql"))


def lake_digest(lake: Path) -> dict[str, str]:
    return {
        str(p.relative_to(lake)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(lake.rglob("*"))
        if p.is_file()
    }


def sql_changing_nothing(project: Path, statement: str, **kwargs) -> subprocess.CompletedProcess:
    """`tracelake sql STATEMENT` in a project (kwargs: run_tracelake's), checking that every file
    of its lake is the same after it."""
    lake = project / "lake"
    before = lake_digest(lake)
    proc = run_tracelake(project, "sql", statement, **kwargs)
    assert lake_digest(lake) == before, proc.stderr
    return proc


def test_views_cover_every_table_and_dataset(sample_project):
    lake = sample_project / "lake"
    con, views = lake_connection(lake)
    for name in (
        "tasks",
        "trajectories",
        "messages",
        "scores",
        "rejects",
        "pool",
        "dropped",
        "funnel",
        "rl_prompts",
        "harbor_tasks",
        "export_rejects",
    ):
        assert name in views, name
    trajectories = pq.read_table(sorted(lake.glob("trajectories/*/trajectories/part-*.parquet")))
    assert (
        run_query(con, "SELECT count(*) AS n FROM messages").column("n")[0].as_py()
        == pc.sum(trajectories["n_messages"]).as_py()
    )
    for scale in ("316", "1k"):
        sel, sft = read_manifest(lake / "selections" / scale), read_manifest(lake / "exports" / "sft" / scale)
        for view, m in ((f"selection_{scale}", sel), (f"sft_{scale}", sft)):
            n = m["counts"].get("rows", m["counts"].get("rows_out"))
            assert run_query(con, f'SELECT count(*) AS n FROM "{m["dataset_id"]}"').column("n")[0].as_py() == n
            assert run_query(con, f"SELECT count(*) AS n FROM {view}").column("n")[0].as_py() == n
    funnel = read_manifest(lake / "pool")["counts"]
    got = run_query(con, "SELECT sum(dropped) AS d FROM funnel").column("d")[0].as_py()
    assert got == sum(sum(f["dropped"].values()) for f in funnel["sources"].values())


@pytest.mark.parametrize(
    "statement",
    [
        "COPY trajectories TO 'lake/evil.parquet'",
        "CREATE TABLE t AS SELECT 1",
        "DROP VIEW trajectories",
        "ATTACH 'lake/x.duckdb'",
        "SET enable_external_access = true",
        "INSTALL httpfs",
        "SELECT 1; COPY (SELECT 1) TO 'lake/x.csv'",
    ],
)
def test_writes_are_refused_and_change_nothing(sample_project, statement):
    proc = sql_changing_nothing(sample_project, statement)
    assert proc.returncode == 2 and proc.stderr.startswith("tracelake: sql: ") and "read-only" in proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stdout == ""


def test_each_example_runs(sample_project):
    assert len(EXAMPLES) >= 5
    for example in EXAMPLES:
        proc = run_tracelake(sample_project, "sql", "--file", str(example), "--format", "json")
        assert proc.returncode == 0, (example.name, proc.stderr)
        rows = [json.loads(line) for line in proc.stdout.splitlines()]
        assert rows or example.name == "tasks_all_timed_out.sql", example.name


def test_turn_histogram_adds_up(sample_project):
    con, _ = lake_connection(sample_project / "lake")
    got = run_query(con, (ROOT / "sql" / "examples" / "turn_histogram.sql").read_text())
    main = run_query(con, "SELECT source, count(*) AS n FROM trajectories WHERE trace_source = 'main' GROUP BY ALL")
    expected = dict(zip(main["source"].to_pylist(), main["n"].to_pylist()))
    totals: dict[str, int] = {}
    for row in got.to_pylist():
        totals[row["source"]] = totals.get(row["source"], 0) + row["trajectories"]
    assert totals == expected


def test_formats(sample_project, tmp_path):
    query = "SELECT source, count(*) AS n FROM trajectories GROUP BY source ORDER BY source"
    csv = run_tracelake(sample_project, "sql", query, "--format", "csv").stdout.splitlines()
    assert csv[0] == '"source","n"' and len(csv) > 2
    out = tmp_path / "r.parquet"
    assert run_tracelake(sample_project, "sql", query, "--format", "parquet", "--out", str(out)).returncode == 0
    rows = pq.read_table(out).to_pylist()
    assert [f'"{r["source"]}",{r["n"]}' for r in rows] == csv[1:]
    table = run_tracelake(sample_project, "sql", query).stdout
    assert rows[0]["source"] in table and f"{len(rows)} row(s)" in table
    bad = run_tracelake(sample_project, "sql", query, "--format", "parquet")
    assert bad.returncode == 2


def test_interactive_prompt(sample_project):
    proc = run_tracelake(
        sample_project, "sql", input=".tables\nSELECT count(*) AS n\nFROM tasks;\nDELETE FROM tasks;\n.quit\n"
    )
    assert proc.returncode == 0, proc.stderr
    n = sum(read_manifest(d)["tables"]["tasks"]["rows"] for d in (sample_project / "lake" / "tasks").iterdir())
    assert "messages" in proc.stdout and str(n) in proc.stdout and "DELETE statements are refused" in proc.stdout


def test_bad_sql_and_missing_lake(sample_project, tmp_path):
    proc = run_tracelake(sample_project, "sql", "SELECT nope FROM trajectories")
    assert proc.returncode == 2 and proc.stderr.startswith("tracelake: sql: ") and proc.stderr.count("\n") == 1
    with pytest.raises(BadInput, match="not a lake"):
        lake_connection(tmp_path / "nothing")
