"""Reading never blocks a build, and a build never blinds a read: the freshness check behind `train
--dry-run`, `tracelake status` and the viewer asks DVC's status without DVC's repository lock or its
stage read locks (core/freshness.py), so a `dvc repro` started meanwhile is not refused ("Unable to
acquire lock"), and a read while a build holds them still answers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..helpers import run_ok, run_tracelake, stop_process

pytestmark = pytest.mark.e2e
NO_TRAINER = {"TRACELAKE_TRAIN_ENV": "/nonexistent", "WANDB_API_KEY": ""}

# DVC's own locks, held as `dvc repro export_sft@1k` holds them while it runs: the repository lock
# and a write lock on the stage's output (dvc.rwlock, as Stage.reproduce takes it)
HOLD_LOCKS = """
import sys, time
from dvc.repo import Repo
from dvc.rwlock import rwlock
repo = Repo(".")
with repo.lock, rwlock(repo.tmp_dir, repo.fs, "dvc repro export_sft@1k", [], [repo.fs.abspath("lake/exports/sft/1k")], False):
    print("locked", flush=True)
    time.sleep(float(sys.argv[1]))
"""

# `tracelake train sft --dry-run` whose DVC status lingers inside its read of the `code` stage's
# outputs (where a read lock, if taken, is held) until the test has run its builds
SLOW_DRY_RUN = """
import sys, time
from pathlib import Path
import dvc.stage
reading, done = Path(sys.argv[1]), Path(sys.argv[2])
real = dvc.stage.Stage._status_outs
def lingering(self, ret, filter_info):
    if self.addressing == "code" and not reading.exists():
        reading.write_text("reading")
        deadline = time.time() + 120
        while not done.exists() and time.time() < deadline:
            time.sleep(0.1)
    return real(self, ret, filter_info)
dvc.stage.Stage._status_outs = lingering
from tracelake.cli import main
sys.argv = ["tracelake", "train", "sft", "--dataset", "1k", "--dry-run"]
main()
"""


def _project(sample_project: Path, tmp_path: Path) -> Path:
    project = tmp_path / "p"
    shutil.copytree(sample_project, project, symlinks=True)
    for args in (["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "built"]):
        run_ok(["git", *args], project)
    return project


def test_reads_answer_while_a_build_holds_dvcs_locks(sample_project, tmp_path):
    project = _project(sample_project, tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCKS, "300"], cwd=project, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        dry = run_tracelake(project, "train", "sft", "--dataset", "1k", "--dry-run", env=NO_TRAINER)
        assert dry.returncode == 0, dry.stderr
        assert "fresh:    up to date (dvc status: export_sft@1k, train_config" in dry.stdout, dry.stdout
        status = run_tracelake(project, "status")
        assert status.returncode == 0, status.stderr
        assert "fresh: every dataset is up to date (dvc status: every stage)" in status.stdout, status.stdout
        # reads at a revision open DVC's repository too, and take no lock either
        sql = run_tracelake(project, "sql", "--rev", "HEAD", "select count(*) from pool")
        assert sql.returncode == 0, sql.stderr
        assert holder.poll() is None  # the locks were held all along
    finally:
        stop_process(holder)


def test_a_build_is_not_refused_while_a_dry_run_reads(sample_project, tmp_path):
    """While the dry run is inside DVC's status, `dvc repro -s code` runs (DVC gives up on a held
    lock after 3 seconds: each of these would fail), and the dry run still answers afterwards."""
    project = _project(sample_project, tmp_path)
    reading, done = tmp_path / "reading", tmp_path / "done"
    dry = subprocess.Popen(
        [sys.executable, "-c", SLOW_DRY_RUN, str(reading), str(done)],
        cwd=project,
        env={**os.environ, **NO_TRAINER},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 120
        while not reading.exists() and dry.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert reading.exists(), dry.communicate()
        for _ in range(3):
            build = subprocess.run(
                [str(Path(sys.executable).parent / "dvc"), "repro", "-s", "code"],
                cwd=project,
                capture_output=True,
                text=True,
            )
            assert build.returncode == 0, build.stdout + build.stderr
        assert dry.poll() is None  # it was reading all along
        done.write_text("done")
        out, err = dry.communicate(timeout=120)
        assert dry.returncode == 0, err
        assert "fresh:    up to date (dvc status: export_sft@1k, train_config" in out, out
    finally:
        done.write_text("done")
        stop_process(dry)
