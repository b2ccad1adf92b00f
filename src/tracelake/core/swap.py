"""Temporary names beside an output, the atomic swap that puts a new version in place, and the
clean-up of what a killed run left behind.

A build of `<dir>/<name>` works beside it under hidden names that carry the builder's process id:
`.<name>.tmp-<pid>` (the new version being written), `.<name>.old-<pid>` (the previous version,
only where the swap falls back to two renames) and `.<name>.parts-<pid>-<random>` (scratch space,
`scratch_dir`). A SIGKILL leaves them behind. They are never read: readers skip hidden names
(core/lake.py) and `.dvcignore` keeps them out of every DVC hash, so `dvc.lock` is the same as
after a clean run even where DVC restores the killed stage from its run cache instead of running it.
The next build of an output removes every such name beside it whose process is gone
(`remove_stale`), and its own scratch directories named without a pid (mkdtemp's) that are older
than the building process. DVC may restore a killed stage from its run cache without running it,
so readers and every stage also sweep the whole lake (`sweep`): status, sql, the notebook, the
viewer.

While a build runs, its output may be missing: DVC removes a stage's outputs before it runs the
stage, and links them back from its cache after. `being_built` tells a reader that finds an output
missing whether a build of it is under way (a live process's temporary name beside it, or a live
DVC command holding it in `.dvc/tmp/rwlock`), so that it says "being rebuilt", not "no such table".

The swap (`replace_dir`) is one `renameat2(RENAME_EXCHANGE)` on Linux: the output is the old
version, then the new one, never missing and never both. Where the call is unavailable (another OS,
a file system without it) it falls back to two renames, which leave a moment without the output.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

KINDS = ("tmp", "old", "parts")
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_STARTED = time.time()  # about when this process started (a stage imports this module first)


def temp_path(final: Path, kind: str) -> Path:
    """`.<name>.<kind>-<pid>` beside `final`: this process's temporary name for it."""
    return Path(final).with_name(f".{Path(final).name}.{kind}-{os.getpid()}")


