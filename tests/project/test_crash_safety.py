"""Crash safety: a run killed anywhere leaves the lake as it was or as it will be, and the rerun
gives the same `dvc.lock` and output bytes as a run never killed.

- The swap of an output directory: a process is SIGKILLed at each file-system step of it (an audit
  hook counts them); the output is then the old version or the new one, never missing, and the next
  build removes what the killed one left (core/swap.py).
- Leftover temporary names (`.<name>.tmp-<pid>`, `.old-<pid>`, `.parts-<pid>-...`) of dead processes
  beside an output are removed at its next build; those of live processes stay.
- The pipeline: `dvc repro` killed (the whole process group) inside ingest, dedup and an export, then
  run to the end, gives the uninterrupted run's `dvc.lock` and output bytes (the sample pipeline);
  so does a forced rebuild killed inside ingest, whose rerun restores the stage from DVC's run cache
  and leaves the leftover in place (`.dvcignore` keeps it out of every hash) until a reader or the
  next stage sweeps the lake (`tracelake status` here).
- `tracelake status` names an empty `dvc.lock` or `.dvc/tmp/rwlock` (DVC leaves them so when killed
  while writing them) and says what to do.
"""

from __future__ import annotations

import ctypes
import difflib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from tracelake.core.datasets import versions
from tracelake.core.lake import Lake
from tracelake.core.outputs import output_dir, write_json
from tracelake.explore.status import render_status

from ..helpers import run_ok
from .test_pipeline import OUTPUTS, tree_digest

TEMP_NAME = re.compile(r"^\..+\.(tmp|old|parts)-")


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def build(final: Path, text: str) -> None:
    with output_dir(final) as tmp:
        (tmp / "data.txt").write_text(text)
        write_json(tmp / "manifest.json", {"version": text})


# --- leftovers of dead processes ------------------------------------------------------------------


def test_leftovers_of_dead_processes_are_removed_at_the_next_build(tmp_path):
    final = tmp_path / "trajectories" / "s"
    build(final, "v1")
    dead = dead_pid()
    stale = [
        final.with_name(f".s.tmp-{dead}"),
        final.with_name(f".s.old-{dead}"),
        final.with_name(f".s.parts-{dead}-k2j4x_1a"),
    ]
    for d in stale:
        d.mkdir()
        (d / "manifest.json").write_text("{}")  # a complete old version looks built: still garbage
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = final.with_name(f".s.tmp-{sleeper.pid}")  # another process building it now
        other = final.with_name(f".other.tmp-{dead}")  # another output's leftover
        elsewhere = tmp_path / "tasks" / f".s.tmp-{dead}"  # beside another output: not now
        live.mkdir(), other.mkdir(), elsewhere.mkdir(parents=True)
        build(final, "v2")
        assert [d for d in [*stale, other] if d.exists()] == []
        assert live.is_dir() and elsewhere.is_dir()
        assert (final / "data.txt").read_text() == "v2"
    finally:
        sleeper.kill()
        sleeper.wait()


def _lake_with_leftovers(root: Path) -> tuple[list[Path], list[Path]]:
    """A lake holding killed builds' leftovers where DVC's run cache would leave them (beside a
    selection, an export, an ingested source), and names that must stay: a live build's, and one
    inside a finished output."""
    dead = dead_pid()
    (root / "selections" / "1k").mkdir(parents=True)
    (root / "selections" / "1k" / "manifest.json").write_text("{}")
    gone = [
        root / "selections" / f".10k.tmp-{dead}",
        root / "exports" / "sft" / f".316.tmp-{dead}",
        root / "trajectories" / f".swesmith.parts-{dead}-abc",
        root / f".pool.old-{dead}",
    ]
    kept = [root / "selections" / "1k" / f".inside.tmp-{dead}", root / "selections" / f".3k.tmp-{os.getpid()}"]
    for path in gone + kept:
        path.mkdir(parents=True)
        (path / "part-0.parquet").write_bytes(b"half written")
    return gone, kept


def test_a_sweep_removes_dead_builds_leftovers_anywhere_in_the_lake(tmp_path):
    """DVC may restore a killed stage from its run cache without running it: the lake is swept by
    readers and stages, not only by the next build of that output."""
    from tracelake.core.swap import sweep

    gone, kept = _lake_with_leftovers(tmp_path / "lake")
    assert sorted(sweep(tmp_path / "lake")) == sorted(gone)
    assert not any(p.exists() for p in gone) and all(p.exists() for p in kept)


