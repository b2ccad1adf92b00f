"""Readers during a rebuild: while `dvc repro --force` rewrites the lake, every query gives the
answer of the old version or of the new one, or fails with a one-line 'being rebuilt' error; never
a mix of versions, never a traceback.

DVC deletes a stage's outputs before running it and, once it has run, links every file of them
again from its cache; output_dir swaps a whole directory in at once; the views read only built,
non-hidden directories (explore/sql.py). A forced rebuild of the same inputs gives the same bytes,
so a query over every source gives one count whichever sources it finds rebuilt.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest

from tracelake.core.errors import BadInput
from tracelake.explore.sql import lake_connection, run_query

QUERY = "select count(*) from trajectories"
POOL_QUERY = "SELECT count(*) FROM pool"
REBUILDING = "being rebuilt"


def _env() -> dict[str, str]:
    return dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


def query_in_process(lake: Path, query: str = QUERY) -> tuple[str, object]:
    """('ok', count), ('error', one-line message) for a BadInput, ('traceback', text) for anything else."""
    try:
        con, _ = lake_connection(lake)
        try:
            return "ok", run_query(con, query).column(0)[0].as_py()
        finally:
            con.close()
    except BadInput as e:
        return "error", str(e)
    except Exception:  # noqa: BLE001 - the point: any other failure is a bug the test reports
        return "traceback", traceback.format_exc()


def query_notebook(lake: Path, query: str = POOL_QUERY) -> tuple[str, object]:
    """The same through the notebook's open_lake: its `sql`, then its `scan` of the pool."""
    import polars as pl

    from tracelake.explore.notebook import open_lake as open_notebook

    try:
        with open_notebook(lake) as nb:
            n = nb.sql(query).fetchall()[0][0]
            scanned = nb.scan("pool").select(pl.len()).collect().item()
            return ("ok", n) if scanned == n else ("traceback", f"sql counted {n}, scan {scanned}")
    except BadInput as e:
        return "error", str(e)
    except Exception:  # noqa: BLE001
        return "traceback", traceback.format_exc()


def query_cli(repo: Path, query: str = QUERY) -> tuple[str, object]:
    """The same through `tracelake sql` (a process of its own: what a user runs)."""
    proc = subprocess.run(
        ["tracelake", "sql", query, "--format", "csv"], cwd=repo, env=_env(), capture_output=True, text=True
    )
    if "Traceback" in proc.stdout + proc.stderr:
        return "traceback", proc.stdout + proc.stderr
    if proc.returncode == 0:
        return "ok", int(proc.stdout.split()[-1])
    return "error", proc.stderr.strip()


