"""Readers during a rebuild: while `dvc repro --force` rewrites the lake, every query gives the
answer of the old version or of the new one, or fails with a one-line 'being rebuilt' error; never
a mix of versions, never a traceback.

DVC deletes a stage's outputs before running it and, once it has run, links every file of them
again from its cache; output_dir swaps a whole directory in at once; the views read only built,
non-hidden directories (explore/sql.py). A forced rebuild of the same inputs gives the same bytes,
so a query over every source gives one count whichever sources it finds rebuilt.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

import pytest

from tracelake.core.errors import BadInput
from tracelake.explore.sql import open_lake, run_query

QUERY = "select count(*) from trajectories"
REBUILDING = "being rebuilt"


def _env() -> dict[str, str]:
    return dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


def query_in_process(lake: Path) -> tuple[str, object]:
    """('ok', count), ('error', one-line message) for a BadInput, ('traceback', text) for anything else."""
    try:
        con, _ = open_lake(lake)
        try:
            return "ok", run_query(con, QUERY).column(0)[0].as_py()
        finally:
            con.close()
    except BadInput as e:
        return "error", str(e)
    except Exception:  # noqa: BLE001 - the point: any other failure is a bug the test reports
        return "traceback", traceback.format_exc()


def query_cli(repo: Path) -> tuple[str, object]:
    """The same through `tracelake sql` (a process of its own: what a user runs)."""
    proc = subprocess.run(
        ["tracelake", "sql", QUERY, "--format", "csv"], cwd=repo, env=_env(), capture_output=True, text=True
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


def test_status_reading_a_vanished_file_says_the_lake_is_being_rebuilt(tmp_path):
    from tracelake.explore.status import trajectory_overview

    with pytest.raises(BadInput, match=REBUILDING):
        trajectory_overview([str(tmp_path / "trajectories" / "s" / "trajectories" / "part-00000.parquet")])
