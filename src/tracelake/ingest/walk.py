"""Reading an input root safely: Harbor trial discovery, table directories, and each file's bytes.

The rules (schemas/README.md, "Input roots"):

- Ingest never reads outside its input root (the JOBS directory; for trace tables, each directory
  named on the command line). A symlink is followed only while its target stays inside the root; one
  that leads out is the reject `symlink_outside_input`, and nothing behind it is read or listed.
  The root itself may be a link (it is resolved first), and a file named on the command line is read
  wherever it is: the user named it.
- Directory links are not walked: the target of one that stays inside the root is walked where it
  lies, and the link is the reject `linked_directory` (so `latest -> job-7` is ingested once and a
  loop such as `loop -> .` ends at once); the rows around it are kept. A directory reached twice
  without a link (a bind mount) is walked once, by (st_dev, st_ino). Links to files inside the
  root, and a trial's agent/ link that stays inside, are followed.
- A directory that cannot be listed is the reject `unreadable_file`; its siblings are still walked.
- A path that is not UTF-8 (a file name of arbitrary bytes) is the reject `invalid_path`; a reject
  names it with each such byte written as \\xNN, so the rejects table stays text.
- Only regular files are read (a FIFO would block ingest forever): anything else is `unsupported_file`.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from tracelake.core.scan import text as display  # a path as text: non-UTF-8 bytes as \\xNN
from tracelake.ingest.common import Reject

Problem = tuple[str, Reject]  # (path as a reject names it, why it is no input)


def is_text(path: str) -> bool:
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def join(rel: str, name: str) -> str:
    return name if rel == "." else f"{rel}/{name}"


def is_dir(path: str | Path) -> bool:
    """os.path.isdir: follows links, never raises (an unsearchable parent reads as 'no')."""
    return os.path.isdir(path)


def listing(directory: str | Path) -> list[os.DirEntry]:
    """The entries of a directory, sorted by name (raises OSError when it cannot be listed)."""
    with os.scandir(directory) as it:
        return sorted(it, key=lambda e: e.name)


class Root:
    """An input root: what lies inside it (after resolving links) may be read.

    `path` is where a walk starts; `within` (default: path itself) is what may be read, for a walk
    that starts below the root it must not leave (a benchmark directory under decontaminate.root)."""

    def __init__(self, path: str | Path, within: str | Path | None = None):
        self.path = Path(path)
        self.real = os.path.realpath(path if within is None else within)
        self._prefix = self.real.rstrip(os.sep) + os.sep
        self._base = os.fspath(self.path)
        self._dirs: dict[str, bool] = {self._base: self.contains(path)}  # directory -> inside the root

    def contains(self, path: str | Path) -> bool:
        real = os.path.realpath(path)
        return real == self.real or real.startswith(self._prefix)

    def dir_inside(self, directory: str | Path) -> bool:
        """contains() for a directory named below the root, one lstat per directory not seen yet:
        it is inside when its parent is and it is no link (or a link that stays inside)."""
        d = os.fspath(directory)
        inside = self._dirs.get(d)
        if inside is None:
            parent = os.path.dirname(d)
            if parent == d or not d.startswith(self._base.rstrip(os.sep) + os.sep):
                inside = self.contains(d)  # not named below the root: resolve it whole
            else:
                inside = self.dir_inside(parent) and (not os.path.islink(d) or self.contains(d))
            self._dirs[d] = inside
        return inside

    def read(self, path: str | Path, rel: str, missing_reason: str) -> bytes:
        """The bytes of a regular file inside the root, or the Reject that says why not (open)."""
        with self.open(path, rel, missing_reason) as f:
            try:
                return f.read()
            except OSError as e:
                raise Reject("unreadable_file", f"{display(rel)}: {e.strerror or e}") from None

    def open(self, path: str | Path, rel: str, missing_reason: str) -> BinaryIO:
        """A regular file inside the root, open for reading (for a caller that reads it in parts or
        under a cap), or the Reject that says why not.

        Its directory is checked once (dir_inside); the file itself is opened without following a link
        (O_NOFOLLOW), so only a file that is a link costs a second look. O_NONBLOCK: opening a
        FIFO does not wait for a writer; it is then refused, as a directory or a device is, from
        fstat, before a byte is read."""
        try:
            path = os.fspath(path)
            fd = None
            if self.dir_inside(os.path.dirname(path)):
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                except OSError as e:
                    if e.errno != errno.ELOOP:
                        raise
            if fd is None:  # the file is a link, or its directory leads out
                if not self.contains(path):
                    raise Reject("symlink_outside_input", f"{display(rel)} links outside the input root; not read")
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            try:
                regular = stat.S_ISREG(os.fstat(fd).st_mode)
            except OSError:
                os.close(fd)
                raise
            if not regular:  # checked on the descriptor: io.FileIO would refuse a directory itself
                os.close(fd)
                raise Reject("unsupported_file", f"{display(rel)} is not a regular file")
            return open(fd, "rb")
        except FileNotFoundError:
            raise Reject(missing_reason, f"{display(rel)} does not exist") from None
        except OSError as e:
            raise Reject("unreadable_file", f"{display(rel)}: {e.strerror or e}") from None


def walk_dirs(
    root: Root, leaf: Callable[[Path], bool], bare_leaf: Callable[[Path], bool]
) -> tuple[list[tuple[Path, str]], list[Problem]]:
    """The leaf directories under root, sorted depth first, with their paths relative to the root,
    and the problems met on the way. `leaf(d)` is asked first and a leaf is not walked further;
    `bare_leaf(d)` is asked of a directory with no leaf below it."""
    found: list[tuple[Path, str]] = []
    problems: list[Problem] = []
    visited: dict[tuple[int, int], str] = {}

    def scan(d: Path, rel: str) -> bool:
        try:
            st = os.stat(d)
        except OSError as e:
            problems.append((display(rel), Reject("unreadable_file", f"directory {display(rel)}: {e.strerror or e}")))
            return False
        key = (st.st_dev, st.st_ino)
        if key in visited:
            problems.append(
                (
                    display(rel),
                    Reject(
                        "linked_directory", f"{display(rel)} is {display(visited[key])} again (a mount?); walked once"
                    ),
                )
            )
            return False
        visited[key] = rel
        if leaf(d):
            return _leaf(d, rel)
        try:
            entries = listing(d)
        except OSError as e:
            problems.append((display(rel), Reject("unreadable_file", f"directory {display(rel)}: {e.strerror or e}")))
            return False
        any_found = False
        for e in entries:
            if e.name.startswith("."):
                continue
            child, child_rel = Path(e.path), join(rel, e.name)
            if not is_dir(child):
                continue
            if e.is_symlink():
                problems.append(
                    (
                        display(child_rel),
                        Reject(
                            "linked_directory",
                            f"{display(child_rel)} is a directory link; its target is walked where it lies",
                        )
                        if root.contains(child)
                        else Reject(
                            "symlink_outside_input", f"{display(child_rel)} links outside the input root; not walked"
                        ),
                    )
                )
                continue
            any_found |= scan(child, child_rel)
        if not any_found and bare_leaf(d):
            return _leaf(d, rel)
        return any_found

    def _leaf(d: Path, rel: str) -> bool:
        if is_text(rel):
            found.append((d, rel))
        else:
            problems.append((display(rel), Reject("invalid_path", f"{display(rel)} is not UTF-8")))
        return True

    scan(root.path, ".")
    return found, problems
