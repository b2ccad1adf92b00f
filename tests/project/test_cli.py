"""The command line: help everywhere, the docs' command table matches, user errors are one line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from tracelake.cli import app

from ..helpers import ROOT, make_trial, run_tracelake, tree_bytes

runner = CliRunner()


def all_commands() -> list[str]:
    root = typer.main.get_command(app)
    names = []
    for name, cmd in root.commands.items():
        if hasattr(cmd, "commands"):
            names += [f"{name} {sub}" for sub in cmd.commands]
        else:
            names.append(name)
    return sorted(names)


@pytest.mark.parametrize("command", all_commands())
def test_every_command_has_meaningful_help(command):
    result = runner.invoke(app, [*command.split(), "--help"])
    assert result.exit_code == 0, result.output
    assert len(result.output.split("\n\n")[1].split()) >= 5, f"{command} --help says too little"


def test_docs_command_table_matches_the_cli():
    """Every command has a row in a command table of the README or docs/ (docs/commands.md), and
    every row names a command that exists."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    row = re.compile(r"^\| `tracelake ([a-z ]+)`", re.MULTILINE)
    documented = sorted({name for page in pages for name in row.findall(page.read_text())})
    assert documented == all_commands()


def ingest_harbor_args(tmp_path: Path) -> list[str]:
    """`ingest harbor` of tmp_path/jobs as source s into tmp_path/lake."""
    return ["ingest", "harbor", str(tmp_path / "jobs"), "--source", "s", "--out", str(tmp_path / "lake")]


def test_ingest_harbor_cli_end_to_end(tmp_path):
    make_trial(tmp_path / "jobs", "t__1")
    make_trial(tmp_path / "jobs", "t__2", files={"trajectory.json": b"{"})
    result = runner.invoke(app, [*ingest_harbor_args(tmp_path), "--metrics", str(tmp_path / "m.json")])
    assert result.exit_code == 0, result.output
    assert "1 rows, 1 rejects of 2 inputs" in result.output and "unparsable_json 1" in result.output
    status = runner.invoke(app, ["status", "--lake", str(tmp_path / "lake")])
    assert status.exit_code == 0 and "trajectories" in status.output and "unparsable_json" in status.output


@pytest.mark.parametrize("kind", ["harbor", "traces"])
def test_ingest_of_nothing_is_a_one_line_error_and_writes_nothing(tmp_path, kind):
    (tmp_path / "empty").mkdir()
    args = ["ingest", kind, str(tmp_path / "empty"), "--source", "x", "--out", str(tmp_path / "lake")]
    proc = subprocess.run([sys.executable, "-m", "tracelake", *args], capture_output=True, text=True)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"{tmp_path / 'empty'}" in proc.stderr and ("no Harbor trial" in proc.stderr or "holds no" in proc.stderr)
    assert not (tmp_path / "lake").exists() or not any((tmp_path / "lake").rglob("*.parquet"))


def test_user_errors_are_one_line_without_traceback(tmp_path):
    make_trial(tmp_path / "jobs", "t__1", files={"trajectory.json": b"{"})
    proc = run_tracelake(None, *ingest_harbor_args(tmp_path), "--strict", columns=None)
    assert proc.returncode == 2
    assert proc.stderr.startswith("tracelake: job-1/t__1/agent/trajectory.json: unparsable_json")
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = run_tracelake(None, "status", "--lake", str(tmp_path / "none"), columns=None)
    assert proc.returncode == 2 and "nothing is built" in proc.stderr and "Traceback" not in proc.stderr


def test_schema_command_prints_the_contract():
    result = runner.invoke(app, ["schema", "trajectories"])
    assert result.exit_code == 0 and "trajectory_id" in result.output and "n_assistant_turns" in result.output
    bad = runner.invoke(app, ["schema", "nope"])
    assert bad.exit_code != 0


def _cli_with(patch: str, args: list[str], cwd) -> subprocess.CompletedProcess:
    """Run the real entry point (tracelake.cli.main) in a fresh interpreter after `patch` (Python)."""
    code = f"import sys\n{patch}\nsys.argv = ['tracelake', *{args!r}]\nfrom tracelake.cli import main\nmain()\n"
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_ctrl_c_names_the_outputs_it_did_not_write(tmp_path):
    """Ctrl-C in the middle of an ingest: exit 130, one line naming the unwritten output, and the
    previous version of that output is still there, untouched."""
    make_trial(tmp_path / "jobs", "t__1")
    args = ["ingest", "harbor", str(tmp_path / "jobs"), "--source", "s", "--out", str(tmp_path / "lake")]
    assert _cli_with("", args, tmp_path).returncode == 0
    out = tmp_path / "lake" / "trajectories" / "s"
    before = tree_bytes(out)
    interrupt = (
        "import tracelake.core.tables as lake\n"
        "def boom(self, *args): raise KeyboardInterrupt\n"
        "lake.PartedTableWriter.add_part = boom"
    )
    proc = _cli_with(interrupt, args, tmp_path)
    assert proc.returncode == 130, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracelake: interrupted; not written"), proc.stderr
    assert str(out) in lines[0]
    assert tree_bytes(out) == before
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")], "a temporary directory was left"


def test_a_failed_internal_check_is_a_bug_report_with_traceback(tmp_path):
    make_trial(tmp_path / "jobs", "t__1")
    broken = (
        "import tracelake.ingest.common as common\n"
        "common.check(True, 'ok')\n"
        "orig = common.run_ingest\n"
        "def wrapped(**kw):\n"
        "    process = kw['batches']\n"
        "    import dataclasses\n"
        "    kw['batches'] = (dataclasses.replace(parsed, rejects=[]) for parsed in process)\n"
        "    return orig(**kw)\n"
        "common.run_ingest = wrapped\n"
        "import tracelake.ingest.harbor as harbor\n"
        "harbor.run_ingest = wrapped"
    )
    proc = _cli_with(
        broken, ["ingest", "harbor", str(tmp_path / "jobs"), "--source", "s", "--out", str(tmp_path / "lake")], tmp_path
    )
    assert proc.returncode == 70, proc.stderr
    assert "Traceback" in proc.stderr and "units but 0 outcomes" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("tracelake: this is a bug in tracelake")


def test_usage_errors_keep_click_messages(tmp_path):
    proc = run_tracelake(None, "ingest", "harbor", columns=None)
    assert proc.returncode == 2 and "Missing argument" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_tracelake(None, "--help", columns=None)
    assert proc.returncode == 0 and "Usage" in proc.stdout
