"""A revision's files are placed only inside the temporary tree that `--rev` creates and removes: no
path option (`--lake`, a diff's `REV:path`, the notebook's path) can put them anywhere else, however
it climbs (`../..`, `lake/../..`, an absolute path, the repository root itself)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tracelake.core.errors import BadInput
from tracelake.core.revisions import _target, inside_repository, tree_at
from tracelake.explore.notebook import open_lake

from ..helpers import run_ok, run_tracelake

CLIMBING = ["../..", "..", "lake/../..", "lake/../../..", "../../lake", "/", "/tmp", ".", "lake/.."]


@pytest.fixture(scope="module")
def committed(sample_project, tmp_path_factory) -> Path:
    """The built sample, committed (its lake tracked by DVC through dvc.lock)."""
    repo = shutil.copytree(sample_project, tmp_path_factory.mktemp("revpaths") / "repo", symlinks=True)
    run_ok(["git", "add", "-A"], repo)
    run_ok(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "built"], repo)
    return repo


def listing(top: Path) -> list[str]:
    """Every name under `top` (not following links), sorted: what a stray write would change."""
    names = []
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            names.append(os.path.relpath(os.path.join(dirpath, name), top))
    return sorted(names)


@pytest.fixture
def deep_tmpdir(tmp_path) -> tuple[Path, Path]:
    """(X, X/a/b): TMPDIR two levels below a directory whose listing the test watches."""
    tmpdir = tmp_path / "a" / "b"
    tmpdir.mkdir(parents=True)
    (tmp_path / "a" / "keep.txt").write_text("mine\n")
    return tmp_path, tmpdir


def one_line(proc) -> bool:
    lines = proc.stderr.splitlines()
    return proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("tracelake: ")


@pytest.mark.parametrize("lake", CLIMBING)
def test_sql_rev_with_a_climbing_lake_writes_nothing_anywhere(committed, deep_tmpdir, lake):
    top, tmpdir = deep_tmpdir
    before, root_before = listing(top), sorted(os.listdir("/"))
    proc = run_tracelake(committed, "sql", "--rev", "HEAD", "--lake", lake, "SELECT 1", env={"TMPDIR": str(tmpdir)})
    assert one_line(proc), (proc.returncode, proc.stderr)
    assert "not a path inside the repository" in proc.stderr or "--lake is the lake's path" in proc.stderr
    assert listing(top) == before  # nothing beside or above the temporary directory, nor in it
    assert sorted(os.listdir("/")) == root_before


@pytest.mark.parametrize(
    "args",
    [
        ["view", "--rev", "HEAD", "--lake", "../..", "--port", "0"],
        ["diff", "HEAD:../..", "HEAD:1k"],
        ["diff", "HEAD:lake/../../..", "1k"],
        ["diff", "--lake", "../..", "HEAD:1k", "1k"],
    ],
)
def test_every_command_taking_a_revision_refuses_a_climbing_path(committed, deep_tmpdir, args):
    top, tmpdir = deep_tmpdir
    before = listing(top)
    proc = run_tracelake(committed, *args, env={"TMPDIR": str(tmpdir)}, timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert listing(top) == before


@pytest.mark.parametrize("path", ["../..", "lake/../..", "..", "."])
def test_the_notebook_at_a_revision_refuses_a_climbing_path(committed, deep_tmpdir, monkeypatch, path):
    top, tmpdir = deep_tmpdir
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again
    before, root_before = listing(top), sorted(os.listdir("/"))
    with pytest.raises(BadInput, match="not a path inside the repository"):
        open_lake(path, rev="HEAD", root=committed)
    assert listing(top) == before
    assert sorted(os.listdir("/")) == root_before


def test_a_revision_read_inside_the_repository_leaves_no_file_behind(committed, deep_tmpdir):
    top, tmpdir = deep_tmpdir
    before = listing(top)
    proc = run_tracelake(
        committed,
        "sql",
        "--rev",
        "HEAD",
        "--lake",
        "lake/../lake",
        "--format",
        "csv",
        "SELECT count(*) AS n FROM pool",
        env={"TMPDIR": str(tmpdir)},
    )
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.splitlines()[1]) > 0
    assert listing(top) == before  # its temporary tree was made in TMPDIR and removed


@pytest.mark.parametrize("rev", ["", " ", "\t"])
def test_an_empty_revision_is_refused_not_taken_as_head(committed, rev):
    proc = run_tracelake(committed, "sql", "--rev", rev, "SELECT 1")
    assert one_line(proc), proc.stderr
    assert "revision is empty" in proc.stderr


@pytest.mark.parametrize("path", ["", "/etc", "..", "a/../..", ".", "./", "lake/\x00"])
def test_inside_repository_refuses_what_is_not_below_the_root(path):
    with pytest.raises(BadInput):
        inside_repository(path)


@pytest.mark.parametrize("path,norm", [("lake", "lake"), ("lake/", "lake"), ("./lake", "lake"), ("a/../lake", "lake")])
def test_inside_repository_normalises_a_path_below_the_root(path, norm):
    assert inside_repository(path) == norm


def test_a_listing_name_that_climbs_or_strays_is_never_placed(tmp_path):
    out = tmp_path / "tree"
    out.mkdir()
    assert _target(out, "lake", "lake/pool/pool.parquet") == out / "lake" / "pool" / "pool.parquet"
    for name in ("../../etc/passwd", "lake/../../x", "other/x", "/etc/passwd", "lakes/x"):
        with pytest.raises(BadInput):
            _target(out, "lake", name)
    (out / "lake").mkdir()
    (out / "lake" / "link").symlink_to(tmp_path)  # a link already in the tree never carries a file out
    with pytest.raises(BadInput, match="outside the temporary tree"):
        _target(out, "lake", "lake/link/x/y")


def test_tree_at_refuses_before_it_creates_anything(committed, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    with pytest.raises(BadInput, match="not a path inside the repository"):
        with tree_at("HEAD", ["lake", "../.."], root=committed):
            pass
    assert list(tmp_path.iterdir()) == []


SEGMENTS = ["..", ".", "lake", "pool", "", "x", "...", "..x", "\\..", " .."]


def _paths():
    from hypothesis import strategies as st

    segment = st.one_of(st.sampled_from(SEGMENTS), st.text(min_size=1, max_size=4))
    return st.builds(
        lambda lead, parts: lead + "/".join(parts),
        st.sampled_from(["", "/", "./", "//"]),
        st.lists(segment, max_size=8),
    )


def _fuzz(test):
    from hypothesis import given

    from ..helpers import fuzz_settings

    return fuzz_settings()(given(path=_paths(), name=_paths())(test))


@_fuzz
def test_fuzz_no_path_or_listed_name_lands_outside_the_tree(tmp_path_factory, path, name):
    """Whatever the path asked for and whatever name a listing gives back: either a one-line refusal,
    or a place strictly below the temporary tree (checked by the file system's own resolution)."""
    out = tmp_path_factory.mktemp("tree")
    try:
        norm = inside_repository(path)
    except BadInput:
        return
    real_out = os.path.realpath(out)
    placed = os.path.realpath(out / norm)
    assert placed != real_out and placed.startswith(real_out + os.sep)
    try:
        target = _target(out, norm, name)
    except BadInput:
        return
    placed = os.path.realpath(target)
    assert placed.startswith(real_out + os.sep)
    assert placed == os.path.realpath(out / norm) or placed.startswith(os.path.realpath(out / norm) + os.sep)
