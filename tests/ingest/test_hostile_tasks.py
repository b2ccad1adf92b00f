"""Hostile task inputs: NUL names, member-count and size bombs, symlinks out of the input or the
output root. Each case ends as a reject row (ingest) or a one-line error (extract), never a
traceback, a hang, or a byte read from or written outside the roots the user named."""

from __future__ import annotations

import gzip
import inspect
import io
import os
import subprocess
import sys
import tarfile
import time
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tracelake.core.errors import BadInput
from tracelake.core.executor import Executor
from tracelake.core.tables import read_table
from tracelake.ingest.common import REASONS, Reject
from tracelake.ingest.params import ArchiveParams
from tracelake.ingest.task_archive import (
    extract_archive,
    extract_table,
    read_archive,
    walk_task_dir,
)
from tracelake.ingest.tasks import ingest_tasks
from tracelake.params import load_params

from ..helpers import ROOT

SECRET = b"TOPSECRET-7f3a9c-never-in-the-lake"


def tgz(members: list[tuple[str, bytes]], *, pax: dict[str, dict[str, str]] | None = None) -> bytes:
    """A gzipped PAX tar of (name, data) files; pax maps a member name to its extra PAX headers."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.pax_headers = (pax or {}).get(name, {})
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def table(path: Path, rows: list[tuple[str, bytes]]) -> Path:
    pq.write_table(
        pa.table({"path": [r[0] for r in rows], "task_binary": pa.array([r[1] for r in rows], pa.binary())}), path
    )
    return path


def tracelake(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tracelake", *args], capture_output=True, text=True, check=False, cwd=ROOT
    )


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc.stderr


def rejects(out: Path) -> list[dict]:
    return read_table(out, "rejects").to_pylist()


def files_under(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


GOOD = ("instruction.md", b"Do it.\n")


# --- a NUL byte in a member name -------------------------------------------------------------


def nul_archive() -> bytes:
    """A PAX header `path=tests/a\\x00b`: tar allows it, no file system does."""
    return tgz([GOOD, ("placeholder", b"x")], pax={"placeholder": {"path": "tests/a\x00b"}})


def test_a_nul_byte_in_a_member_name_is_rejected_at_ingest(tmp_path):
    result = ingest_tasks(
        table(tmp_path / "t.parquet", [("s/t", nul_archive())]), source="s", out_dir=tmp_path / "lake"
    )
    [rej] = rejects(tmp_path / "lake")
    assert result.rows == 0 and rej["reason"] == "unsafe_archive" and "NUL byte" in rej["detail"]


def test_a_nul_byte_in_a_member_name_is_refused_by_extract_in_one_line(tmp_path):
    proc = tracelake(
        "tasks", "extract", str(table(tmp_path / "t.parquet", [("s/t", nul_archive())])), "--out", str(tmp_path / "out")
    )
    assert "NUL byte" in one_line_error(proc)
    assert not (tmp_path / "out").exists()


def test_a_nul_byte_in_a_table_path_is_rejected_at_ingest_and_named_by_extract(tmp_path):
    t = table(tmp_path / "t.parquet", [("s/a\x00b", tgz([GOOD]))])
    result = ingest_tasks(t, source="s", out_dir=tmp_path / "lake")
    [rej] = rejects(tmp_path / "lake")
    assert result.rows == 0 and rej["reason"] == "invalid_field" and "NUL byte" in rej["detail"]
    proc = tracelake("tasks", "extract", str(t), "--out", str(tmp_path / "out"))
    assert "has a NUL byte" in one_line_error(proc)
    assert not (tmp_path / "out").exists()


# --- member count and size caps (params ingest.archive) ---------------------------------------


def test_defaults_cap_members_and_bytes():
    assert ArchiveParams() == ArchiveParams(max_members=100_000, max_total_bytes=2 << 30)
    assert load_params(ROOT / "params.yaml").ingest.archive == ArchiveParams()
    for f, arg in (
        (read_archive, "limits"),
        (walk_task_dir, "limits"),
        (extract_archive, "limits"),
        (extract_table, "limits"),
        (ingest_tasks, "archive"),
    ):
        assert inspect.signature(f).parameters[arg].default == ArchiveParams(), f.__name__
    assert "archive_too_large" in REASONS and "symlink_outside_input" in REASONS


def test_one_member_over_the_cap_is_rejected(tmp_path):
    data = tgz([GOOD, *((f"f{i:03}", b"") for i in range(100))])  # 101 members
    small = ArchiveParams(max_members=100)
    with pytest.raises(Reject) as r:
        read_archive(data, small)
    assert r.value.reason == "archive_too_large" and "100 members" in r.value.detail
    assert len(read_archive(data, ArchiveParams(max_members=101))) == 101
    result = ingest_tasks(
        table(tmp_path / "t.parquet", [("s/t", data)]), source="s", out_dir=tmp_path / "lake", archive=small
    )
    assert result.by_reason == {"archive_too_large": 1}


def test_the_member_cap_stops_reading_at_the_cap(tmp_path):
    """Members past the cap are never read: a gzip stream cut off after member 399 goes unseen."""
    raw = gzip.decompress(tgz([GOOD, *((f"f{i:03}", b"") for i in range(500))]))
    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # a gzip stream, flushed and then cut off: no end
    cut = z.compress(raw[: 512 * 400]) + z.flush(zlib.Z_FULL_FLUSH)
    with pytest.raises(Reject) as r:
        read_archive(cut, ArchiveParams(max_members=100))
    assert r.value.reason == "archive_too_large"
    with pytest.raises(Reject) as r:
        read_archive(cut, ArchiveParams(max_members=1000))
    assert r.value.reason == "unreadable_archive"


def test_files_over_the_byte_cap_are_rejected(tmp_path):
    data = tgz([GOOD, ("big", b"x" * 2000)])
    with pytest.raises(Reject) as r:
        read_archive(data, ArchiveParams(max_total_bytes=1000))
    assert r.value.reason == "archive_too_large" and "1000 bytes" in r.value.detail


def test_a_huge_pax_header_is_not_read_past_the_byte_cap():
    """A PAX header's value is not file data, yet it is decompressed into memory: the cap covers it."""
    data = tgz([GOOD, ("x", b"")], pax={"x": {"comment": "c" * (4 << 20)}})
    with pytest.raises(Reject) as r:
        read_archive(data, ArchiveParams(max_total_bytes=1 << 20))
    assert r.value.reason == "archive_too_large"


