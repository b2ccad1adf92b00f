"""Hostile benchmark files through the real `dedup` stage (a subprocess, its peak memory and time
capped): a link out of decontaminate.root, a FIFO, a 300 MB instruction.md, a directory named
instruction.md, a JSONL line nested 100,000 deep. Each is never read past the rules, named in a
one-line warning, and either stops the stage in one line (decontaminate.unreadable: fail, the
default) or is counted in the metrics and the summary (unreadable: skip). Never a traceback, a
hang, or a byte read from outside the root."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from tracelake.core.tables import read_table

from ..helpers import ROOT, copy_project, run_capped, run_ok

SECRET = "BENCH-SECRET-5c1e-never-read"
TIMEOUT = 90  # seconds: the stage takes ~5 s here; a FIFO used to block it forever


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Path:
    """A tiny project with its tasks ingested (the stages run directly, without DVC)."""
    repo = copy_project(tmp_path_factory.mktemp("bench"), trials=30, tasks=12)
    sources = yaml.safe_load((repo / "params.yaml").read_text())["sources"]
    for args in (["synth"], *(["ingest", s] for s in sources)):
        run_ok([sys.executable, "-m", "stages", *args], repo, env={"PYTHONPATH": str(ROOT)})
    return repo


def a_task_instruction(repo: Path) -> str:
    return read_table(repo / "lake" / "tasks" / "swesmith", "tasks").column("instruction")[0].as_py()


def bench_dir(repo: Path, name: str) -> Path:
    """A fresh benchmark directory under the project's decontamination root, with one good task."""
    d = repo / "benchmarks" / name
    (d / "good").mkdir(parents=True)
    (d / "good" / "instruction.md").write_text("Count the lines of every log file under /var/log and print the sum.\n")
    return d


def dedup(repo: Path, benchmark: Path, **decontaminate) -> tuple:
    """The dedup stage with one benchmark (its own params file), capped at 2 GB and TIMEOUT seconds."""
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["dedup"]["embedding"]["enabled"] = False
    params["decontaminate"] = {
        "root": "benchmarks",
        "benchmarks": {"b": str(benchmark.relative_to(repo))},
        "embedding_threshold": None,
        **decontaminate,
    }
    path = repo / f"params-{benchmark.name}-{len(decontaminate)}.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "stages", "dedup", "--params", path.name]
    return run_capped(cmd, repo, timeout=TIMEOUT, env=env)


def refused(proc, rel: str, reason: str) -> None:
    """The default (unreadable: fail): one warning naming the file and reason, then a one-line error."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("tracelake:")]
    [warning] = [line for line in lines if "warning" in line]
    assert rel in warning and f"({reason})" in warning, warning
    assert lines[-1] != warning and "decontaminate.unreadable: skip" in lines[-1], lines


def skipped(proc, repo: Path, reason: str) -> dict:
    """unreadable: skip: the stage runs, the skip counted in the metrics and the summary."""
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    metrics = json.loads((repo / "metrics" / "dedup.json").read_text())["contamination"]
    assert metrics["skipped"] == {reason: 1} and metrics["items"] == 1, metrics
    assert f"1 benchmark file skipped ({reason} 1" in proc.stdout, proc.stdout
    return metrics


def assert_secret_nowhere(repo: Path, *texts: str) -> None:
    for text in texts:
        assert SECRET not in text
    for p in [*(repo / "lake" / "dedup").rglob("*"), repo / "metrics" / "dedup.json"]:
        assert not p.is_file() or SECRET.encode() not in p.read_bytes(), p


@pytest.mark.parametrize("target", ["outside", "/etc/passwd"])
def test_an_instruction_linking_out_of_the_root_is_never_read(lake, tmp_path, target):
    """Case 10: the outside file copies a task's instruction, so reading it would flag that task."""
    outside = tmp_path / "secret.md"
    outside.write_text(f"{SECRET} {a_task_instruction(lake)}")
    d = bench_dir(lake, f"link-{'etc' if target.startswith('/') else 'out'}")
    (d / "t1").mkdir()
    (d / "t1" / "instruction.md").symlink_to(outside if target == "outside" else target)
    proc, _ = dedup(lake, d)
    refused(proc, "t1/instruction.md", "symlink_outside_input")
    proc, _ = dedup(lake, d, unreadable="skip")
    skipped(proc, lake, "symlink_outside_input")
    assert read_table(lake / "lake" / "dedup", "contamination").num_rows == 0
    assert_secret_nowhere(lake, proc.stdout, proc.stderr)


def test_a_fifo_named_instruction_md_never_blocks_the_stage(lake):
    """Case 11: the stage used to wait forever for a writer."""
    d = bench_dir(lake, "fifo")
    (d / "t1").mkdir()
    os.mkfifo(d / "t1" / "instruction.md")
    proc, _ = dedup(lake, d)
    refused(proc, "t1/instruction.md", "unsupported_file")
    skipped(dedup(lake, d, unreadable="skip")[0], lake, "unsupported_file")


def test_a_300_mb_instruction_is_refused_by_its_size_not_read(lake):
    """Case 12: a 300 MB instruction.md drove the stage past 16.7 GB; over decontaminate.max_file_bytes
    it is refused from its size, before a byte is read."""
    d = bench_dir(lake, "huge")
    (d / "t1").mkdir()
    line = b"remove every file older than seven days from the temporary directory now\n"
    with open(d / "t1" / "instruction.md", "wb") as f:
        chunk = line * ((1 << 20) // len(line) + 1)
        for _ in range(300 * (1 << 20) // len(chunk) + 1):
            f.write(chunk)
    try:
        proc, peak = dedup(lake, d)
        refused(proc, "t1/instruction.md", "file_too_large")
        proc, peak = dedup(lake, d, unreadable="skip")
        skipped(proc, lake, "file_too_large")
        assert peak < 1024, f"peak RSS {peak:.0f} MB"
    finally:
        (d / "t1" / "instruction.md").unlink()


def test_a_directory_named_instruction_md_is_reported_not_a_traceback(lake):
    """Case 13: IsADirectoryError escaped as a traceback."""
    d = bench_dir(lake, "dirname")
    (d / "t1" / "instruction.md").mkdir(parents=True)
    proc, _ = dedup(lake, d)
    refused(proc, "t1/instruction.md", "unsupported_file")
    skipped(dedup(lake, d, unreadable="skip")[0], lake, "unsupported_file")


def test_a_jsonl_line_nested_100000_deep_is_reported_not_a_traceback(lake):
    """Case 14: the stdlib parser's RecursionError escaped as a traceback."""
    d = lake / "benchmarks" / "deep"
    d.mkdir(parents=True)
    good = json.dumps({"instruction": "Count the lines of every log file under /var/log and print the sum."})
    deep = '{"instruction": ' + "[" * 100_000 + "]" * 100_000 + "}"
    (d / "b.jsonl").write_text(f"{good}\n{deep}\n")
    proc, _ = dedup(lake, d / "b.jsonl")
    refused(proc, "b.jsonl line 2", "json_too_deep")
    skipped(dedup(lake, d / "b.jsonl", unreadable="skip")[0], lake, "json_too_deep")