@pytest.mark.parametrize(
    "command",
    [["tracelake", "status", "--lake", "lake"], ["tracelake", "sql", "--lake", "lake", "SELECT 1"]],
    ids=["status", "sql"],
)
def test_readers_sweep_dead_builds_leftovers(tmp_path, command):
    gone, kept = _lake_with_leftovers(tmp_path / "lake")
    command = [str(Path(sys.executable).with_name(command[0])), *command[1:]]  # this environment's CLI
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert len(proc.stderr.splitlines()) <= 1, proc.stderr  # nothing built: one line, no traceback
    assert not any(p.exists() for p in gone) and all(p.exists() for p in kept)


def test_scratch_dirs_without_a_pid_are_removed_when_older_than_the_build(tmp_path):
    final = tmp_path / "trajectories" / "s"
    final.parent.mkdir(parents=True)
    old, own, other = (final.with_name(n) for n in (".s.parts-k2j4x_1a", ".s.parts-zz9_0abc", ".t.parts-k2j4x_1a"))
    for d in (old, own, other):
        d.mkdir()
    an_hour_ago = time.time() - 3600
    for d in (old, other):
        os.utime(d, (an_hour_ago, an_hour_ago))
    build(final, "v1")
    assert not old.exists() and own.is_dir() and other.is_dir()


def test_a_leftover_json_temp_file_is_removed(tmp_path):
    path = tmp_path / "metrics.json"
    leftover = tmp_path / f".metrics.json.tmp-{dead_pid()}"
    leftover.write_text('{"half": ')
    write_json(path, {"a": 1})
    assert not leftover.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["metrics.json"]


def test_a_json_file_leaves_other_names_alone(tmp_path):
    """write_json may write into a directory that is not tracelake's (`--metrics FILE`): it removes
    only its own file's leftovers, never another name that merely looks like one."""
    other = tmp_path / f".notes.txt.tmp-{dead_pid()}"
    other.write_text("someone else's")
    write_json(tmp_path / "metrics.json", {"a": 1})
    assert other.read_text() == "someone else's"


def test_an_old_version_without_its_output_is_removed_and_rebuilt(tmp_path):
    """Killed between the two renames of the fallback swap: no output, a complete `.old-<pid>`."""
    final = tmp_path / "pool"
    build(final, "v1")
    old = final.with_name(f".pool.old-{dead_pid()}")
    final.rename(old)
    assert versions(Lake(tmp_path)) == {}
    build(final, "v2")
    assert not old.exists() and (final / "data.txt").read_text() == "v2"


def test_a_reused_pid_does_not_keep_a_leftover(tmp_path):
    """The pid in a leftover's name now names a process started after the leftover was written."""
    final = tmp_path / "scores"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        leftover = final.with_name(f".scores.tmp-{sleeper.pid}")
        leftover.mkdir()
        os.utime(leftover, (time.time() - 3600, time.time() - 3600))
        build(final, "v1")
        assert not leftover.exists()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_temporary_names_carry_the_pid(tmp_path):
    from tracelake.core import swap

    assert swap.owner_pid(".s.parts-123-ab_c9") == ("s", 123)
    assert swap.owner_pid(".s.b.tmp-77") == ("s.b", 77)
    assert swap.owner_pid(".manifest.json.tmp-77") == ("manifest.json", 77)
    assert swap.owner_pid(".s.parts-k2j4x_1a") is None  # no pid (mkdtemp's name): removed by age
    assert swap.owner_pid("s") is None and swap.owner_pid(".s.tmp-") is None
    scratch = swap.scratch_dir(tmp_path / "lake" / "s")
    assert swap.owner_pid(scratch.name) == ("s", os.getpid()) and scratch.is_dir()


# --- the swap -------------------------------------------------------------------------------------

_KILL_AT_STEP = """
import os, signal, sys
from pathlib import Path
from tracelake.core.outputs import output_dir, write_json
final, step, text = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
steps = 0
armed = False
def hook(event, args):
    global steps
    if armed and event in ("os.rename", "os.replace", "os.remove", "os.rmdir", "shutil.rmtree",
                           "ctypes.call_function"):
        steps += 1
        if steps == step:
            os.kill(os.getpid(), signal.SIGKILL)
sys.addaudithook(hook)
with output_dir(final) as tmp:
    (tmp / "data.txt").write_text(text)
    write_json(tmp / "manifest.json", {"version": text})
    armed = True
print(steps)
"""


def _swap_killed_at(final: Path, step: int, text: str) -> int | None:
    """Build `final` in a child process SIGKILLed at the swap's `step`-th file-system call; the
    number of steps when it finished instead."""
    proc = subprocess.run(
        [sys.executable, "-c", _KILL_AT_STEP, str(final), str(step), text], capture_output=True, text=True
    )
    if proc.returncode == -signal.SIGKILL:
        return None
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout)