def readers_during(repo: Path, rebuild: list[str], query, *, max_queries: int, max_seconds: float) -> list:
    """Run `rebuild` in repo and `query` in a loop until it ends (or the bounds are reached); the
    answers. The rebuild must succeed."""
    proc = subprocess.Popen(rebuild, cwd=repo, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    answers, start = [], time.monotonic()
    while proc.poll() is None and len(answers) < max_queries and time.monotonic() - start < max_seconds:
        answers.append(query())
    out, _ = proc.communicate()
    assert proc.returncode == 0, out
    return answers


def check(answers: list, expected: int, minimum: int) -> None:
    bad = [
        a
        for a in answers
        if not (a == ("ok", expected) or (a[0] == "error" and REBUILDING in a[1] and "\n" not in a[1].strip()))
    ]
    assert not bad, f"{len(bad)} of {len(answers)} answers were neither {expected} nor 'being rebuilt':\n" + "\n".join(
        f"{kind}: {value}" for kind, value in bad[:5]
    )
    assert len(answers) >= minimum, f"only {len(answers)} queries ran during the rebuild"
    assert any(a == ("ok", expected) for a in answers)


@pytest.fixture
def repo(sample_project, tmp_path) -> Path:
    """A copy of the built sample (the fixture is shared: never rebuilt in place)."""
    return Path(shutil.copytree(sample_project, tmp_path / "repo", symlinks=True))


def test_readers_during_a_forced_ingest_see_one_version_or_an_error(repo):
    expected = query_in_process(repo / "lake")
    assert expected[0] == "ok" and expected[1] > 0
    answers = readers_during(
        repo,
        ["dvc", "repro", "--force", "--single-item", "ingest"],
        lambda: query_in_process(repo / "lake"),
        max_queries=200,
        max_seconds=90,
    )
    check(answers, expected[1], minimum=10)


@pytest.mark.long
def test_readers_during_a_forced_rebuild_of_everything(repo):
    expected = query_in_process(repo / "lake")[1]
    for query in (lambda: query_in_process(repo / "lake"), lambda: query_cli(repo)):
        answers = readers_during(repo, ["dvc", "repro", "--force"], query, max_queries=5000, max_seconds=600)
        check(answers, expected, minimum=20)


def forced_filter_in_a_loop(repo: Path, query, *, rebuilds: int, max_seconds: float) -> list:
    """`dvc repro --force --single-item filter` (DVC removes lake/pool, the stage builds it again
    and swaps it in) `rebuilds` times in a row, `query` in a loop all the while; the answers."""
    answers, start = [], time.monotonic()
    for _ in range(rebuilds):
        answers += readers_during(
            repo,
            ["dvc", "repro", "--force", "--single-item", "filter"],
            query,
            max_queries=400,
            max_seconds=max_seconds - (time.monotonic() - start),
        )
    return answers


def test_readers_of_the_pool_during_forced_filters_never_see_a_catalog_error(repo):
    """The pool is missing while DVC rebuilds it: a query naming it says 'being rebuilt', whether
    it comes from `tracelake sql`, the library's open_lake or the notebook's (sql and scan)."""
    lake = repo / "lake"
    expected = query_in_process(lake, POOL_QUERY)
    assert expected[0] == "ok" and expected[1] > 0
    queries = [
        lambda: query_in_process(lake, POOL_QUERY),
        lambda: query_notebook(lake),
        lambda: query_cli(repo, POOL_QUERY),
    ]
    turn = iter(range(10**9))
    answers = forced_filter_in_a_loop(repo, lambda: queries[next(turn) % 3](), rebuilds=2, max_seconds=240)
    check(answers, expected[1], minimum=10)
    assert any(a[0] == "error" for a in answers), "no query ran while the pool was missing"


@pytest.mark.long
def test_readers_of_the_pool_during_many_forced_filters(repo):
    lake = repo / "lake"
    expected = query_in_process(lake, POOL_QUERY)[1]
    for query in (
        lambda: query_in_process(lake, POOL_QUERY),
        lambda: query_notebook(lake),
        lambda: query_cli(repo, POOL_QUERY),
    ):
        check(forced_filter_in_a_loop(repo, query, rebuilds=10, max_seconds=900), expected, minimum=50)


def test_a_missing_pool_is_being_rebuilt_only_while_a_build_of_it_runs(repo):
    """Without a rebuild, a missing pool is 'not built' (one line); with a live build's temporary
    name beside it, or a live DVC command holding it in .dvc/tmp/rwlock, it is 'being rebuilt'."""
    from tracelake.explore.notebook import open_lake as open_notebook

    lake = repo / "lake"
    shutil.rmtree(lake / "pool")
    kind, message = query_in_process(lake, POOL_QUERY)
    assert kind == "error" and "not built" in message and "Catalog" not in message, message
    assert query_in_process(lake)[0] == "ok"  # the other tables are read as ever
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (lake / f".pool.tmp-{sleeper.pid}").mkdir()  # a build of the pool, under way
        for answer in (query_in_process(lake, POOL_QUERY), query_cli(repo, POOL_QUERY)):
            assert answer[0] == "error" and REBUILDING in answer[1] and "\n" not in answer[1], answer
        with open_notebook(lake) as nb:
            with pytest.raises(BadInput, match=REBUILDING):
                nb.scan("dropped")
            with pytest.raises(BadInput, match=REBUILDING):
                nb.sql("SELECT * FROM funnel")
        (lake / f".pool.tmp-{sleeper.pid}").rmdir()
        rwlock = repo / ".dvc" / "tmp" / "rwlock"
        rwlock.parent.mkdir(exist_ok=True)
        held = {"write": {str((lake / "pool").resolve()): {"pid": sleeper.pid, "cmd": "dvc repro"}}}
        rwlock.write_text(json.dumps(held))
        assert REBUILDING in query_in_process(lake, POOL_QUERY)[1]
    finally:
        sleeper.kill()
        sleeper.wait()
    assert "not built" in query_in_process(lake, POOL_QUERY)[1]  # the command holding it is gone


def test_status_reading_a_vanished_file_says_the_lake_is_being_rebuilt(tmp_path):
    from tracelake.explore.status import trajectory_overview

    with pytest.raises(BadInput, match=REBUILDING):
        trajectory_overview([str(tmp_path / "trajectories" / "s" / "trajectories" / "part-00000.parquet")])
