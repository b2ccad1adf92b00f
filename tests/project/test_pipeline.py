"""End to end: the real DVC pipeline in a temporary git repository.

`dvc repro` builds every stage (ingest -> score -> filter -> select at every scale -> report); a
second `dvc repro` does nothing (it runs only the stages that list the inputs DVC does not walk,
synth and scan, which find nothing changed and write nothing); changing one scale re-runs only that scale (and the report), and
`dvc params diff` / `dvc metrics diff` show it; deleting the outputs and reproducing gives
byte-identical files and an unchanged dvc.lock; a fresh clone's `dvc repro` leaves `git status` clean.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tracelake.core.freshness import pipeline_freshness
from tracelake.core.hashing import content_id
from tracelake.core.outputs import read_manifest
from tracelake.core.tables import read_table

from ..helpers import always_run, copy_project, ran

pytestmark = pytest.mark.e2e
OUTPUTS = ("lake", "data", "metrics", "reports", "training/configs")


def sh(args: list[str], cwd: Path) -> str:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def tree_digest(*dirs: Path) -> dict[str, str]:
    """sha256 of every file under the directories."""
    return {
        str(p.relative_to(d.parent)): hashlib.sha256(p.read_bytes()).hexdigest()
        for d in dirs
        for p in sorted(d.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = copy_project(tmp_path_factory.mktemp("pipeline"))  # small sample: the same code paths
    sh(["dvc", "repro"], repo)
    sh(["git", "add", "-A"], repo)
    sh(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "pipeline"], repo)
    return repo


def test_repro_builds_every_source(repo):
    sources = yaml.safe_load((repo / "params.yaml").read_text())["sources"]
    for name in sources:
        for table in ("trajectories", "tasks"):
            m = read_manifest(repo / "lake" / table / name)
            assert m["counts"]["inputs"] == m["counts"]["rows"] + m["counts"]["rejects"]
            read_table(repo / "lake" / table / name, table)
        metrics = yaml.safe_load((repo / "metrics" / "ingest" / f"{name}.json").read_text())
        assert metrics["trajectories"]["rows"] > 0
    out = sh(["dvc", "metrics", "show"], repo)
    assert "metrics/headline/ingest/" in out and "dropped" in out


def test_second_repro_does_nothing(repo):
    lock = (repo / "dvc.lock").read_bytes()
    out = sh(["dvc", "repro"], repo)
    assert ran(out, always=True) == always_run() == ["scan", "synth"], out
    assert "synth: data/sample is what these params make; not written again" in out
    assert re.findall(r"^scan (\S+): .* (\w+)$", out, re.M) == [
        (name, "unchanged") for name in yaml.safe_load((repo / "params.yaml").read_text())["sources"]
    ], out
    assert (repo / "dvc.lock").read_bytes() == lock
    status = sh(["dvc", "status"], repo)  # DVC names the stages it runs every time, and no other
    assert {line.rstrip(":") for line in status.splitlines() if line and not line[0].isspace()} == set(always_run())
    fresh = pipeline_freshness(repo)  # what `tracelake status` asks: those stages would change nothing
    assert fresh.checked and fresh.changed == {}, fresh.why


def test_rebuild_from_scratch_is_byte_identical(repo):
    before = tree_digest(*(repo / d for d in OUTPUTS))
    lock = (repo / "dvc.lock").read_bytes()
    for d in OUTPUTS:
        shutil.rmtree(repo / d)
    sh(["dvc", "repro", "--force"], repo)
    assert tree_digest(*(repo / d for d in OUTPUTS)) == before
    assert (repo / "dvc.lock").read_bytes() == lock
    assert sh(["git", "status", "--porcelain"], repo).strip() == ""


def test_a_fresh_clone_rebuilds_to_a_clean_git_status(repo, tmp_path):
    """Every output and dvc.lock are the same bytes on another checkout: a newcomer's `dvc repro`
    (no DVC cache, nothing built) leaves nothing to commit."""
    clone = tmp_path / "clone"
    sh(["git", "clone", "-q", str(repo), str(clone)], tmp_path)
    out = sh(["dvc", "repro"], clone)
    assert "Running stage 'dedup'" in out and "Running stage 'export_rl'" in out, out
    assert sh(["git", "status", "--porcelain"], clone).strip() == ""
    assert (clone / "dvc.lock").read_bytes() == (repo / "dvc.lock").read_bytes()
    # The committed lake through the clone's DVC cache: a query and a diff at HEAD.
    count = ["tracelake", "sql", "--format", "csv", "SELECT 'rows=' || count(*) FROM pool"]
    now = re.findall(r"rows=\d+", sh(count, clone))
    assert len(now) == 1 and re.findall(r"rows=\d+", sh(count[:2] + ["--rev", "HEAD"] + count[2:], clone)) == now
    sh(["tracelake", "diff", "HEAD:pool", "pool"], clone)
    # An output whose data this cache never held (committed elsewhere, not pulled) is left out at a
    # revision; queries of the rest still run.
    lock = (clone / "dvc.lock").read_text()
    md5 = re.search(r"- path: lake/scores\n\s+hash: md5\n\s+md5: (\w+\.dir)", lock).group(1)
    (clone / "dvc.lock").write_text(lock.replace(md5, "0" * 32 + ".dir"))
    sh(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "scores built elsewhere"], clone)
    shown = sh(count[:2] + ["--rev", "HEAD"] + count[2:], clone)
    assert re.findall(r"rows=\d+", shown) == now and "left out: lake/scores" in shown, shown


def test_every_scale_is_a_content_addressed_dataset(repo):
    scales = yaml.safe_load((repo / "params.yaml").read_text())["scales"]
    report = yaml.safe_load((repo / "metrics" / "report.json").read_text())
    for scale, n in scales.items():
        m = read_manifest(repo / "lake" / "selections" / scale)
        table = read_table(repo / "lake" / "selections" / scale, "selection")
        assert table.num_rows == n == m["counts"]["rows"] == report[scale]["rows"]
        prefix, label, digest = m["dataset_id"].rsplit("-", 2)
        assert (prefix, len(digest)) == ("sel", 12) and digest == m["tables"]["selection"]["version_id"]
        export = read_manifest(repo / "lake" / "exports" / "sft" / scale)
        c = export["counts"]
        # the rows and how they train (the rendering, the pre-tokenized packing): another mode is another id
        id_of = export["counts"]["id_of"]
        assert id_of["rows"] == export["tables"]["sft_rows"]["version_id"]
        assert id_of["rendering"] == export["counts"]["rendering"]
        assert export["dataset_id"] == f"sft-{label}-{content_id('sft_dataset', id_of, 12)}"
        assert c["rows_in"] == n == c["rows_out"] + sum(c["rejected"].values())
        info = json.loads((repo / "lake" / "exports" / "sft" / scale / "dataset_info.json").read_text())
        assert info[export["dataset_id"]]["file_name"] == export["dataset_id"]
        shards = sorted((repo / "lake" / "exports" / "sft" / scale / export["dataset_id"]).iterdir())
        assert [p.suffix for p in shards] == [".parquet"] * c["shards"]  # nothing but shards
    funnel = yaml.safe_load((repo / "metrics" / "filter.json").read_text())
    for source, f in funnel["sources"].items():
        assert f["in"] == f["kept"] + sum(f["dropped"].values()), source
    proc = subprocess.run(
        ["dvc", "plots", "show", "--json"],
        cwd=repo,
        capture_output=True,
        text=True,
        env=dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"),
    )
    plots = json.loads(proc.stdout)["data"]
    for name in ("rows_by_source", "rollouts_per_task", "assistant_turns", "tokens", "funnel"):
        (spec,) = plots[f"reports/plots/{name}.csv"]
        assert spec["type"] == "vega" and spec["content"]["data"]["values"], name
        assert spec["content"]["encoding"]["color"]["field"] == "group"


def test_changing_one_scale_reruns_only_that_scale(repo):
    params_path = repo / "params.yaml"
    original = params_path.read_text()
    params = yaml.safe_load(original)
    params["scales"]["1k"] = 1200
    params_path.write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        out = sh(["dvc", "repro"], repo)
        assert ran(out) == ["check", "export_sft@1k", "report", "select@1k", "train_config"], out
        assert "scales.1k" in sh(["dvc", "params", "diff"], repo)
        metrics_diff = sh(["dvc", "metrics", "diff", "--json"], repo)
        changed = yaml.safe_load(metrics_diff)
        assert changed["metrics/headline/select/1k.json"]["out"] == {"old": 1000, "new": 1200, "diff": 200}
        assert "metrics/headline/select/316.json" not in changed
        assert changed["metrics/headline/export_sft/1k.json"]["out"]["new"] == 1200
        config = yaml.safe_load((repo / "training" / "configs" / "sft-1k.yaml").read_text())
        new_id = read_manifest(repo / "lake" / "exports" / "sft" / "1k")["dataset_id"]
        assert new_id.startswith("sft-1.2k-") and config["dataset"] == f"{new_id}.00000"
    finally:
        params_path.write_text(original)
        sh(["dvc", "repro"], repo)
    assert sh(["git", "status", "--porcelain"], repo).strip() == ""


def test_changing_a_training_hyperparameter_reruns_only_the_configs(repo):
    params_path = repo / "params.yaml"
    original = params_path.read_text()
    params = yaml.safe_load(original)
    params["train"]["sft"]["learning_rate"] = 1.0e-5
    params_path.write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        out = sh(["dvc", "repro"], repo)
        assert ran(out) == ["check", "train_config"], out
        for scale in yaml.safe_load(original)["scales"]:
            config = yaml.safe_load((repo / "training" / "configs" / f"sft-{scale}.yaml").read_text())
            assert config["learning_rate"] == 1.0e-5
    finally:
        params_path.write_text(original)
        sh(["dvc", "repro"], repo)
    assert sh(["git", "status", "--porcelain"], repo).strip() == ""


@pytest.mark.parametrize(
    ("edit", "line"),
    [
        (
            lambda p: p["filter"].update(sucess_only=True),
            "tracelake: params.yaml: unknown key filter.sucess_only (known: ",
        ),
        (
            lambda p: p.update(filtr={"min_assistant_turns": 3}),
            "tracelake: params.yaml: unknown top-level key 'filtr' (known: ",
        ),
    ],
)
def test_a_misspelled_param_stops_dvc_repro_in_one_line(repo, edit, line):
    """Not "Data and pipelines are up to date": the stage that owns the section (or `check`, for a
    key no stage reads) reruns, because it tracks its section whole, and stops on the unknown key."""
    params_path = repo / "params.yaml"
    original = params_path.read_text()
    params = yaml.safe_load(original)
    edit(params)
    params_path.write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
        proc = subprocess.run(["dvc", "repro"], cwd=repo, env=env, capture_output=True, text=True)
        assert proc.returncode != 0, proc.stdout
        ours = [x for x in proc.stderr.splitlines() if x.startswith("tracelake:")]
        assert len(ours) == 1 and ours[0].startswith(line), proc.stderr
    finally:
        params_path.write_text(original)
        sh(["dvc", "repro"], repo)
    assert sh(["git", "status", "--porcelain"], repo).strip() == ""