def test_a_task_dir_over_the_caps_is_rejected(tmp_path):
    d = tmp_path / "tasks" / "many"
    d.mkdir(parents=True)
    (d / "instruction.md").write_bytes(b"Do it.\n")
    for i in range(100):
        (d / f"f{i:03}").write_bytes(b"")
    with pytest.raises(Reject) as r:
        walk_task_dir(d, ArchiveParams(max_members=100))
    assert r.value.reason == "archive_too_large"
    (d / "f000").write_bytes(b"x" * 2000)
    with pytest.raises(Reject) as r:
        walk_task_dir(d, ArchiveParams(max_total_bytes=1000))
    assert r.value.reason == "archive_too_large"
    result = ingest_tasks(
        tmp_path / "tasks",
        source="s",
        out_dir=tmp_path / "lake",
        executor=Executor("processes", 1),
        archive=ArchiveParams(max_members=100),
    )
    assert result.by_reason == {"archive_too_large": 1}


def test_extract_applies_the_caps(tmp_path):
    data = tgz([GOOD, *((f"f{i:03}", b"") for i in range(100))])
    with pytest.raises(BadInput, match="100 members"):
        extract_archive(data, tmp_path / "out", limits=ArchiveParams(max_members=100))
    assert not (tmp_path / "out").exists()
    proc = tracelake(
        "tasks",
        "extract",
        str(table(tmp_path / "t.parquet", [("s/t", data)])),
        "--out",
        str(tmp_path / "out"),
        "--max-members",
        "100",
    )
    assert "100 members" in one_line_error(proc)
    assert not (tmp_path / "out").exists()


# --- extraction never writes through a symlink out of the output root -------------------------


