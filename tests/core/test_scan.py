"""core/scan.py: a manifest is the contents of its inputs (path, size, sha256), recalled by stat but
never fooled by it, and it never follows a link or opens anything but a regular file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson

from tracelake.core.scan import Scan


def _tree(root: Path) -> Path:
    (root / "job" / "trial-1" / "agent").mkdir(parents=True)
    (root / "job" / "trial-1" / "agent" / "trajectory.json").write_text('{"steps": []}')
    (root / "job" / "trial-1" / "result.json").write_text('{"reward": 1}')
    (root / "job" / "result.json").write_text('{"stats": {}}')
    return root


def _entries(manifest: bytes, key: str) -> dict[str, str]:
    return orjson.loads(manifest)[key]


def test_manifest_is_contents_only(tmp_path):
    """Two copies of a tree with other mtimes and inodes give the same bytes; each file is its size
    and sha256, under its path within the input."""
    a = _tree(tmp_path / "a")
    b = tmp_path / "b"
    shutil.copytree(a, b)  # new inodes
    os.utime(b / "job" / "result.json", ns=(1, 1))
    first = Scan().manifest([str(a)])
    assert (
        Scan().manifest([str(b)])
        == orjson.dumps({str(b): _entries(first, str(a))}, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"
    )
    entries = _entries(first, str(a))
    assert entries["job/trial-1/result.json"] == ("13 " + __import__("hashlib").sha256(b'{"reward": 1}').hexdigest())
    assert sorted(entries) == ["job/result.json", "job/trial-1/agent/trajectory.json", "job/trial-1/result.json"]


def test_hashes_are_recalled_and_a_write_is_always_seen(tmp_path):
    """An unchanged file is not read again; a file rewritten with the same size and its mtime set
    back is read again (its ctime moved) and the manifest shows the new bytes."""
    root, state = _tree(tmp_path / "in"), tmp_path / "state.json"
    scan = Scan(state)
    first = scan.manifest([str(root)])
    scan.save()
    assert scan.hashed == 3
    again = Scan(state)
    assert again.manifest([str(root)]) == first and again.hashed == 0 and again.files == 3
    target = root / "job" / "trial-1" / "result.json"
    st = target.stat()
    target.write_text('{"reward": 0}')  # same size
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime set back
    edited = Scan(state)
    after = edited.manifest([str(root)])
    assert edited.hashed == 1 and after != first
    assert _entries(after, str(root))["job/trial-1/result.json"].endswith(
        __import__("hashlib").sha256(b'{"reward": 0}').hexdigest()
    )


def test_a_damaged_state_costs_time_only(tmp_path):
    root, state = _tree(tmp_path / "in"), tmp_path / "state.json"
    expected = Scan().manifest([str(root)])
    first = Path(os.path.realpath(root / "job" / "result.json"))
    st = first.stat()
    stat_key = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    no_hash = orjson.dumps({str(first): stat_key})  # its stat, but no hash
    for damage in (b"{not json", b"[1, 2]", b"", no_hash, orjson.dumps({str(first): [*stat_key, 7]})):
        state.write_bytes(damage)
        scan = Scan(state)
        assert scan.manifest([str(root)]) == expected and scan.hashed == 3


def test_links_and_special_files_are_named_never_followed(tmp_path):
    """A link (to a file outside, to a directory, to itself) is its target's text; a FIFO is not
    opened (a read would block); a missing input says so; a file named directly is the entry "."."""
    outside = tmp_path / "secret.txt"
    outside.write_text("not an input")
    root = _tree(tmp_path / "in")
    os.symlink(outside, root / "job" / "leak.json")
    os.symlink(".", root / "loop")
    os.symlink(root / "job", root / "job-link")
    os.mkfifo(root / "job" / "pipe.json")
    scan = Scan()
    entries = _entries(scan.manifest([str(root)]), str(root))
    assert entries["job/leak.json"] == f"link -> {outside}"
    assert entries["loop"] == "link -> ."
    assert entries["job-link"] == f"link -> {root / 'job'}"
    assert entries["job/pipe.json"] == "not a regular file"
    assert scan.hashed == 3  # the three regular files, nothing behind a link
    both = orjson.loads(Scan().manifest([str(root / "job" / "result.json"), str(tmp_path / "gone")]))
    assert both[str(tmp_path / "gone")] == {".": "missing"}
    assert list(both[str(root / "job" / "result.json")]) == ["."]


def test_names_that_are_not_utf8_are_escaped(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    (Path(os.fsdecode(bytes(root) + b"/bad\xff.json"))).write_text("x")
    entries = _entries(Scan().manifest([str(root)]), str(root))
    assert list(entries) == ["bad\\xff.json"]


DEPTH = 1200  # past the interpreter's recursion limit (1,000)


def test_a_deep_tree_is_walked_without_recursion(tmp_path):
    """Depth is a loop, not the interpreter's stack: 1,200 nested directories are listed. (The tree
    is removed here, from the bottom up: pytest's own cleanup recurses.)"""
    root = tmp_path / "in"
    root.mkdir()
    chain = [str(root / Path(*["d"] * depth)) for depth in range(1, DEPTH + 1)]
    try:
        for directory in chain:
            os.mkdir(directory)
        Path(chain[-1], "leaf.json").write_bytes(b"{}")
        entries = _entries(Scan().manifest([str(root)]), str(root))
        assert list(entries) == ["/".join(["d"] * DEPTH + ["leaf.json"])]
    finally:
        Path(chain[-1], "leaf.json").unlink(missing_ok=True)
        for directory in reversed(chain):
            if os.path.isdir(directory):
                os.rmdir(directory)
