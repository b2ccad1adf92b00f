"""Task directories and (path, task_binary) tables -> tasks: real tasks, deterministic archives, rejects."""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import shutil
import tarfile
import tomllib
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tracelake.core.errors import BadInput, RejectedInput
from tracelake.core.executor import Executor
from tracelake.core.ids import task_id_for
from tracelake.core.tables import read_table
from tracelake.ingest.tasks import ingest_tasks

from ..helpers import FIXTURES, need

HARBOR_TASKS = FIXTURES / "harbor" / "harbor_tasks"
HELLO = FIXTURES / "harbor" / "examples" / "tasks" / "hello-world"
SOURCE = "demo"


def ingest(tmp_path: Path, path: Path, out: str = "out", **kw):
    result = ingest_tasks(path, source=SOURCE, out_dir=tmp_path / out, **kw)
    rows = read_table(tmp_path / out, "tasks").to_pylist()
    rejects = read_table(tmp_path / out, "rejects").to_pylist()
    assert result.inputs == result.rows + result.rejects == len(rows) + len(rejects)
    return result, rows, rejects


def writable_copy(src: Path, dst: Path) -> Path:
    """Copy a (read-only) fixture tree and make it writable so tests can edit and delete it."""
    shutil.copytree(src, dst)
    for d, _, files in os.walk(dst):
        os.chmod(d, 0o755)
        for f in files:
            os.chmod(Path(d) / f, 0o644)
    return dst


def make_task(d: Path, instruction: str | None = "Do it.\n", toml: str | None = 'version = "1.0"\n') -> Path:
    d.mkdir(parents=True)
    if instruction is not None:
        (d / "instruction.md").write_text(instruction)
    if toml is not None:
        (d / "task.toml").write_text(toml)
    return d


def targz(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def member(name: str, data: bytes | None = b"x", **attrs) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    for k, v in attrs.items():
        setattr(info, k, v)
    return info, data


def jsonl_table(path: Path, rows: list[dict]) -> Path:
    path.write_bytes(
        b"".join(orjson.dumps({**r, "task_binary": base64.b64encode(r["task_binary"]).decode()}) + b"\n" for r in rows)
    )
    return path


# --- real task directories -------------------------------------------------------------------


@pytest.mark.parametrize("path, names", [(HARBOR_TASKS, ["csv-filter", "word-count"]), (HELLO, ["hello-world"])])
def test_real_task_dirs(tmp_path, path, names):
    _, rows, rejects = ingest(tmp_path, need(path))
    assert rejects == [] and [r["name"] for r in rows] == names
    for r in rows:
        task_dir = path / r["name"] if path == HARBOR_TASKS else path
        assert r["task_id"] == task_id_for(SOURCE, r["name"])
        assert r["instruction"] == (task_dir / "instruction.md").read_text()
        toml = tomllib.loads((task_dir / "task.toml").read_text())
        assert json.loads(r["metadata_json"])["metadata"] == toml["metadata"]
        assert r["n_files"] == sum(1 for f in task_dir.rglob("*") if f.is_file())
        assert r["provenance"] == [{"path": r["name"], "sha256": r["task_checksum"]}]
        with tarfile.open(fileobj=io.BytesIO(r["task_binary"]), mode="r:gz") as tar:
            files = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
        assert files == {f.relative_to(task_dir).as_posix(): f.read_bytes() for f in task_dir.rglob("*") if f.is_file()}


def test_task_binary_is_deterministic(tmp_path):
    need(HARBOR_TASKS)
    _, first, _ = ingest(tmp_path, HARBOR_TASKS, out="a")
    _, again, _ = ingest(tmp_path, HARBOR_TASKS, out="b")
    assert (tmp_path / "a" / "tasks.parquet").read_bytes() == (tmp_path / "b" / "tasks.parquet").read_bytes()
    copy = writable_copy(HARBOR_TASKS, tmp_path / "copy")
    for i, (d, subdirs, files) in enumerate(os.walk(copy)):
        for name in files + subdirs:
            os.utime(Path(d) / name, (1_700_000_000 + i, 1_600_000_000 + i))
    _, copied, _ = ingest(tmp_path, copy, out="c")
    for x, y, z in zip(first, again, copied):
        assert x["task_binary"] == y["task_binary"] == z["task_binary"]
        assert x["task_checksum"] == z["task_checksum"]


def test_archive_layout(tmp_path):
    copy = writable_copy(need(HELLO), tmp_path / "hello-world")
    os.chmod(copy / "solution" / "solve.sh", 0o700)
    _, [r], _ = ingest(tmp_path, copy)
    data = r["task_binary"]
    assert data[3] == 0 and data[4:8] == b"\0\0\0\0"  # gzip: no FNAME flag, mtime 0
    assert gzip.decompress(data)  # a plain gzip stream
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(m.name for m in members)
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {(0, 0, "", "", 0)}
    modes = {m.name: m.mode for m in members}
    assert modes["solution/solve.sh"] == 0o755 and modes["instruction.md"] == 0o644
    assert modes["solution"] == 0o755 and all(m.isfile() or m.isdir() for m in members)


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "json"])
def test_table_round_trip_keeps_checksum(tmp_path, fmt):
    _, dirs, _ = ingest(tmp_path, need(HARBOR_TASKS), out="dirs")
    table = [{"path": f"harbor_tasks/{r['name']}", "task_binary": r["task_binary"]} for r in dirs]
    f = tmp_path / f"tasks.{fmt}"
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(table), f)
    elif fmt == "jsonl":
        jsonl_table(f, table)
    else:
        f.write_bytes(orjson.dumps([{**r, "task_binary": base64.b64encode(r["task_binary"]).decode()} for r in table]))
    _, rows, rejects = ingest(tmp_path, f, out="table")
    assert rejects == []
    keep = ("task_id", "name", "instruction", "task_checksum", "metadata_json", "n_files", "task_binary")
    assert [{k: r[k] for k in keep} for r in rows] == [{k: r[k] for k in keep} for r in dirs]
    assert rows[0]["provenance"][0]["path"] == f.name