def test_extract_refuses_a_symlink_in_the_output_dir_leading_out(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "swe").symlink_to(elsewhere)
    t = table(tmp_path / "t.parquet", [("swe/t1", tgz([GOOD, ("tests/test.sh", b"exit 0\n")]))])
    with pytest.raises(BadInput, match="outside"):
        extract_table(t, out)
    assert os.listdir(elsewhere) == []
    proc = tracelake("tasks", "extract", str(t), "--out", str(out))
    assert "outside" in one_line_error(proc)
    assert os.listdir(elsewhere) == [] and os.listdir(out) == ["swe"]


def test_extract_through_a_symlinked_out_dir_itself_is_allowed(tmp_path):
    """--out may itself be a link: the output root is where it leads."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "out").symlink_to(real)
    t = table(tmp_path / "t.parquet", [("swe/t1", tgz([GOOD]))])
    extract_table(t, tmp_path / "out")
    assert files_under(real) == {"swe/t1/instruction.md": b"Do it.\n"}


# --- ingest never follows a symlink out of its input ------------------------------------------


@pytest.fixture
def secret(tmp_path) -> Path:
    """A task directory and a file outside the input root, holding SECRET."""
    task = tmp_path / "outside" / "evil"
    task.mkdir(parents=True)
    (task / "instruction.md").write_bytes(b"Leak it.\n")
    (task / "key").write_bytes(SECRET)
    (tmp_path / "outside" / "secret.txt").write_bytes(SECRET)
    return tmp_path / "outside"


def assert_no_secret(*places: Path | str) -> None:
    for place in places:
        if isinstance(place, str):
            assert SECRET.decode() not in place
            continue
        for p in [place] if place.is_file() else place.rglob("*"):
            if p.is_file():
                data = p.read_bytes()
                assert SECRET not in data, p
                if p.suffix == ".parquet":  # task_binary is gzip: look inside too
                    for batch in pq.ParquetFile(p).iter_batches():
                        for col in batch.columns:
                            if pa.types.is_binary(col.type):
                                for v in col.to_pylist():
                                    assert v is None or SECRET not in gzip.decompress(v), p


def test_a_file_linking_outside_a_task_dir_is_rejected_and_never_read(tmp_path, secret):
    task = tmp_path / "tasks" / "t1"
    (task / "tests").mkdir(parents=True)
    (task / "instruction.md").write_bytes(b"Do it.\n")
    (task / "tests" / "data").symlink_to(secret / "secret.txt")
    (tmp_path / "tasks" / "t2").mkdir()
    (tmp_path / "tasks" / "t2" / "instruction.md").write_bytes(b"Fine.\n")
    result = ingest_tasks(tmp_path / "tasks", source="s", out_dir=tmp_path / "lake", executor=Executor("processes", 1))
    [rej] = rejects(tmp_path / "lake")
    assert result.rows == 1 and (rej["reason"], rej["path"]) == ("symlink_outside_input", "t1")
    assert "tests/data" in rej["detail"]
    assert_no_secret(tmp_path / "lake")


def test_a_task_dir_that_is_a_symlink_out_of_the_input_is_rejected(tmp_path, secret):
    (tmp_path / "tasks" / "good").mkdir(parents=True)
    (tmp_path / "tasks" / "good" / "instruction.md").write_bytes(b"Fine.\n")
    (tmp_path / "tasks" / "evil").symlink_to(secret / "evil")
    metrics = tmp_path / "metrics.json"
    result = ingest_tasks(
        tmp_path / "tasks",
        source="s",
        out_dir=tmp_path / "lake",
        executor=Executor("processes", 1),
        metrics_path=metrics,
    )
    assert result.rows == 1 and result.by_reason == {"symlink_outside_input": 1}
    [rej] = rejects(tmp_path / "lake")
    assert rej["path"] == "evil"
    assert_no_secret(tmp_path / "lake", metrics)
    proc = tracelake("ingest", "tasks", str(tmp_path / "tasks"), "--source", "s", "--out", str(tmp_path / "lake2"))
    assert proc.returncode == 0, proc.stderr
    assert "symlink_outside_input 1" in proc.stdout
    assert_no_secret(tmp_path / "lake2", proc.stdout, proc.stderr)


@pytest.mark.parametrize("target, reason", [(".", "unsafe_archive"), ("..", "symlink_outside_input")])
def test_a_directory_loop_is_never_walked(tmp_path, target, reason):
    task = tmp_path / "tasks" / "t1"
    task.mkdir(parents=True)
    (task / "instruction.md").write_bytes(b"Do it.\n")
    (task / "loop").symlink_to(target)
    start = time.monotonic()
    result = ingest_tasks(tmp_path / "tasks", source="s", out_dir=tmp_path / "lake", executor=Executor("processes", 1))
    assert time.monotonic() - start < 30
    assert result.by_reason == {reason: 1}
    assert "loop" in rejects(tmp_path / "lake")[0]["detail"]


def test_mutated_archives_end_as_rows_or_rejects():
    """Random byte damage to a valid tar: read_archive returns entries or raises Reject, nothing else."""
    import random

    raw = gzip.decompress(
        tgz(
            [GOOD, ("tests/test.sh", b"exit 0\n" * 10), ("d/" + "x" * 150, b"long"), ("e", b"")],
            pax={"e": {"comment": "hi"}},
        )
    )
    rng = random.Random(0)
    for _ in range(300):
        b = bytearray(raw)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        try:
            read_archive(
                gzip.compress(bytes(b[: rng.randrange(len(b))] if rng.random() < 0.2 else b)),
                ArchiveParams(max_members=50, max_total_bytes=10_000),
            )
        except Reject:
            pass


def test_extract_leaves_the_users_other_files_alone(tmp_path):
    """OUT is the user's directory: extraction removes nothing there, not even a name that looks like
    a leftover of a dead tracelake process."""
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    lookalike = out / f".notes.tmp-{proc.pid}"
    lookalike.write_text("the user's")
    extract_archive(tgz([("instruction.md", b"say hi\n")]), out / "t1")
    assert lookalike.read_text() == "the user's" and (out / "t1" / "instruction.md").is_file()


def test_names_that_are_not_utf8_are_rejected_with_escaped_paths(tmp_path):
    """A task directory, or a file in one, named with bytes that are not UTF-8: one reject each,
    the path shown as \\xNN; the other tasks are ingested."""
    tasks = os.fsencode(tmp_path / "tasks")
    for name in (b"good", b"bad-\xff", b"inner"):
        os.makedirs(tasks + b"/" + name)
        with open(tasks + b"/" + name + b"/instruction.md", "w") as f:
            f.write("say hi\n")
    with open(tasks + b"/inner/notes-\xfe.txt", "w") as f:
        f.write("x")
    result = ingest_tasks(
        tmp_path / "tasks", source="s", out_dir=tmp_path / "lake" / "tasks" / "s", executor=Executor("processes", 1)
    )
    rejects = read_table(tmp_path / "lake" / "tasks" / "s", "rejects").to_pylist()
    assert (result.inputs, result.rows) == (3, 1)
    assert sorted((r["path"], r["reason"]) for r in rejects) == [
        ("bad-\\xff", "invalid_path"),
        ("inner", "invalid_path"),
    ]
    assert "notes-\\xfe.txt" in next(r["detail"] for r in rejects if r["path"] == "inner")


# --- whatever ingest keeps extracts: path conflicts and names no file system takes ----------------


def dir_member(name: str) -> tuple[str, None]:
    return (name, None)


def tgz_typed(members: list[tuple[str, bytes | None]]) -> bytes:
    """A gzipped PAX tar of files (name, data) and directories (name, None), in the order given."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


