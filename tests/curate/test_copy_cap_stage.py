"""select.max_copies_per_trajectory through the stage on the built sample: a weight that asks one
source for more rows than its distinct trajectories hold under the cap stops the stage in one line
(select.copy_cap: strict, the default) and writes nothing, or, with select.copy_cap: warn, is a
warning naming the source and its distinct count (it was silent); the metrics and `tracelake
status` report distinct trajectories per source beside rows."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tracelake.core.tables import read_table

from ..helpers import ROOT, run_stage, run_tracelake

pytestmark = pytest.mark.e2e


def heavy_weight(sample_project, tmp_path, **select) -> Path:
    """A copy of the built sample whose params give nl2bash 90% of every scale under a cap of 4."""
    repo = tmp_path / "repo"
    shutil.copytree(sample_project, repo, symlinks=True)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["mix"]["weights"] = {"nl2bash": 0.9, "superuser": 0.1}
    params["select"]["max_copies_per_trajectory"] = 4
    params["select"].update(select)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return repo


def outputs(repo: Path) -> dict[Path, bytes]:
    """Every file of the built selections and the metrics, by path."""
    files = [*(repo / "lake" / "selections").rglob("*"), *(repo / "metrics").rglob("*")]
    return {p: p.read_bytes() for p in sorted(files) if p.is_file()}


def test_strict_a_heavy_weight_stops_the_stage_in_one_line_and_writes_nothing(sample_project, tmp_path):
    # the repository's default; the test sample opts out (tests/helpers.py copy_project), this copy back in
    assert yaml.safe_load((ROOT / "params.yaml").read_text())["select"]["copy_cap"] == "strict"
    repo = heavy_weight(sample_project, tmp_path, copy_cap="strict")
    built = outputs(repo)
    assert repo / "lake" / "selections" / "1k" / "manifest.json" in built
    pool = read_table(repo / "lake" / "pool", "pool").to_pylist()
    distinct = sum(r["source"] == "nl2bash" for r in pool)
    need = -(-900 // distinct)
    assert need > 4

    proc = run_stage(repo, "select", "1k")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"tracelake: select 1k: mix.weights gives nl2bash 900 of 1000 rows but it has {distinct} distinct "
        f"trajectories: {need} copies of some, above select.max_copies_per_trajectory 4; lower its weight, add "
        "data, raise the cap or set select.copy_cap: warn"
    ]
    assert proc.stdout == ""
    assert outputs(repo) == built  # the 1k selection built before and its metrics untouched, nothing new


def test_with_copy_cap_warn_a_heavy_weight_warns_and_status_shows_distinct_trajectories(sample_project, tmp_path):
    repo = heavy_weight(sample_project, tmp_path, copy_cap="warn")

    proc = run_stage(repo, "select", "1k")
    assert proc.returncode == 0, proc.stderr
    rows = read_table(repo / "lake" / "selections" / "1k", "selection").to_pylist()
    distinct = len({r["trajectory_id"] for r in rows if r["source"] == "nl2bash"})
    need = -(-900 // distinct)
    assert need > 4  # the sample's nl2bash is small enough that 900 rows must repeat it more than 4 times
    warning = (
        f"tracelake: warning: select 1k: mix.weights gives nl2bash 900 of 1000 rows but it has {distinct} "
        f"distinct trajectories: {need} copies of some, above select.max_copies_per_trajectory 4 "
        "(lower the weight, add data or raise the cap)"
    )
    assert warning in proc.stderr.splitlines()
    uses = Counter(r["trajectory_id"] for r in rows)
    assert max(uses[r["trajectory_id"]] for r in rows if r["source"] == "superuser") <= 4  # the cap holds there
    metrics = json.loads((repo / "metrics" / "select" / "1k.json").read_text())
    assert metrics["max_copies_per_trajectory"] == {"cap": 4, "largest": max(uses.values())}
    assert metrics["distinct_trajectories_by_source"]["nl2bash"] == distinct
    assert metrics["rows_by_source"]["nl2bash"] == 900

    status = run_tracelake(repo, "status", columns=200)
    assert status.returncode == 0, status.stderr
    (line,) = [ln for ln in status.stdout.splitlines() if metrics["dataset_id"] in ln]
    assert f"900 ({distinct})" in line and str(max(uses.values())) in line