def test_a_kill_at_any_step_of_the_swap_leaves_a_whole_version(tmp_path):
    """With renameat2's exchange the output is never missing; the two-rename fallback (other
    systems) has that moment, and the next build recovers from it (test above)."""
    if not hasattr(ctypes.CDLL(None), "renameat2"):
        pytest.skip("no renameat2 here: the swap falls back to two renames")
    final = tmp_path / "selections" / "1k"
    build(final, "v0")
    for step in range(1, 50):
        before = (final / "data.txt").read_text()
        finished = _swap_killed_at(final, step, f"v{step}")
        assert final.is_dir(), f"killed at step {step} of the swap: {final} is missing"
        assert (final / "data.txt").read_text() in (before, f"v{step}")
        assert Lake(tmp_path).built_selections() == {"1k": final}  # leftovers are never listed
        if finished is not None:
            break
    assert step > 2
    build(final, "last")
    assert sorted(p.name for p in final.parent.iterdir()) == ["1k"]


def test_without_renameat2_the_swap_falls_back_to_renames(tmp_path, monkeypatch):
    from tracelake.core import swap

    monkeypatch.setattr(swap, "_RENAMEAT2", None)
    final = tmp_path / "pool"
    build(final, "v1")
    build(final, "v2")
    assert (final / "data.txt").read_text() == "v2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pool"]


# --- DVC's own state files ------------------------------------------------------------------------


def test_status_names_an_empty_dvc_lock_and_rwlock(tmp_path, monkeypatch):
    from tracelake.explore.status import dvc_problems

    monkeypatch.chdir(tmp_path)
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    (tmp_path / ".dvc" / "tmp").mkdir(parents=True)
    assert dvc_problems(tmp_path) == []
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    (tmp_path / ".dvc" / "tmp" / "rwlock").write_text('{"read": {}, "write": {}}')
    assert dvc_problems(tmp_path) == []
    (tmp_path / "dvc.lock").write_bytes(b"")
    (tmp_path / ".dvc" / "tmp" / "rwlock").write_bytes(b"")
    problems = dvc_problems(tmp_path)
    assert len(problems) == 2
    assert "dvc.lock" in problems[0] and "git checkout dvc.lock" in problems[0]
    assert "rwlock" in problems[1] and "delete it" in problems[1]
    source = tmp_path / "lake" / "tasks" / "s"
    source.mkdir(parents=True)
    write_json(
        source / "manifest.json",
        {"version_id": "0" * 12, "tables": {}, "counts": {"inputs": 0, "rows": 0, "rejects": 0}},
    )
    console = Console(record=True, width=300)
    render_status(tmp_path / "lake", console)
    text = console.export_text()
    assert "git checkout dvc.lock" in text and ".dvc/tmp/rwlock" in text


# --- the pipeline, killed -------------------------------------------------------------------------


def _env() -> dict[str, str]:
    return dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


def repro_killed_when(repo: Path, pattern: str, delay: float, *, force: bool = False, timeout: float = 180) -> bool:
    """Run `dvc repro` (`--force`: every stage); once a path matching `pattern` (a glob under repo)
    appears, wait `delay` seconds and SIGKILL its whole process group. False when it ended first."""
    proc = subprocess.Popen(
        ["dvc", "repro", *(["--force"] if force else [])],
        cwd=repo,
        env=_env(),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if next(repo.glob(pattern), None) is not None:
                time.sleep(delay)
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return True
            time.sleep(0.01)
        return False
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob(".*") if TEMP_NAME.match(p.name))


# (what must exist, then seconds to wait before the kill): inside a stage, its output half written
KILLS = [
    ("lake/trajectories/.superuser.tmp-*/trajectories", 0.2),  # ingest, a table half written
    ("lake/exports/sft/.1k.tmp-*", 0.1),  # export_sft, shards half written
]
MORE_KILLS = [  # each in a forced rebuild of its own
    ("lake/trajectories/.swesmith.parts-*", 0.0),  # ingest, before its output dir
    ("lake/tasks/.tezos.tmp-*", 0.0),
    ("lake/trajectories/.nl2bash.tmp-*/manifest.json", 0.0),  # at the swap itself
    ("lake/.scores.tmp-*", 0.05),
    ("lake/.dedup.tmp-*", 0.0),
    ("lake/.pool.tmp-*", 0.1),
    ("lake/selections/.3k.tmp-*", 0.0),
    ("lake/exports/sft/.10k.tmp-*", 0.3),
    ("lake/exports/.rl.tmp-*", 0.1),
    ("training/.configs.tmp-*", 0.0),
]


