"""The device's checks that need no GPU to be exercised, on any machine: they run for real only where
a lent machine is at hand, so the normal suite keeps them working. The scaling checks (3: ingest,
4: token counting) at 40-80 rows, with the same PASS conditions (same bytes or counts from every
executor); the SkyRL check (5) as its plan: built by the launcher from the sample's RL export and
accepted by the installed SkyRL's own config classes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tracelake.tokens.tokenizer import build_tokenizer

from ..helpers import skyrl_python

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"


def run_script(script: str, out: Path, *args: str, env: dict | None = None) -> dict:
    done = subprocess.run(
        [sys.executable, str(HERE / script), "--out", str(out), *args],
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin", "TOKENIZERS_PARALLELISM": "false", **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.startswith("PASS "), done.stdout
    return json.loads(next(out.glob("*.json")).read_text())


def test_ingest_scaling_script_gives_the_same_bytes_at_each_worker_count(tmp_path):
    result = run_script(
        "ingest_scaling.py", tmp_path / "out", "--rows", "80", "--workers", "1,2", "--work", str(tmp_path / "work")
    )
    runs = result["runs"]
    assert [r["workers"] for r in runs] == [1, 2]
    assert {r["tree_sha256"] for r in runs} == {runs[0]["tree_sha256"]} and runs[0]["rows"] == 80


def test_token_scaling_script_counts_the_same_on_every_executor(tmp_path):
    tokenizer = build_tokenizer(tmp_path / "tokenizer", vocab_size=512)
    result = run_script(
        "token_scaling.py",
        tmp_path / "out",
        "--tokenizer",
        str(tokenizer),
        "--rows",
        "40",
        "--workers",
        "local,2",
        "--work",
        str(tmp_path / "work"),
    )
    runs = result["runs"]
    assert [(r["executor"], r["shards"]) for r in runs] == [("local", 1), ("processes", 1)]
    assert all(r["same_counts"] and not r["spot_mismatches"] for r in runs)
    assert runs[0]["tokens"] == runs[1]["tokens"] > 0


def test_token_scaling_batches_as_the_filter_does():
    sys.path.insert(0, str(HERE))
    try:
        import token_scaling
    finally:
        sys.path.remove(str(HERE))
    from tracelake.curate.filter import TOKEN_BATCH

    assert token_scaling.TOKEN_BATCH == TOKEN_BATCH


def test_skyrl_check_plans_a_run_skyrls_config_accepts(sample_project, tmp_path):
    skyrl = skyrl_python()
    result = run_script(
        "skyrl_check.py",
        tmp_path / "out",
        "--plan-only",
        "--project",
        str(sample_project),
        "--work",
        str(tmp_path / "work"),
        env={"TRACELAKE_SKYRL_ENV": str(skyrl.parents[1])},
    )
    assert result["config_check"].startswith("ok: ")
    command = result["command"]
    assert command[:3] == [str(skyrl), "-m", "examples.train_integrations.harbor.entrypoints.main_harbor"]
    assert f"data.train_data=['{tmp_path / 'work' / 'tasks'}']" in command
    assert {"trainer.epochs=3", "trainer.train_batch_size=2", "generator.n_samples_per_prompt=2"} <= set(command)
    copied = sorted(p.name for p in (tmp_path / "work" / "tasks").iterdir())
    assert copied == result["task_dirs"] and len(copied) == 2
    assert all((tmp_path / "work" / "tasks" / name / "instruction.md").is_file() for name in copied)
