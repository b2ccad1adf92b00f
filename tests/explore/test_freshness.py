"""Stale datasets are flagged: after a params edit without `dvc repro` (or a `dvc repro` stopped
halfway), `tracelake status` and the viewer's datasets page mark every dataset built from a changed
stage STALE, from DVC's own status (core/freshness.py), and say what changed."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from tracelake.core.freshness import pipeline_freshness

from ..helpers import run_ok, run_tracelake

pytestmark = pytest.mark.e2e
SCALES = ("316", "1k", "3k", "10k")


def fresh_cells(status_out: str) -> dict[str, str]:
    """dataset id -> its fresh cell, from status's dataset tables."""
    cells = {}
    for line in status_out.splitlines():
        m = re.match(r"^│ ((?:sft-\S+|rl) +│ \S+|sel-\S+) +│ +(yes|STALE) ", line)
        if m:
            cells[m.group(1).split("│")[-1].strip()] = m.group(2)
    return cells


def datasets_page_cells(project: Path) -> dict[str, str]:
    from tracelake.explore.view.datasets import datasets_page
    from tracelake.explore.view.db import LakeView

    db = LakeView(project / "lake")
    db.start_freshness(project, background=False)
    html = datasets_page(db)
    return dict(re.findall(r"<code>((?:sel|sft|rl|pool)-[^<]+)</code></td><td class=\"fresh\">([^<]*)<", html))


def test_status_and_view_flag_stale_datasets(sample_project, tmp_path, monkeypatch):
    project = tmp_path / "repo"
    shutil.copytree(sample_project, project, symlinks=True)
    status = run_tracelake(project, "status")
    assert status.returncode == 0, status.stderr
    before = fresh_cells(status.stdout)
    assert len(before) == 2 * len(SCALES) + 1 and set(before.values()) == {"yes"}, status.stdout
    assert "fresh: every dataset is up to date (dvc status: every stage)" in status.stdout

    params = yaml.safe_load((project / "params.yaml").read_text())
    params["filter"]["min_assistant_turns"] = 6
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    status = run_tracelake(project, "status")
    assert status.returncode == 0, status.stderr
    cells = fresh_cells(status.stdout)
    assert cells.keys() == before.keys()
    rl = next(k for k in cells if k.startswith("rl-"))
    assert {k for k, v in cells.items() if v == "STALE"} == set(cells) - {rl}  # the RL export reads no pool
    # check reads params.yaml whole
    assert "stale: changed since built: check (changed deps); filter (changed deps)." in status.stdout
    assert "fresh" not in run_tracelake(project, "status", "--no-fresh").stdout.split("training datasets")[1]

    monkeypatch.chdir(project)  # the page lists the versions of the working directory's repository
    page = datasets_page_cells(project)
    assert page[rl] == "yes" and {v for k, v in page.items() if k != rl} == {"STALE"}, page

    # a dvc repro stopped after the first scale: that scale is fresh, the others and every export are not
    run_ok(["dvc", "repro", "select@316"], project)
    fresh = pipeline_freshness(project)
    assert fresh.stale("select@316") == [] and fresh.stale("filter") == []
    assert fresh.stale("select@1k") == ["select@1k"]  # its input, the pool, changed under it
    assert fresh.stale("export_sft@316") == ["export_sft@316"]
    cells = fresh_cells(run_tracelake(project, "status").stdout)
    assert [cells[k] for k in cells if k.startswith("sel-316-")] == ["yes"]
    assert sorted(v for k, v in cells.items() if k.startswith("sel-") and not k.startswith("sel-316-")) == ["STALE"] * 3


def test_a_code_edit_makes_stale_only_the_stages_whose_code_it_is(sample_project, tmp_path):
    """Every stage depends on `code` (its digest), so DVC names `code` changed after any edit under
    src/; only the stages whose digest changes are stale: an edit of the viewer leaves every dataset
    fresh, an edit of the select code makes the selections and what is built from them stale."""
    project = tmp_path / "repo"
    shutil.copytree(sample_project, project, symlinks=True)
    viewer = project / "src" / "tracelake" / "explore" / "view" / "datasets.py"
    viewer.write_text(viewer.read_text() + "\n# an edit no stage runs\n")
    fresh = pipeline_freshness(project)
    assert fresh.checked and "code" not in fresh.changed, fresh.changed
    assert fresh.stale("export_sft@1k") == [] and fresh.stale("export_rl") == []
    select = project / "src" / "tracelake" / "curate" / "select.py"
    select.write_text(select.read_text() + "\n# an edit the select stage runs\n")
    fresh = pipeline_freshness(project)
    assert fresh.changed.get("select@1k") == ["changed code"], (fresh.why, fresh.changed)
    assert fresh.stale("export_sft@1k") == ["select@1k"] and fresh.stale("filter") == []
    assert fresh.stale("export_rl") == []


def test_outside_a_dvc_project_nothing_is_checked(tmp_path):
    fresh = pipeline_freshness(tmp_path)
    assert not fresh.checked and fresh.why == "not checked: no dvc.yaml here" and fresh.stale("select@1k") == []
