"""The device's scaling checks (3: ingest, 4: token counting) at a tiny size, on any machine: they run
only where a lent machine is at hand, so the normal suite keeps them working. The same scripts, the
same PASS conditions (same bytes or counts from every executor), 40-80 rows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tracelake.core.tokenizer import build_tokenizer

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"


def run_script(script: str, out: Path, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(HERE / script), "--out", str(out), *args],
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin", "TOKENIZERS_PARALLELISM": "false"},
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
