"""The version of a set of input files, in one small file: every file's path, size and sha256.

    manifest = Scan(state=Path(".tracelake/cache/ingest/scan/swesmith.json")).manifest(["data/jobs"])

DVC walks every file of a directory it depends on at each `dvc status` and `dvc repro` (45,045 files
of 20,000 Harbor trials: 9 s with nothing changed). A stage that depends on a manifest instead
lets DVC hash one file; the manifest is written by a stage DVC runs every time (`scan`), which lists
the files itself and recalls each file's sha256 by its stat (path, device, inode, size, mtime and
ctime in ns; a write changes the ctime, which no tool can set back) from its `state` file, so only
new and changed files are read. The manifest holds no stat, only contents: a fresh clone with the
same input bytes writes the same manifest bytes, which are the inputs' version in dvc.lock.

What is listed under each input (a file named directly is the one entry "."):
- a regular file: `<size> <sha256>`;
- anything else, by what it is, never followed nor opened: `link -> <target>` (what a link inside
  the input points at is listed where it lies; ingest reads nothing outside its input), `not a
  regular file` (a FIFO, a socket, a device), `unreadable: <reason>` (a directory that cannot be
  listed, a file that cannot be read), `missing` (the input itself), `walked once: <first path>` (a
  directory reached twice without a link, a bind mount).
Names that are not UTF-8 are written with each such byte as \\xNN. A directory's entries are in
name order, depth first; the JSON is sorted, so the bytes depend on the contents only.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson

from tracelake.core.outputs import write_bytes

_BLOCK = 1 << 20
_HASH_THREADS = min(8, os.cpu_count() or 1)  # hashlib releases the GIL on large updates


def text(path: str) -> str:
    """A path as text: bytes that are not UTF-8 (held as surrogate escapes) written as \\xNN."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _stat_key(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _hash(path: str) -> tuple[str | None, list[int] | None, bool, str | None]:
    """(sha256, its stat after the read, whether the stat held during the read, None) of a regular
    file, read without following a link and without waiting on a FIFO; (None, None, False, why) when
    it cannot be read. A file that changed while it was read gets the hash of what was read, and
    that hash is never remembered."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        return None, None, False, f"unreadable: {e.strerror or e}"
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            return None, None, False, "not a regular file"
        h = hashlib.sha256()
        with open(fd, "rb", closefd=False) as f:
            while block := f.read(_BLOCK):
                h.update(block)
        after = os.fstat(fd)
    except OSError as e:
        return None, None, False, f"unreadable: {e.strerror or e}"
    finally:
        os.close(fd)
    return h.hexdigest(), _stat_key(after), _stat_key(before) == _stat_key(after), None


def _list(directory: str, rel: str, entries: dict, files: list) -> list[tuple[str, str]]:
    """One directory's entries: regular files appended to `files` (with their lstat), links and
    anything else named in `entries`; its subdirectories returned as (path, name), in name order. An
    entry's type comes from the listing (no system call): only regular files are stat'ed."""
    prefix = "" if rel == "." else rel + "/"
    with os.scandir(directory) as it:
        listing = list(it)
    subdirs = []
    for e in listing:
        name = prefix + (e.name if e.name.isascii() else text(e.name))
        try:
            if e.is_dir(follow_symlinks=False):
                subdirs.append((e.name, e.path, name))
            elif e.is_file(follow_symlinks=False):
                files.append((name, e.path, e.stat(follow_symlinks=False)))
            elif e.is_symlink():
                entries[name] = f"link -> {text(os.readlink(e.path))}"
            else:
                entries[name] = "not a regular file"
        except OSError as err:
            entries[name] = f"unreadable: {err.strerror or err}"
    subdirs.sort()
    return [(path, name) for _, path, name in subdirs]


def _walk(top: str) -> tuple[dict, list]:
    """Every entry under a directory, depth first in name order: (entries, files). Each directory is
    stat'ed once, so one reached again without a link (a bind mount) is named, not walked twice.
    (Walking subtrees in threads was slower: the per-entry Python holds the interpreter.)"""
    entries: dict[str, str] = {}
    files: list = []
    visited: dict[tuple[int, int], str] = {}
    stack = [(top, ".")]
    while stack:
        directory, rel = stack.pop()
        try:
            st = os.stat(directory)
            if (st.st_dev, st.st_ino) in visited:
                entries[rel] = f"walked once: {visited[(st.st_dev, st.st_ino)]}"
                continue
            visited[(st.st_dev, st.st_ino)] = rel
            stack.extend(reversed(_list(directory, rel, entries, files)))
        except OSError as e:
            entries[rel] = f"unreadable: {e.strerror or e}"
    return entries, files


class Scan:
    """Manifests of input files, recalling file hashes from `state` (None: every file is hashed)."""

    def __init__(self, state: Path | None = None):
        self.state = Path(state) if state else None
        self._known: dict[str, list] = {}
        self._seen: dict[str, list] = {}
        if self.state is not None:
            try:
                known = orjson.loads(self.state.read_bytes())
                self._known = known if isinstance(known, dict) else {}
            except (OSError, orjson.JSONDecodeError):
                self._known = {}  # no state yet, or a damaged one: every file is hashed once
        self.files = self.hashed = self.hashed_bytes = 0

    def manifest(self, inputs: Iterable[str]) -> bytes:
        """The manifest of `inputs` (paths as the caller names them; each listed once), as bytes."""
        listed = {path: self._input(path) for path in dict.fromkeys(inputs)}
        return orjson.dumps(listed, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n"

    def save(self) -> None:
        """Remember the hashes of the files seen (and only those: a deleted file is forgotten)."""
        if self.state is None or self._seen == self._known:
            return
        self.state.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(self.state, orjson.dumps(self._seen))
        self._known = dict(self._seen)

    def _input(self, path: str) -> dict[str, str]:
        entries: dict[str, str] = {}
        files: list[tuple[str, str, os.stat_result]] = []  # (name in the manifest, path, lstat)
        try:
            st = os.stat(path)  # the input itself may be a link: it is resolved, as ingest does
        except FileNotFoundError:
            return {".": "missing"}
        except OSError as e:
            return {".": f"unreadable: {e.strerror or e}"}
        real = os.path.realpath(path)
        if stat.S_ISDIR(st.st_mode):
            found, files = _walk(real)
            entries.update(found)
        elif stat.S_ISREG(st.st_mode):
            files.append((".", real, st))
        else:
            entries["."] = "not a regular file"
        self._hash_files(files, entries)
        return entries

    def _hash_files(self, files: list[tuple[str, str, os.stat_result]], entries: dict) -> None:
        todo = []
        for name, path, st in files:
            key = _stat_key(st)
            known = self._known.get(path)
            if isinstance(known, list) and len(known) == 6 and known[:5] == key and isinstance(known[5], str):
                entries[name] = f"{st.st_size} {known[5]}"
                self._seen[path] = known
            else:
                todo.append((name, path))
        self.files += len(files)
        if not todo:
            return
        from tracelake.core.ui import progress  # only when there is reading to show

        threads = _HASH_THREADS if len(todo) > 1 else 1
        with ThreadPoolExecutor(threads) as pool, progress("scan: hashing new and changed files") as (total, advance):
            total(len(todo))
            for (name, path), (sha, after, held, why) in zip(todo, pool.map(_hash, (p for _, p in todo))):
                advance(1)
                if sha is None:
                    entries[name] = why
                    continue
                entries[name] = f"{after[2]} {sha}"
                self.hashed += 1
                self.hashed_bytes += after[2]
                if held:
                    self._seen[path] = [*after, sha]