def unbuilt_copy(project: Path, dest: Path) -> Path:
    """The project files of a built project (its code as it was built, whatever changed in the
    work tree since), without outputs, dvc.lock, DVC's or tracelake's caches, in a new git repository."""

    def ignore(directory: str, names: list[str]) -> set[str]:
        rel = Path(directory).relative_to(project)
        skip = {"dvc.lock", ".git", ".tracelake", *OUTPUTS} if rel == Path(".") else set()
        generated = ("training/configs", ".dvc/cache", ".dvc/tmp")
        return skip | {n for n in names if (rel / n).as_posix() in generated}

    shutil.copytree(project, dest, symlinks=True, ignore=ignore)
    run_ok(["git", "init", "-q"], dest)
    return dest


def same_as_uninterrupted(repo: Path, reference: Path) -> None:
    """dvc.lock and every output equal the reference's (a killed run's hidden leftovers are no
    output); the message lists what differs."""
    ours, theirs = ((r / "dvc.lock").read_text().splitlines() for r in (repo, reference))
    assert ours == theirs, "dvc.lock differs:\n" + "\n".join(difflib.unified_diff(theirs, ours, lineterm="", n=8))
    ours, theirs = (
        {
            k: v
            for k, v in tree_digest(*(r / d for d in OUTPUTS)).items()
            if not any(TEMP_NAME.match(part) for part in Path(k).parts)
        }
        for r in (repo, reference)
    )
    differ = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
    assert not differ, f"outputs differ: {differ[:20]}"


def test_a_pipeline_killed_three_times_reruns_to_the_same_bytes(sample_project, tmp_path):
    """One run killed inside ingest, the next inside dedup, the next inside an export; then a run
    to the end: the bytes of a run never killed, and nothing left behind."""
    repo = unbuilt_copy(sample_project, tmp_path / "killed")
    killed = [pattern for pattern, delay in KILLS if repro_killed_when(repo, pattern, delay)]
    assert killed == [pattern for pattern, _ in KILLS], "a kill point was not reached"
    run_ok(["dvc", "repro"], repo)
    assert leftovers(repo / "lake") == [] and leftovers(repo / "training") == []
    same_as_uninterrupted(repo, sample_project)
    # A forced rebuild killed inside ingest: the rerun may restore that stage from DVC's run cache
    # instead of running it, and then nothing removes its leftover; .dvcignore keeps it out of
    # dvc.lock. Where the kill lands depends on timing (after the swap, no leftover is left), so a
    # dead builder's leftover is also planted, before the rerun and after it.
    assert repro_killed_when(repo, "lake/tasks/.superuser.tmp-*/tasks.parquet", 0.0, force=True)
    plant_leftover(repo / "lake" / "tasks" / "superuser")
    run_ok(["dvc", "repro"], repo)
    same_as_uninterrupted(repo, sample_project)
    plant_leftover(repo / "lake" / "trajectories" / "superuser")
    assert leftovers(repo / "lake")
    run_ok(["tracelake", "status"], repo)  # a reader sweeps what no build will
    assert leftovers(repo / "lake") == []


def plant_leftover(output: Path) -> Path:
    """What a builder killed inside `output`'s stage leaves: `.<name>.tmp-<pid>/` with a half-written
    file, owned by a process that is gone."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    leftover = output.with_name(f".{output.name}.tmp-{gone.pid}")
    leftover.mkdir()
    (leftover / "part.parquet").write_bytes(b"PAR1 half written")
    return leftover


@pytest.mark.long
def test_a_pipeline_killed_everywhere_reruns_to_the_same_bytes(sample_project, tmp_path):
    """A forced rebuild killed at each point in turn, each followed by a run to the end."""
    repo = unbuilt_copy(sample_project, tmp_path / "killed")
    run_ok(["dvc", "repro"], repo)
    for pattern, delay in MORE_KILLS:
        reached = repro_killed_when(repo, pattern, delay, force=True)
        run_ok(["dvc", "repro"], repo)
        same_as_uninterrupted(repo, sample_project)
        print(pattern, "killed" if reached else "not reached")


@pytest.mark.long
def test_a_pipeline_killed_at_random_times_reruns_to_the_same_bytes(sample_project, tmp_path):
    """Kills at fixed offsets (in seconds) after each start: wherever they land."""
    repo = unbuilt_copy(sample_project, tmp_path / "killed")
    for seconds in (1.5, 2.7, 4.1, 5.3, 7.9, 3.3):
        proc = subprocess.Popen(
            ["dvc", "repro"],
            cwd=repo,
            env=_env(),
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    from tracelake.explore.status import dvc_problems

    for problem in dvc_problems(repo):  # DVC's files emptied by a kill: docs/reliability.md
        print(problem)
        name = problem.split()[0]
        assert name in ("dvc.lock", ".dvc/tmp/rwlock") or name.endswith(("/dvc.lock", "/rwlock")), problem
        (repo / ("dvc.lock" if name.endswith("dvc.lock") else ".dvc/tmp/rwlock")).unlink()
    run_ok(["dvc", "repro"], repo)
    same_as_uninterrupted(repo, sample_project)