def scratch_dir(final: Path, kind: str = "parts") -> Path:
    """A new scratch directory `.<name>.<kind>-<pid>-<random>` beside `final` (the caller removes
    it); the pid lets the next build remove it if this process is killed."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{final.name}.{kind}-{os.getpid()}-", dir=final.parent))


_TEMP_NAME = re.compile(rf"\.(?P<name>.+)\.(?:{'|'.join(KINDS)})-(?P<pid>\d{{1,9}})(?:-[^/]*)?")


def owner_pid(sibling: str) -> tuple[str, int] | None:
    """(the output's name, the pid) when `sibling` is a temporary name (`.<name>.<kind>-<pid>...`),
    else None."""
    m = _TEMP_NAME.fullmatch(sibling)
    return (m.group("name"), int(m.group("pid"))) if m else None


def _start_time(pid: int) -> float | None:
    """When process `pid` started (seconds since the epoch), None when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(
            float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime ")
        )
    except (OSError, StopIteration, ValueError):
        return None if not _signalable(pid) else 0.0
    fields = stat.rsplit(")", 1)[1].split()  # the name, in parentheses, may hold spaces
    if fields[0] in ("Z", "X"):
        return None
    return boot + int(fields[19]) / _CLOCK_TICKS


def _signalable(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale(path: Path, pid: int) -> bool:
    """Whether `path`, made by process `pid`, is left over: that process is gone (or a zombie), or
    the pid now names a process that started after `path` was last written (a reused pid)."""
    if pid == os.getpid():
        return False
    started = _start_time(pid)
    if started is None:
        return True
    try:
        return started > path.lstat().st_mtime + 1.0
    except FileNotFoundError:
        return False


def _unowned_scratch(final: Path, sibling: Path) -> bool:
    """A scratch directory of `final` named without a pid (`.<name>.parts-<8 random>`, as mkdtemp
    names it), last written before this process started: no live build of `final` can own it
    unless two builds of one output run at once, which DVC's lock rules out."""
    if not re.fullmatch(rf"\.{re.escape(final.name)}\.parts-[a-z0-9_]{{8}}", sibling.name):
        return False
    try:
        return sibling.lstat().st_mtime < _STARTED - 1.0
    except FileNotFoundError:
        return False


def remove_stale(final: Path, siblings: bool = True) -> list[Path]:
    """Remove every temporary name beside `final` (its own `.<name>.tmp-*`, `.old-*`, `.parts-*`
    and, with `siblings`, those of the outputs beside it) whose process is gone; names of live
    processes (this one included) stay. Returns what was removed. A single file (write_json) cleans
    only its own names: it may be written into a directory that is not tracelake's."""
    final = Path(final)
    removed = []
    if not final.parent.is_dir():
        return removed
    own = f".{final.name}."  # every temporary name of `final` starts so: the others need no parsing
    for name in os.listdir(final.parent):
        if not siblings and not name.startswith(own):
            continue  # extracting thousands of tasks side by side: one string test each, not a regex
        sibling = final.parent / name
        owner = owner_pid(sibling.name)
        if owner and not siblings and owner[0] != final.name:
            continue
        stale = is_stale(sibling, owner[1]) if owner else _unowned_scratch(final, sibling)
        if not stale:
            continue
        if sibling.is_dir() and not sibling.is_symlink():
            shutil.rmtree(sibling, ignore_errors=True)
        else:
            sibling.unlink(missing_ok=True)
        removed.append(sibling)
    return removed


def sweep(root: Path, depth: int = 3) -> list[Path]:
    """Remove every temporary name under `root` (a lake) whose process is gone, `depth` directory
    levels down (outputs sit at most two below a lake: lake/exports/sft/<scale>). It never enters an
    output (a directory holding manifest.json), a hidden directory or a link, and ignores what it may
    not remove (a read-only lake). Returns what was removed."""
    removed: list[Path] = []
    todo = [(Path(root), 0)]
    while todo:
        directory, level = todo.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        if level and any(e.name == "manifest.json" for e in entries):
            continue
        for entry in entries:
            owner = owner_pid(entry.name)
            if owner and is_stale(Path(entry.path), owner[1]):
                if _remove(Path(entry.path)):
                    removed.append(Path(entry.path))
            elif level < depth and not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False):
                todo.append((Path(entry.path), level + 1))
    return removed


def _remove(path: Path) -> bool:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        return False
    except OSError:
        return False
    return True


def _renameat2():
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_RENAMEAT2 = _renameat2()


def exchange(a: Path, b: Path) -> bool:
    """Swap the names `a` and `b` in one atomic step; False (nothing done) where the system cannot,
    or where `b` does not exist."""
    if _RENAMEAT2 is None:
        return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.ENOENT):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def replace_dir(new: Path, final: Path, old: Path) -> None:
    """Put directory `new` in place of `final` (which may not exist) and remove the previous
    version: an atomic exchange where possible, else `final` -> `old`, `new` -> `final`."""
    if exchange(new, final):
        shutil.rmtree(new, ignore_errors=True)  # now the previous version
        return
    if final.exists():
        final.rename(old)
    new.rename(final)
    shutil.rmtree(old, ignore_errors=True)


# --- is a build of an output under way? ----------------------------------------------------------

DVC_RWLOCK = Path(".dvc", "tmp", "rwlock")  # DVC's record of the paths each running command reads or writes


def being_built(final: Path) -> bool:
    """Whether a live process is building `final` (an output directory, or a directory of outputs
    such as lake/trajectories): a temporary name of a live process beside it (or, for a directory
    of outputs, inside it), or a running DVC command that holds it, or something under it, in its
    rwlock (DVC holds a stage's outputs there from before it removes them until it has linked them
    back)."""
    final = Path(final)
    for directory, prefix in ((final.parent, f".{final.name}."), (final, ".")):
        try:
            names = [n for n in os.listdir(directory) if n.startswith(prefix)]
        except OSError:
            continue
        for name in names:
            owner = owner_pid(name)
            if owner and (directory != final.parent or owner[0] == final.name):
                if not is_stale(directory / name, owner[1]):
                    return True
    return _held_by_dvc(final)


def _held_by_dvc(final: Path) -> bool:
    real = os.path.realpath(final)
    for repo in Path(real).parents:
        if (repo / ".dvc").is_dir():
            break
    else:
        return False
    try:
        lock = json.loads((repo / DVC_RWLOCK).read_text())
    except (OSError, ValueError):  # no DVC command ran yet, or one is writing it now
        return False
    if not isinstance(lock, dict):
        return False
    for mode in ("write", "read"):
        held = lock.get(mode)
        for path, infos in held.items() if isinstance(held, dict) else ():
            path = os.path.realpath(path)
            if not (path == real or path.startswith(real + os.sep) or real.startswith(path + os.sep)):
                continue
            for info in infos if isinstance(infos, list) else [infos]:
                pid = info.get("pid") if isinstance(info, dict) else None
                if isinstance(pid, int) and pid > 0 and _start_time(pid) is not None:
                    return True
    return False
