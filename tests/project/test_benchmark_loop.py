"""The iteration-loop benchmark (benchmarks/loop.py) runs end to end at a small size through real
`dvc repro` runs: every step is measured, DVC runs only what each change needs, and every target is
judged. Timings are not judged here (benchmarks, not timed tests); the HF, LLaMA-Factory and floor
references are skipped (their venvs cost minutes): their targets must read "not measured"."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ..helpers import qwen3_tokenizer
from .test_benchmark_harness import run_script

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e


def loop_module():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import loop

    return loop


def test_loop_runs_through_dvc_at_a_small_size(tmp_path):
    out = tmp_path / "loop.json"
    work = tmp_path / "work"
    args = ["--rows", "200", "--skip", "hf,lf,floors", "--repeats", "1", "--work", str(work), "--json", str(out)]
    proc = run_script("loop.py", *args, timeout=900)
    meta, (result,) = json.loads(out.read_text()).values()
    assert meta["command"].endswith("--skip hf,lf,floors --repeats 1") and str(tmp_path) not in json.dumps(meta)
    assert len(meta["load_before"]) == len(meta["load_after"]) == 3 and isinstance(meta["cpu"], str)
    assert result["scale"] == {"name": "100", "rows": 100} and result["new_scale"] == {"name": "50", "rows": 50}
    steps = result["steps"]
    assert set(steps) == {"first_off", "first_exact", "ablation", "new_scale", "no_change"}

    # no source and no decontamination root reads the sample: synth is not in dvc.yaml; scan, which
    # DVC runs every time, lists the source's files
    every = {"code", "tokenizer", "scan", "ingest@ot", "score", "dedup", "filter", "select@100", "export_sft@100"}
    every |= {"export_rl", "train_config", "report", "check"}
    for key in ("first_off", "first_exact"):  # a fresh project: DVC runs every stage once
        run = steps[key]
        assert sorted(run["ran"]) == sorted(every) and run["skipped"] == [] and run["restored"] == []
        assert run["wall_s"] > 0 and run["rss_mb"] > 0 and run["cpu_s"] > 0
        stage_sum = sum(s["wall_s"] for s in run["stages"])
        assert stage_sum + run["before_first_stage_s"] == pytest.approx(run["wall_s"], rel=1e-6)
    # the ablation (a filter param) reruns the filter and what reads the pool, nothing upstream
    ablation = set(steps["ablation"]["ran"])
    assert {"filter", "select@100", "export_sft@100", "check"} <= ablation
    assert not ablation & {"code", "tokenizer", "ingest@ot", "score", "dedup", "export_rl"}
    # a new scale builds that scale only
    new_scale = set(steps["new_scale"]["ran"])
    assert {"select@50", "export_sft@50"} <= new_scale
    assert not new_scale & {"code", "ingest@ot", "score", "dedup", "filter", "select@100", "export_sft@100"}
    no_change = steps["no_change"]
    assert no_change["ran"] == ["scan"] and len(no_change["repro"]) == len(no_change["status"]) == 1
    assert no_change["repro_median_s"] > 0 and no_change["status_median_s"] > 0
    assert result["references"] == {}

    targets = result["targets"]
    assert len(targets) == 8 and {t["verdict"] for t in targets} <= {"met", "missed", "not measured"}
    measured = [t["target"] for t in targets if t["verdict"] != "not measured"]
    assert len(measured) == 2 and measured[0].startswith("no-change dvc repro") and measured[1].startswith("peak RSS")
    assert [t["judged"] for t in targets].count(False) == 1  # the counting work's ratio: information only
    assert "profiles" not in result  # no --profile: nothing rerun
    # DVC's own part of each step's dvc repro: before its first stage and after each stage's command
    ablation, run = targets[0], steps["ablation"]
    assert ablation["target"].startswith("ablation")
    dvc = run["before_first_stage_s"] + sum(s["dvc_after_s"] for s in run["stages"])
    assert ablation["dvc_s"] == dvc and 0 < dvc < run["wall_s"]
    assert ablation["allowed_s"] is None  # no HF reference: no wall is allowed, so no floor is judged
    header = "| target | ours | reference | ratio | DVC's part / allowed | met/missed |"
    assert "**targets**" in proc.stdout and header in proc.stdout
    assert "**per stage**" in proc.stdout

    rendered = run_script("loop.py", "--render", str(out)).stdout  # the same tables from the saved numbers
    assert rendered.split("**targets**")[1] == proc.stdout.split("**targets**")[1]

    # the projects are real repositories: everything committed after each step
    exact = work / "loop-exact-200"
    assert (exact / ".dvc" / "cache").is_dir() and (exact / "dvc.lock").is_file()
    log = run_git(exact, "log", "--format=%s")
    key, _, after = loop_module().ABLATION
    assert f"ablation: filter.{key} {after}" in log and "scale 50" in log
    assert run_git(exact, "status", "--porcelain") == ""


def test_harbor_loop_measures_both_layouts_at_a_small_size(tmp_path):
    """benchmarks/harbor_loop.py: the same rows as Harbor job directories and as JSONL, each the
    source of its own project, through the first dvc repro, the no-change steps and the ablation."""
    out = tmp_path / "harbor_loop.json"
    args = ["--rows", "40", "--repeats", "1", "--work", str(tmp_path / "work"), "--json", str(out)]
    args += ["--tokenizer", str(qwen3_tokenizer())]  # skips where ../shared/fixtures lacks it
    proc = run_script("harbor_loop.py", *args, timeout=900)
    saved = json.loads(out.read_text())
    meta, result = saved["meta"], saved["result"]
    assert meta["command"].endswith("--rows 40 --repeats 1") and str(tmp_path) not in json.dumps(meta)
    assert len(meta["load_before"]) == len(meta["load_after"]) == 3 and isinstance(meta["cpu"], str)
    assert len(meta["commit"].split()[0]) == 40 and meta["date"] and meta["machine"]
    assert result["scale"] == {"name": "20", "rows": 20} and result["tokenizer"] == "qwen3-tokenizer"

    projects = result["projects"]
    assert set(projects) == {"harbor", "traces"}
    no_change = {"dvc_status", "dvc_repro", "tracelake_status", "tracelake_status_no_fresh", "train_dry_run"}
    no_change.add("stat_floor")
    for kind, p in projects.items():
        assert p["source"]["format"] == kind and p["source"]["path"]["files"] > 0 and p["source"]["path"]["bytes"] > 0
        for run in (p["first"], p["ablation"], *(r for runs in p["no_change"].values() for r in runs)):
            assert run["wall_s"] > 0 and run["cpu_s"] > 0 and run["rss_mb"] > 0
        assert set(p["no_change"]) == set(p["no_change_median"]) == no_change
        assert all(len(runs) == 1 for runs in p["no_change"].values()) and p["no_change_ran"] == ["scan"]
        assert f"ingest@{p['source']['name']}" in p["first"]["ran"] and "export_sft@20" in p["first"]["ran"]
        # the ablation (a filter param) reruns the filter and what reads the pool, nothing upstream
        assert {"filter", "select@20", "export_sft@20"} <= set(p["ablation"]["ran"])
        upstream = {"code", "tokenizer", "score", "dedup", f"ingest@{p['source']['name']}"}
        assert not set(p["ablation"]["ran"]) & upstream
        assert 0 < p["kept_ablation"] <= p["kept"]
    harbor, traces = projects["harbor"], projects["traces"]
    # the Harbor project ingested the job directories, none rejected: every row of the JSONL, and a
    # subagent row's trial also gives its main run up to the hand-off (openthoughts_harbor.py)
    assert harbor["source"]["name"] == "harbor"
    assert harbor["source"]["path"]["files"] > traces["source"]["path"]["files"]  # a trial's files, not one line
    assert harbor["ingested"]["trajectories"]["rows"] >= traces["ingested"]["trajectories"]["rows"] == 40
    assert harbor["ingested"]["trajectories"]["rejects"] == 0 and harbor["kept"] > 0

    targets = result["targets"]
    assert len(targets) == 4 and {t["verdict"] for t in targets} <= {"met", "missed"}
    assert all(t["allowed_s"] > 0 and t["dvc_s"] > 0 for t in targets)
    assert targets[0]["target"].startswith("dvc repro, nothing changed, <= 2 s")
    assert targets[3]["target"].startswith("ablation")
    assert "| step | harbor | traces | ratio harbor/traces |" in proc.stdout and "**targets**" in proc.stdout
    rendered = run_script("harbor_loop.py", "--render", str(out)).stdout  # the same tables from the saved numbers
    assert rendered.split("| step |")[1] == proc.stdout.split("| step |")[1]
    assert run_git(tmp_path / "work" / "harbor-40", "status", "--porcelain") == ""

    # without the tokenizer: one line, before anything is written
    missing = [sys.executable, str(ROOT / "benchmarks" / "harbor_loop.py"), "--tokenizer", str(tmp_path / "none")]
    proc = subprocess.run([*missing, "--work", str(tmp_path / "unused")], capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "no tokenizer.json in" in proc.stderr
    assert not (tmp_path / "unused").exists()


def run_git(repo: Path, *args: str) -> str:
    import subprocess

    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def test_a_dvc_repro_profile_splits_by_stage(tmp_path):
    """py-spy --subprocesses stacks start with the processes they run in, DVC's first: a worker's
    samples go to the stage that started it, DVC's own work to `dvc`."""
    raw = tmp_path / "raw.txt"
    dvc = 'process 10:"/v/bin/python /v/bin/dvc repro"'
    filt = 'process 12:"python -m stages filter"'
    worker = 'process 14:"python -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5)"'
    export = 'process 20:"python -m stages export_sft 10k"'
    raw.write_text(
        f"{dvc};main (dvc/cli/__init__.py);status (dvc/stage/__init__.py) 7\n"
        f"{dvc};{filt};<module> (stages/__main__.py);run (tracelake/curate/filter.py) 3\n"
        f"{dvc};{filt};{worker};count (tracelake/tokens/token_count.py) 5\n"
        f"{dvc};{export};<module> (stages/__main__.py) 2\n"
    )
    groups = loop_module().split_by_stage(raw)
    assert {k: len(v) for k, v in groups.items()} == {"dvc": 1, "filter": 2, "export_sft@10k": 1}
    assert groups["filter"][1].endswith(" 5")