UNEXTRACTABLE = {
    "file then a file below it": [GOOD, ("tests", b"x"), ("tests/test.sh", b"exit 0\n")],
    "a file below, then the file": [GOOD, ("tests/test.sh", b"exit 0\n"), ("tests", b"x")],
    "a file below a file, deeper": [GOOD, ("a/b", b"x"), ("a/b/c/d", b"y")],
    "a directory and a file of one name": [GOOD, dir_member("tests"), ("tests", b"x")],
    "a component over 255 bytes": [GOOD, ("tests/" + "a" * 5000, b"x")],
    "a component of 256 bytes": [GOOD, ("tests/" + "é" * 128, b"x")],
    "a path over 1024 bytes": [GOOD, ("/".join(["d" * 200] * 6), b"x")],
    "the same file twice through '.'": [GOOD, ("tests/x", b"1"), ("tests/./x", b"2")],
}


@pytest.mark.parametrize("case", UNEXTRACTABLE)
def test_an_archive_that_cannot_extract_is_rejected_at_ingest(tmp_path, case):
    """Cases 19 and 20: such archives were kept with 0 rejects, then `tasks extract` failed with
    "File exists" or "File name too long". Ingest now refuses exactly what extraction cannot write."""
    data = tgz_typed(UNEXTRACTABLE[case])
    t = table(tmp_path / "t.parquet", [("s/t", data)])
    result = ingest_tasks(t, source="s", out_dir=tmp_path / "lake")
    [rej] = rejects(tmp_path / "lake")
    assert (result.rows, rej["reason"]) == (0, "unsafe_archive"), rej
    proc = tracelake("tasks", "extract", str(t), "--out", str(tmp_path / "out"))
    error = one_line_error(proc)
    assert "File exists" not in error and "File name too long" not in error, error
    assert not (tmp_path / "out").exists()