def test_archive_under_a_top_level_directory(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(need(HELLO), arcname="hello-world")
    f = jsonl_table(tmp_path / "t.jsonl", [{"path": "hello-world", "task_binary": buf.getvalue()}])
    _, [from_table], _ = ingest(tmp_path, f, out="t")
    _, [from_dir], _ = ingest(tmp_path, HELLO, out="d")
    assert from_table["task_checksum"] == from_dir["task_checksum"]
    assert from_table["instruction"] == from_dir["instruction"] and from_table["n_files"] == 6
    assert from_table["task_binary"] == buf.getvalue()  # a table's bytes are kept as given


def test_without_binary(tmp_path):
    make_task(tmp_path / "tasks" / "a")
    _, [r], _ = ingest(tmp_path, tmp_path / "tasks", with_binary=False)
    assert r["task_binary"] is None and r["n_files"] == 2 and r["metadata_json"] == '{"version":"1.0"}'


# --- rejects ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad, detail",
    [
        (member("../evil"), "../evil"),
        (member("/abs"), "/abs"),
        (member("link", None, type=tarfile.SYMTYPE, linkname="/etc/passwd"), "link"),
        (member("hard", None, type=tarfile.LNKTYPE, linkname="instruction.md"), "hard"),
        (member("dev", None, type=tarfile.CHRTYPE, devmajor=1, devminor=3), "dev"),
        (member("pipe", None, type=tarfile.FIFOTYPE), "pipe"),
    ],
)
def test_unsafe_archives(tmp_path, bad, detail):
    data = targz([member("instruction.md", b"Do it."), bad])
    f = jsonl_table(
        tmp_path / "t.jsonl",
        [{"path": "a", "task_binary": targz([member("instruction.md", b"ok")])}, {"path": "evil", "task_binary": data}],
    )
    _, rows, [rej] = ingest(tmp_path, f)
    assert [r["name"] for r in rows] == ["a"]
    assert (rej["reason"], rej["path"], rej["row_index"], rej["input_kind"]) == (
        "unsafe_archive",
        "t.jsonl",
        1,
        "tasks",
    )
    assert repr(detail)[1:-1] in rej["detail"]


