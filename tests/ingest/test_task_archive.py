"""Task archives: real task directories survive build -> extract unchanged; unsafe archives and
table rows are refused with BadInput naming the member, and nothing is left behind."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tracelake.core.errors import BadInput
from tracelake.ingest import task_archive
from tracelake.ingest.common import Reject
from tracelake.ingest.task_archive import (
    Entry,
    Member,
    build_archive,
    extract_archive,
    extract_table,
    read_archive,
    walk_task_dir,
)

from ..helpers import FIXTURES, need

REAL_TASKS = {
    "hello-world": FIXTURES / "harbor" / "examples" / "tasks" / "hello-world",
    "csv-filter": FIXTURES / "harbor" / "harbor_tasks" / "csv-filter",
    "word-count": FIXTURES / "harbor" / "harbor_tasks" / "word-count",
}


def tree(root: Path) -> dict[str, tuple]:
    """Relative path -> ("dir",) or ("file", bytes, executable), links refused."""
    out: dict[str, tuple] = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(d) / name
            rel = p.relative_to(root).as_posix()
            st = p.lstat()
            assert not stat.S_ISLNK(st.st_mode), f"{rel} is a link"
            out[rel] = ("dir",) if stat.S_ISDIR(st.st_mode) else ("file", p.read_bytes(), bool(st.st_mode & 0o111))
    return out


def modes(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): stat.S_IMODE(p.lstat().st_mode) for p in [root, *root.rglob("*")]}


def make_task(d: Path) -> Path:
    """A small task directory with an executable file and an empty subdirectory."""
    (d / "tests").mkdir(parents=True)
    (d / "environment" / "empty").mkdir(parents=True)
    (d / "instruction.md").write_text("Print hello.\n")
    (d / "task.toml").write_text('version = "1.0"\n')
    (d / "tests" / "test.sh").write_text("#!/bin/sh\nexit 0\n")
    (d / "tests" / "test.sh").chmod(0o750)
    (d / "tests" / "data.bin").write_bytes(bytes(range(256)))
    return d


def targz(members: list[tuple[str, str, bytes | str | None]], *, mode: int = 0o644) -> bytes:
    """A gzipped tar of (kind, name, data-or-linkname) members, kind in file/dir/sym/lnk/chr/fifo."""
    types = {
        "file": tarfile.REGTYPE,
        "dir": tarfile.DIRTYPE,
        "sym": tarfile.SYMTYPE,
        "lnk": tarfile.LNKTYPE,
        "chr": tarfile.CHRTYPE,
        "fifo": tarfile.FIFOTYPE,
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for kind, name, data in members:
            info = tarfile.TarInfo(name)
            info.type, info.mode = types[kind], mode
            if kind == "file":
                info.size = len(data or b"")
                tar.addfile(info, io.BytesIO(data or b""))
            else:
                if kind in ("sym", "lnk"):
                    info.linkname = data
                tar.addfile(info)
    return buf.getvalue()


GOOD = [("file", "instruction.md", b"Do it.\n")]


# --- round trip --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(REAL_TASKS))
def test_real_task_round_trips(tmp_path, name):
    src = need(REAL_TASKS[name])
    written = extract_archive(build_archive(walk_task_dir(src)), tmp_path / "out")
    assert tree(tmp_path / "out") == tree(src)
    assert written == sorted(k for k, v in tree(src).items() if v[0] == "file")


def test_built_task_round_trips_with_exec_bits_empty_dirs_and_modes(tmp_path):
    src = make_task(tmp_path / "src")
    dest = tmp_path / "a" / "b" / "out"
    written = extract_archive(build_archive(walk_task_dir(src)), dest)
    assert tree(dest) == tree(src)
    assert written == ["instruction.md", "task.toml", "tests/data.bin", "tests/test.sh"]
    assert tree(dest)["environment/empty"] == ("dir",)
    got = modes(dest)
    assert got["tests/test.sh"] == 0o755 and got["instruction.md"] == 0o644
    assert got["."] == got["environment/empty"] == got["tests"] == 0o755
    assert sorted(os.listdir(tmp_path / "a" / "b")) == ["out"]


def test_modes_are_normalised_and_an_empty_dest_dir_is_used(tmp_path):
    data = targz([("file", "run.sh", b"#!/bin/sh\n"), ("dir", "d", None)], mode=0o700)
    data_ro = targz([("file", "notes.txt", b"x")], mode=0o600)
    (tmp_path / "out").mkdir()
    assert extract_archive(data, tmp_path / "out") == ["run.sh"]
    assert modes(tmp_path / "out") == {".": 0o755, "run.sh": 0o755, "d": 0o755}
    extract_archive(data_ro, tmp_path / "ro")
    assert modes(tmp_path / "ro")["notes.txt"] == 0o644


def test_a_tar_with_one_top_level_directory_extracts_its_contents(tmp_path):
    data = targz(
        [("dir", "hello", None), ("file", "hello/instruction.md", b"Hi.\n"), ("file", "hello/tests/t.sh", b"exit 0\n")]
    )
    assert extract_archive(data, tmp_path / "out") == ["instruction.md", "tests/t.sh"]
    assert (tmp_path / "out" / "instruction.md").read_bytes() == b"Hi.\n"


# --- rejections --------------------------------------------------------------------------------


def refused(tmp_path: Path, data: bytes, member: str) -> str:
    """Extracting data must raise BadInput naming member and leave tmp_path exactly as it was."""
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(BadInput) as e:
        extract_archive(data, tmp_path / "out" / "task", label="swesmith/swesmith-0003")
    msg = str(e.value)
    assert repr(member) in msg and "nothing was extracted" in msg and "\n" not in msg, msg
    assert msg.startswith("task_binary of swesmith/swesmith-0003: ")
    assert sorted(os.listdir(tmp_path)) == before
    return msg


def test_dotdot_member_is_refused(tmp_path):
    msg = refused(tmp_path, targz([*GOOD, ("file", "../evil", b"x")]), "../evil")
    assert "'..' component" in msg


def test_nested_dotdot_member_is_refused(tmp_path):
    refused(tmp_path, targz([*GOOD, ("file", "tests/../../evil", b"x")]), "tests/../../evil")


def test_absolute_member_is_refused(tmp_path):
    msg = refused(tmp_path, targz([*GOOD, ("file", "/etc/evil", b"x")]), "/etc/evil")
    assert "absolute path" in msg


def test_symlink_member_is_refused(tmp_path):
    msg = refused(tmp_path, targz([*GOOD, ("sym", "tests/link", "/etc/passwd")]), "tests/link")
    assert "is a link" in msg and "/etc/passwd" in msg


def test_hardlink_member_is_refused(tmp_path):
    msg = refused(tmp_path, targz([*GOOD, ("lnk", "tests/hard", "instruction.md")]), "tests/hard")
    assert "is a link" in msg


def test_character_device_member_is_refused(tmp_path):
    msg = refused(tmp_path, targz([*GOOD, ("chr", "dev/null", None)]), "dev/null")
    assert "device, fifo" in msg


def test_fifo_member_is_refused(tmp_path):
    msg = refused(tmp_path, targz([*GOOD, ("fifo", "pipe", None)]), "pipe")
    assert "device, fifo" in msg


def test_nul_byte_in_a_member_name_is_refused(tmp_path):
    """A PAX path can hold a NUL byte (tarfile.data_filter's realpath raises ValueError on one)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(tarfile.TarInfo("instruction.md"), io.BytesIO(b""))
        info = tarfile.TarInfo("placeholder")
        info.pax_headers = {"path": "tests/a\x00b"}
        tar.addfile(info, io.BytesIO(b""))
    msg = refused(tmp_path, buf.getvalue(), "tests/a\x00b")
    assert "NUL byte" in msg
    with pytest.raises(Reject) as r:
        read_archive(buf.getvalue())
    assert r.value.reason == "unsafe_archive"


def test_duplicate_member_is_refused(tmp_path):
    msg = refused(tmp_path, targz([*GOOD, ("file", "instruction.md", b"other\n")]), "instruction.md")
    assert "appears twice" in msg


def test_fine_members_then_a_bad_one_write_nothing(tmp_path):
    data = targz(
        [*GOOD, ("dir", "tests", None), ("file", "tests/test.sh", b"exit 0\n"), ("file", "tests/../../../escape", b"x")]
    )
    refused(tmp_path, data, "tests/../../../escape")
    assert not (tmp_path / "out").exists()
    assert not (tmp_path.parent / "escape").exists()


def test_unreadable_archive_is_refused(tmp_path):
    with pytest.raises(BadInput, match="not a readable gzipped tar.*nothing was extracted"):
        extract_archive(b"not a tar at all", tmp_path / "out")
    assert os.listdir(tmp_path) == []


def test_non_empty_dest_is_refused_and_left_alone(tmp_path):
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    with pytest.raises(BadInput, match="already exists and is not an empty directory") as e:
        extract_archive(targz(GOOD), dest)
    assert str(dest) in str(e.value)
    assert tree(dest) == {"keep.txt": ("file", b"mine", False)}
    assert os.listdir(tmp_path) == ["out"]


def test_a_file_or_symlinked_dest_is_refused(tmp_path):
    (tmp_path / "out").write_text("x")
    with pytest.raises(BadInput, match="already exists"):
        extract_archive(targz(GOOD), tmp_path / "out")
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    with pytest.raises(BadInput, match="already exists"):
        extract_archive(targz(GOOD), tmp_path / "link")
    assert os.listdir(tmp_path / "empty") == []


def test_a_member_resolving_outside_dest_is_refused_even_if_the_vetting_missed_it(tmp_path, monkeypatch):
    names = ["a.txt", "../escape"]
    monkeypatch.setattr(task_archive, "list_archive", lambda data, limits: [Entry(n, is_dir=False) for n in names])
    monkeypatch.setattr(
        task_archive, "members", lambda data, limits: ((Member(n, False, False), iter([b"x"])) for n in names)
    )
    with pytest.raises(BadInput, match="member '../escape' resolves outside the destination"):
        extract_archive(b"", tmp_path / "x" / "out")
    assert os.listdir(tmp_path) == []


def test_a_member_under_a_file_is_refused(tmp_path):
    with pytest.raises(BadInput, match="member 'instruction.md/x' lies below 'instruction.md', which is a file"):
        extract_archive(targz([*GOOD, ("file", "instruction.md/x", b"x")]), tmp_path / "out")
    assert os.listdir(tmp_path) == []


# --- task tables -------------------------------------------------------------------------------


def write_table(path: Path, rows: list[tuple[str | None, bytes | None]]) -> Path:
    pq.write_table(
        pa.table(
            {
                "path": pa.array([r[0] for r in rows], pa.string()),
                "task_binary": pa.array([r[1] for r in rows], pa.binary()),
                "source": pa.array(["s"] * len(rows), pa.string()),
            }
        ),
        path,
    )
    return path


@pytest.fixture
def two_tasks(tmp_path) -> tuple[Path, Path, bytes]:
    src = make_task(tmp_path / "src")
    binary = build_archive(walk_task_dir(src))
    other = targz([("dir", "wc", None), ("file", "wc/instruction.md", b"Count words.\n")])
    table = write_table(tmp_path / "tasks.parquet", [("swesmith/swesmith-0003", binary), ("tb/word-count", other)])
    return table, src, other


def test_extract_table_writes_every_row(tmp_path, two_tasks):
    table, src, _ = two_tasks
    written = extract_table(table, tmp_path / "out")
    assert written == [tmp_path / "out" / "swesmith" / "swesmith-0003", tmp_path / "out" / "tb" / "word-count"]
    assert tree(written[0]) == tree(src)
    assert tree(written[1]) == {"instruction.md": ("file", b"Count words.\n", False)}


def test_extract_table_names_select_by_path_or_last_component(tmp_path, two_tasks):
    table, _, _ = two_tasks
    assert extract_table(table, tmp_path / "a", names=["word-count"]) == [tmp_path / "a" / "tb" / "word-count"]
    assert extract_table(table, tmp_path / "b", names=["swesmith/swesmith-0003"]) == [
        tmp_path / "b" / "swesmith" / "swesmith-0003"
    ]
    assert sorted(os.listdir(tmp_path / "a")) == ["tb"]


def test_extract_table_unknown_name_extracts_nothing(tmp_path, two_tasks):
    table, _, _ = two_tasks
    with pytest.raises(BadInput, match="no task named 'nope' — nothing was extracted"):
        extract_table(table, tmp_path / "out", names=["word-count", "nope"])
    assert not (tmp_path / "out").exists()


def test_extract_table_refuses_a_dotdot_path(tmp_path, two_tasks):
    _, _, other = two_tasks
    table = write_table(tmp_path / "bad.parquet", [("ok/task", other), ("../x", other)])
    with pytest.raises(BadInput, match=r"row 1 path '\.\./x' is absolute or has a '\.\.' component"):
        extract_table(table, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "x").exists()


@pytest.mark.parametrize("path", ["/abs/task", "", ".", None])
def test_extract_table_refuses_absolute_and_empty_paths(tmp_path, two_tasks, path):
    _, _, other = two_tasks
    table = write_table(tmp_path / "bad.parquet", [(path, other)])
    with pytest.raises(BadInput, match="row 0"):
        extract_table(table, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_extract_table_refuses_an_existing_target(tmp_path, two_tasks):
    table, _, _ = two_tasks
    (tmp_path / "out" / "tb" / "word-count").mkdir(parents=True)
    with pytest.raises(BadInput, match="already exists; pass a new --out"):
        extract_table(table, tmp_path / "out")
    assert sorted(os.listdir(tmp_path / "out")) == ["tb"]


def test_extract_table_refuses_duplicate_and_nested_paths(tmp_path, two_tasks):
    _, _, other = two_tasks
    dup = write_table(tmp_path / "dup.parquet", [("a/t", other), ("a/t", other)])
    with pytest.raises(BadInput, match="rows 0 and 1 both have path 'a/t'"):
        extract_table(dup, tmp_path / "out")
    nested = write_table(tmp_path / "nested.parquet", [("a", other), ("a/t", other)])
    with pytest.raises(BadInput, match="path 'a/t' lies inside task 'a'"):
        extract_table(nested, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_extract_table_undoes_earlier_rows_when_a_later_archive_is_unsafe(tmp_path, two_tasks):
    _, _, other = two_tasks
    table = write_table(
        tmp_path / "t.parquet", [("good/one", other), ("bad/two", targz([*GOOD, ("sym", "evil", "/")]))]
    )
    (tmp_path / "out").mkdir()
    with pytest.raises(BadInput, match="task_binary of bad/two: member 'evil' is a link"):
        extract_table(table, tmp_path / "out")
    assert os.listdir(tmp_path / "out") == []


def test_extract_table_needs_path_and_task_binary_columns(tmp_path):
    pq.write_table(pa.table({"path": ["a"]}), tmp_path / "t.parquet")
    with pytest.raises(BadInput, match="no 'task_binary' column"):
        extract_table(tmp_path / "t.parquet", tmp_path / "out")
    (tmp_path / "x.parquet").write_text("not parquet")
    with pytest.raises(BadInput, match="not a readable Parquet file"):
        extract_table(tmp_path / "x.parquet", tmp_path / "out")


# --- the command -------------------------------------------------------------------------------


def tracelake(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracelake", *args], capture_output=True, text=True, check=False)


def test_cli_extracts_a_table(tmp_path, two_tasks):
    table, src, _ = two_tasks
    proc = tracelake("tasks", "extract", str(table), "--out", str(tmp_path / "out"), "--task", "swesmith-0003")
    assert proc.returncode == 0, proc.stderr
    assert "1 task directories" in proc.stdout
    assert tree(tmp_path / "out" / "swesmith" / "swesmith-0003") == tree(src)
    assert not (tmp_path / "out" / "tb").exists()


def test_cli_refuses_an_unsafe_archive_in_one_line(tmp_path):
    table = write_table(tmp_path / "t.parquet", [("swesmith/swesmith-0003", targz([*GOOD, ("file", "../evil", b"x")]))])
    proc = tracelake("tasks", "extract", str(table), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert proc.stderr.startswith(
        "tracelake: task_binary of swesmith/swesmith-0003: member '../evil' "
        "has an absolute path or a '..' component — nothing was extracted"
    )
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()