def test_names_at_the_limits_are_kept_and_extract(tmp_path):
    """A 255-byte component, a 1024-byte path, directories named before or after their files."""
    members = [
        GOOD,
        ("tests/" + "é" * 127 + "a", b"255 bytes"),
        ("/".join(["d" * 203] * 5), b"1019 bytes"),
        ("env/x", b"1"),
        dir_member("env"),
        dir_member("later"),
        ("later/y", b"2"),
    ]
    t = table(tmp_path / "t.parquet", [("s/t", tgz_typed(members))])
    result = ingest_tasks(t, source="s", out_dir=tmp_path / "lake")
    assert (result.rows, result.rejects) == (1, 0)
    extract_table(t, tmp_path / "out")
    assert files_under(tmp_path / "out" / "s" / "t") == {name: data for name, data in members if data is not None}


# --- a gzip bomb under the byte cap is streamed, never held whole ---------------------------------

BOMB_MB = 600  # uncompressed; the old reader held it three times over (3.4 GB for 1.1 GiB)


@pytest.fixture(scope="module")
def bomb_table(tmp_path_factory) -> Path:
    """A task table of one task whose archive inflates to BOMB_MB of zeros (a ~600 KB task_binary)."""

    class Zeros(io.RawIOBase):
        def __init__(self, n: int):
            self.left = n

        def readable(self) -> bool:
            return True

        def readinto(self, b) -> int:
            k = min(len(b), self.left)
            b[:k] = bytes(k)
            self.left -= k
            return k

    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=6, mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name, size in (("instruction.md", 7), ("environment/blob", BOMB_MB << 20)):
                info = tarfile.TarInfo(name)
                info.size = size
                tar.addfile(info, io.BufferedReader(Zeros(size)) if size > 7 else io.BytesIO(b"Do it.\n"))
    return table(tmp_path_factory.mktemp("bomb") / "t.parquet", [("s/bomb", buf.getvalue())])


def capped_tracelake(*args: str):
    from ..helpers import run_capped

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return run_capped([sys.executable, "-m", "tracelake", *args], ROOT, timeout=120, env=env)


def test_a_gzip_bomb_is_ingested_in_bounded_memory(bomb_table, tmp_path):
    proc, peak = capped_tracelake("ingest", "tasks", str(bomb_table), "--source", "s", "--out", str(tmp_path / "lake"))
    assert proc.returncode == 0 and "1 rows, 0 rejects" in proc.stdout, proc.stdout + proc.stderr
    assert peak < BOMB_MB / 2, f"peak RSS {peak:.0f} MB for {BOMB_MB} MB uncompressed"


def test_a_gzip_bomb_is_extracted_in_bounded_memory(bomb_table, tmp_path):
    proc, peak = capped_tracelake("tasks", "extract", str(bomb_table), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "s" / "bomb" / "environment" / "blob").stat().st_size == BOMB_MB << 20
    assert peak < BOMB_MB / 2, f"peak RSS {peak:.0f} MB for {BOMB_MB} MB uncompressed"