@pytest.mark.parametrize("data", [b"garbage bytes", gzip.compress(b"not a tar", mtime=0), b""])
def test_unreadable_archives(tmp_path, data):
    f = tmp_path / "t.parquet"
    pq.write_table(pa.table({"path": ["x"], "task_binary": pa.array([data], pa.binary())}), f)
    _, _, [rej] = ingest(tmp_path, f)
    assert (rej["reason"], rej["path"], rej["row_index"]) == ("unreadable_archive", "t.parquet", 0)


def test_uncompressed_tar_is_unreadable(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("instruction.md")
        tar.addfile(info, io.BytesIO(b""))
    f = jsonl_table(tmp_path / "t.jsonl", [{"path": "x", "task_binary": buf.getvalue()}])
    _, _, [rej] = ingest(tmp_path, f)
    assert rej["reason"] == "unreadable_archive"


@pytest.mark.parametrize(
    "instruction, toml, reason",
    [
        (None, 'version = "1.0"\n', "missing_instruction"),
        ("  \n\t\n", None, "missing_instruction"),
        ("Do it.\n", "version = \n", "invalid_field"),
        ("Do it.\n", "[metadata\n", "invalid_field"),
    ],
)
def test_task_dir_rejects(tmp_path, instruction, toml, reason):
    make_task(tmp_path / "tasks" / "good")
    make_task(tmp_path / "tasks" / "bad", instruction, toml)
    result, rows, [rej] = ingest(tmp_path, tmp_path / "tasks")
    assert [r["name"] for r in rows] == ["good"] and result.inputs == 2
    assert (rej["reason"], rej["path"], rej["row_index"], rej["input_kind"]) == (reason, "bad", None, "tasks")


def test_invalid_utf8_instruction(tmp_path):
    d = make_task(tmp_path / "a")
    (d / "instruction.md").write_bytes(b"caf\xe9")
    _, _, [rej] = ingest(tmp_path, d)
    assert (rej["reason"], rej["path"]) == ("invalid_utf8", "a")


def test_symlink_inside_a_task_dir_is_unsafe(tmp_path):
    d = make_task(tmp_path / "a")
    (d / "tests").mkdir()
    (d / "tests" / "secret").symlink_to("/etc/hostname")
    (d / "tests" / "within").symlink_to("../instruction.md")  # listed after secret
    _, _, [rej] = ingest(tmp_path, d)
    assert rej["reason"] == "symlink_outside_input" and "tests/secret" in rej["detail"]
    (d / "tests" / "secret").unlink()
    _, _, [rej] = ingest(tmp_path, d, out="out2")
    assert rej["reason"] == "unsafe_archive" and "tests/within" in rej["detail"]


def test_a_task_dir_named_through_a_link_is_followed(tmp_path):
    """The one task directory the user names may be a link (it keeps the name given); links under
    it are never followed."""
    make_task(tmp_path / "real" / "a")
    (tmp_path / "link").symlink_to(tmp_path / "real" / "a")
    _, [row], _ = ingest(tmp_path, tmp_path / "link")
    assert row["name"] == "link"
    (tmp_path / "real" / "a" / "up").symlink_to("..")
    _, _, [rej] = ingest(tmp_path, tmp_path / "link", out="out2")
    assert rej["reason"] == "symlink_outside_input" and "up" in rej["detail"]


def test_duplicate_tasks(tmp_path):
    make_task(tmp_path / "tasks" / "a")
    make_task(tmp_path / "tasks" / "a_copy0001")
    _, [r], [rej] = ingest(tmp_path, tmp_path / "tasks", out="dirs")
    assert r["name"] == "a"
    assert (rej["reason"], rej["path"]) == ("duplicate_task", "a_copy0001") and "from a" in rej["detail"]
    binary = targz([member("instruction.md", b"x")])
    f = jsonl_table(
        tmp_path / "t.jsonl", [{"path": "x/a", "task_binary": binary}, {"path": "y/a", "task_binary": binary}]
    )
    _, _, [rej] = ingest(tmp_path, f, out="table")
    assert (rej["reason"], rej["row_index"]) == ("duplicate_task", 1) and "t.jsonl row 0" in rej["detail"]


@pytest.mark.parametrize(
    "row, reason",
    [
        ({"task_binary": "AAAA"}, "missing_required_field"),
        ({"path": "a"}, "missing_required_field"),
        ({"path": "a", "task_binary": "not base64!"}, "invalid_field"),
        ({"path": "..", "task_binary": "AAAA"}, "invalid_field"),
        ({"path": 3, "task_binary": "AAAA"}, "invalid_field"),
    ],
)
def test_table_field_checks(tmp_path, row, reason):
    f = tmp_path / "t.jsonl"
    f.write_bytes(orjson.dumps(row) + b"\n")
    _, _, [rej] = ingest(tmp_path, f)
    assert (rej["reason"], rej["row_index"]) == (reason, 0)


# --- whole-command errors, --strict ----------------------------------------------------------


def test_bad_paths_are_errors(tmp_path):
    with pytest.raises(BadInput, match="does not exist"):
        ingest_tasks(tmp_path / "nope", source=SOURCE, out_dir=tmp_path / "o")
    (tmp_path / "t.csv").write_text("path,task_binary\n")
    with pytest.raises(BadInput, match="task table"):
        ingest_tasks(tmp_path / "t.csv", source=SOURCE, out_dir=tmp_path / "o")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadInput, match="neither a task directory"):
        ingest_tasks(tmp_path / "empty", source=SOURCE, out_dir=tmp_path / "o")


def test_strict_raises_naming_the_task(tmp_path):
    make_task(tmp_path / "tasks" / "a")
    make_task(tmp_path / "tasks" / "b", instruction=None)
    with pytest.raises(RejectedInput, match="b: missing_instruction"):
        ingest_tasks(tmp_path / "tasks", source=SOURCE, out_dir=tmp_path / "o", strict=True)
    assert not (tmp_path / "o").exists()


def test_progress(tmp_path):
    for name in ("a", "b", ".hidden"):
        make_task(tmp_path / "tasks" / name)
    events: list = []
    result = ingest_tasks(
        tmp_path / "tasks",
        source=SOURCE,
        out_dir=tmp_path / "o",
        on_start=lambda n: events.append(("start", n)),
        on_progress=lambda n: events.append(("step", n)),
    )
    assert events[0] == ("start", 2) and sum(n for kind, n in events[1:] if kind == "step") == 2
    assert result.rows == 2


def test_same_bytes_whatever_the_worker_count(tmp_path):
    """Task directories are read in worker processes, DIR_BATCH at a time: any worker count and
    batch size gives the same table, rejects and manifest."""
    import tracelake.ingest.tasks as tasks_mod

    from ..helpers import tree_bytes

    for i in range(40):
        make_task(
            tmp_path / "tasks" / f"t{i:02d}",
            instruction=None if i % 7 == 3 else f"Do {i}.\n",
            toml='version = "1.0"\n' if i % 5 else "not = [valid",
        )
        (tmp_path / "tasks" / f"t{i:02d}" / "tests").mkdir()
        (tmp_path / "tasks" / f"t{i:02d}" / "tests" / "test.sh").write_text(f"exit {i % 2}\n")
    outs = []
    for workers, batch in ((1, 16), (2, 16), (2, 3), (3, 1)):
        tasks_mod.DIR_BATCH = batch
        try:
            _, rows, rejects = ingest(
                tmp_path, tmp_path / "tasks", out=f"o-{workers}-{batch}", executor=Executor("processes", workers)
            )
        finally:
            tasks_mod.DIR_BATCH = 16
        assert len(rows) + len(rejects) == 40 and rejects
        outs.append(tree_bytes(tmp_path / f"o-{workers}-{batch}"))
    assert all(o == outs[0] for o in outs[1:])
