"""Harbor task archives: a task directory <-> task_binary (a gzipped tar), built, read and extracted.

    entries = walk_task_dir(Path("tasks/hello-world"))   # files and directories, sorted
    binary = build_archive(entries)                      # deterministic bytes (ARCHIVE_FORMAT)
    entries = read_archive(binary)                       # in memory; unsafe members are refused
    extract_archive(binary, Path("out/hello-world"))     # safe extraction, all or nothing
    extract_table(Path("tasks.parquet"), Path("out"))    # every (path, task_binary) row -> out/<path>

build_archive writes sorted entries with mode 0644/0755, owner 0, mtime 0 and a gzip header
without name or time, so the same directory gives the same bytes on any machine.

read_archive vets each member with the standard extraction filter, tarfile.data_filter: devices,
fifos and other special files, and paths that are absolute or resolve outside the destination by
the running OS's rules, are refused. The project also refuses what that filter lets by: a
leading '/' (it strips one) and any '..' component (even one that stays inside), a NUL byte in a
name, every link (even one inside: a task is plain files and directories), duplicate members and
archives over MAX_ARCHIVE_BYTES uncompressed (zip bombs). It raises Reject, which ingest records as
a reject row; a tar that holds the task under one top-level directory is read relative to it.

The extract functions check everything in memory first, write plain files and directories
themselves (never tarfile.extract) and raise BadInput, leaving nothing behind, when an archive or
a table row is unusable.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import os
import shutil
import tarfile
import zlib
from pathlib import Path, PurePosixPath

import pyarrow as pa
import pyarrow.parquet as pq

from tracelake.core.errors import BadInput
from tracelake.core.hashing import canonical_json, sha256_bytes
from tracelake.core.lake import open_parquet, output_dir
from tracelake.ingest.common import Reject, check_text

ARCHIVE_FORMAT = "tar-pax-sorted-mode644/755-uid0-mtime0-gzip9-v1"
CHECKSUM_FORMULA = "sha256(canonical_json(sorted [posix path, sha256(bytes)] of regular files))"
MAX_ARCHIVE_BYTES = 1 << 30  # uncompressed; a larger task_binary is treated as a zip bomb
TABLE_BATCH_ROWS = 64  # task_binary values can be megabytes each
NOTHING = "nothing was extracted"
# The destination data_filter vets members against in read_archive, which has none. It need not
# exist ('/nonexistent' never should); if it did, the filter could only refuse more, never less.
_VET_ROOT = "/nonexistent/tracelake-task"


@dataclasses.dataclass(frozen=True)
class Entry:
    """A regular file or directory of a task, path relative to the task directory."""

    name: str
    is_dir: bool
    executable: bool = False
    data: bytes = b""


# --- task directories ------------------------------------------------------------------------

def walk_task_dir(task_dir: Path) -> list[Entry]:
    """Every file and directory under task_dir, sorted by path; links and devices are refused."""
    entries: list[Entry] = []

    def visit(d: Path, prefix: str) -> None:
        with os.scandir(d) as it:
            children = sorted(it, key=lambda e: e.name)
        for e in children:
            rel = prefix + e.name
            try:
                rel.encode("utf-8")
            except UnicodeEncodeError:
                raise Reject("invalid_utf8", f"a file name under {prefix or './'} is not UTF-8") from None
            if e.is_symlink():
                raise Reject("unsafe_archive", f"{rel} is a symlink (links are never followed)")
            if e.is_dir(follow_symlinks=False):
                entries.append(Entry(rel, is_dir=True))
                visit(Path(e.path), rel + "/")
            elif e.is_file(follow_symlinks=False):
                executable = bool(e.stat(follow_symlinks=False).st_mode & 0o111)
                entries.append(Entry(rel, is_dir=False, executable=executable, data=Path(e.path).read_bytes()))
            else:
                raise Reject("unsafe_archive", f"{rel} is not a regular file or directory")

    try:
        visit(task_dir, "")
    except OSError as e:
        raise Reject("unreadable_file", f"{e.filename}: {e.strerror or e}") from None
    return sorted(entries, key=lambda e: e.name)


def build_archive(entries: list[Entry]) -> bytes:
    """A deterministic gzipped tar of the entries (same entries -> same bytes)."""
    buf = io.BytesIO()
    with (gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="", compresslevel=9) as gz,
          tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar):
        for e in sorted(entries, key=lambda e: e.name):
            info = tarfile.TarInfo(e.name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if e.is_dir:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.mode, info.size = (0o755 if e.executable else 0o644), len(e.data)
                tar.addfile(info, io.BytesIO(e.data))
    return buf.getvalue()


def task_checksum(entries: list[Entry]) -> str:
    """CHECKSUM_FORMULA: the same files give the same checksum, however they were archived."""
    listing = sorted([e.name, sha256_bytes(e.data)] for e in entries if not e.is_dir)
    return sha256_bytes(canonical_json(listing))


# --- reading archives ------------------------------------------------------------------------

def read_archive(data: bytes) -> list[Entry]:
    """The entries of a gzipped tar, read in memory; unsafe members are refused, not skipped."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            members = tar.getmembers()
            names = [_safe_name(m) for m in members]
            _check_archive(members, names)
            entries = [Entry(n, is_dir=m.isdir(), executable=bool(m.mode & 0o111),
                             data=b"" if m.isdir() else tar.extractfile(m).read())
                       for m, n in zip(members, names) if n != "."]
    except (tarfile.TarError, EOFError, OSError, zlib.error) as e:
        raise Reject("unreadable_archive", f"task_binary is not a readable gzipped tar ({e})") from None
    return _strip_top_dir(sorted(entries, key=lambda e: e.name))


def _safe_name(m: tarfile.TarInfo) -> str:
    """The member's normalised name, once the project's rules and tarfile.data_filter pass it."""
    escapes = f"member {m.name!r} has an absolute path or a '..' component"
    # Project rules first (in the order messages have always been given). data_filter strips a
    # leading '/' and passes a '..' that stays inside; we refuse both, so names stay literal.
    if m.name.startswith("/") or ".." in PurePosixPath(m.name).parts:
        raise Reject("unsafe_archive", escapes)
    if "\x00" in m.name:  # a PAX path can hold one; data_filter's realpath would raise ValueError
        raise Reject("unsafe_archive", f"member {m.name!r} has a NUL byte in its name")
    # Project rule: no links at all, though data_filter passes those that stay inside the
    # destination; a task is plain files and directories, and only those are ever written.
    if m.issym() or m.islnk():
        raise Reject("unsafe_archive", f"member {m.name!r} is a link (to {m.linkname!r})")
    # The member data_filter returns (modes limited, owners dropped) is not used: Entry keeps the
    # original exec bits and extraction writes 0644/0755 itself.
    try:
        tarfile.data_filter(m, _VET_ROOT)
    except tarfile.SpecialFileError:
        raise Reject("unsafe_archive",
                     f"member {m.name!r} is a device, fifo or other special file") from None
    except tarfile.FilterError:  # AbsolutePathError, OutsideDestinationError, by the OS's rules
        raise Reject("unsafe_archive", escapes) from None
    check_text(m.name, f"member {m.name!r}")
    return PurePosixPath(m.name).as_posix()


def _check_archive(members: list[tarfile.TarInfo], names: list[str]) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise Reject("unsafe_archive", f"member {n!r} appears twice (one would overwrite the other)")
        seen.add(n)
    total = sum(m.size for m in members if m.isfile())
    if total > MAX_ARCHIVE_BYTES:
        raise Reject("unsafe_archive", f"members total {total} bytes uncompressed (limit {MAX_ARCHIVE_BYTES})")


def _strip_top_dir(entries: list[Entry]) -> list[Entry]:
    """Files under one top-level directory (task-name/instruction.md) -> relative to it."""
    files = {e.name for e in entries if not e.is_dir}
    if "instruction.md" in files or "task.toml" in files:
        return entries
    tops = {e.name.split("/", 1)[0] for e in entries}
    if len(tops) != 1:
        return entries
    prefix = tops.pop() + "/"
    if prefix + "instruction.md" not in files and prefix + "task.toml" not in files:
        return entries
    return [dataclasses.replace(e, name=e.name[len(prefix):]) for e in entries if e.name.startswith(prefix)]


# --- extracting one archive ------------------------------------------------------------------

def extract_archive(data: bytes, dest: Path, *, label: str | None = None) -> list[str]:
    """Extract a task_binary into dest (absent or an empty directory); the files written, sorted.

    The archive is read and checked in memory (read_archive), written with `lake.output_dir` (a
    temporary directory beside dest, renamed into place), so a refused archive leaves nothing behind. Files get mode
    0755 when executable in the archive, else 0644; directories 0755. label names the archive in
    error messages (default: dest).
    """
    dest = Path(os.path.abspath(dest))
    what = f"task_binary of {label or dest}"
    if not _is_free(dest):
        raise BadInput(f"{what}: {dest} already exists and is not an empty directory — {NOTHING}")
    try:
        entries = read_archive(data)
    except Reject as r:
        raise BadInput(f"{what}: {r.detail} — {NOTHING}") from None
    created = _make_parents(dest.parent, what)
    try:
        with output_dir(dest) as tmp:
            _write_entries(entries, tmp, what)
    except OSError as e:
        _remove_dirs(created)
        raise BadInput(f"{what}: cannot write {dest} ({e.strerror or e}) — {NOTHING}") from None
    except BaseException:
        _remove_dirs(created)
        raise
    return sorted(e.name for e in entries if not e.is_dir)


def _is_free(dest: Path) -> bool:
    """dest is absent, or an empty directory that is not a link."""
    if not os.path.lexists(dest):
        return True
    try:
        return not dest.is_symlink() and dest.is_dir() and not any(dest.iterdir())
    except OSError:
        return False


def _write_entries(entries: list[Entry], root: Path, what: str) -> None:
    """Write the entries under root (a new, empty directory): plain directories and files only."""
    base = root.resolve()
    for e in entries:
        target = root / e.name
        resolved = target.resolve()
        if resolved == base or not resolved.is_relative_to(base):
            raise BadInput(f"{what}: member {e.name!r} resolves outside the destination — {NOTHING}")
        try:
            if e.is_dir:
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(e.data)
                os.fchmod(f.fileno(), 0o755 if e.executable else 0o644)
        except OSError as err:
            raise BadInput(f"{what}: member {e.name!r} cannot be written ({err.strerror or err}) "
                           f"— {NOTHING}") from None
    for d, _, _ in os.walk(root):
        os.chmod(d, 0o755)


def _make_parents(path: Path, what: str) -> list[Path]:
    """Create path and its missing parents; the directories created, deepest first."""
    missing = [p for p in (path, *path.parents) if not os.path.lexists(p)]
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadInput(f"{what}: cannot create {path} ({e.strerror or e}) — {NOTHING}") from None
    return missing


def _remove_dirs(dirs: list[Path]) -> None:
    """Remove directories this module created, deepest first, where they are (still) empty."""
    for d in dirs:
        try:
            d.rmdir()
        except OSError:
            pass


# --- extracting a task table -----------------------------------------------------------------

def extract_table(table_path: Path, out: Path, *, names: list[str] | None = None) -> list[Path]:
    """Extract each (path, task_binary) row of a Parquet task table into out/<path>.

    names keeps only the rows whose path, or its last component, is one of them. Every selected
    path and target is checked before anything is written, and a refused archive undoes the rows
    already extracted, so on BadInput nothing is left behind. Returns the task directories written.
    """
    table_path, out = Path(table_path), Path(out)
    table = _open_table(table_path)
    paths = _read_paths(table, table_path)
    selected = _select(paths, names, table_path)
    targets = {i: out / rel for i, rel in selected.items()}
    for i, target in targets.items():
        if os.path.lexists(target):
            raise BadInput(f"{table_path}: {target} already exists; pass a new --out — {NOTHING}")
    written: list[Path] = []
    created: list[Path] = []
    try:
        for i, binary in _read_binaries(table, table_path, set(selected)):
            created += _make_parents(targets[i].parent, f"{table_path} row {i}")
            extract_archive(binary, targets[i], label=selected[i])
            written.append(targets[i])
    except BaseException:
        for d in written:
            shutil.rmtree(d, ignore_errors=True)
        _remove_dirs(sorted(created, key=lambda p: len(p.parts), reverse=True))
        raise
    return written


def _open_table(table_path: Path) -> pq.ParquetFile:
    table = open_parquet(table_path)
    for column in ("path", "task_binary"):
        if column not in table.schema_arrow.names:
            raise BadInput(f"{table_path} has no {column!r} column (a task table has path and task_binary)")
    return table


def _read_paths(table: pq.ParquetFile, table_path: Path) -> list[str | None]:
    try:
        return [p for b in table.iter_batches(batch_size=65536, columns=["path"])
                for p in b.column("path").to_pylist()]
    except (pa.ArrowException, OSError) as e:
        raise BadInput(f"{table_path}: the path column cannot be read ({e})") from None


def _read_binaries(table: pq.ParquetFile, table_path: Path, rows: set[int]):
    """(row index, task_binary) for the given rows, in table order."""
    row = 0
    try:
        for batch in table.iter_batches(batch_size=TABLE_BATCH_ROWS, columns=["task_binary"]):
            column = batch.column("task_binary")
            for j in range(len(column)):
                if row + j in rows:
                    value = column[j].as_py()
                    if not isinstance(value, bytes):
                        raise BadInput(f"{table_path}: row {row + j} task_binary is "
                                       f"{'missing' if value is None else 'not binary'} — {NOTHING}")
                    yield row + j, value
            row += len(column)
    except (pa.ArrowException, OSError) as e:
        raise BadInput(f"{table_path}: task_binary cannot be read ({e}) — {NOTHING}") from None


def _select(paths: list[str | None], names: list[str] | None, table_path: Path) -> dict[int, str]:
    """Row index -> its checked relative path, for the rows names selects (all when None)."""
    wanted = None if names is None else set(names)
    selected = {i: p for i, p in enumerate(paths)
                if wanted is None or (isinstance(p, str) and (p in wanted or PurePosixPath(p).name in wanted))}
    if wanted is not None:
        found = {x for p in selected.values() for x in (p, PurePosixPath(p).name)}
        unknown = sorted(wanted - found)
        if unknown:
            raise BadInput(f"{table_path}: no task named {', '.join(map(repr, unknown))} — {NOTHING}")
    checked = {i: _relative_path(p, i, table_path) for i, p in selected.items()}
    seen: dict[str, int] = {}
    for i, rel in checked.items():
        if rel in seen:
            raise BadInput(f"{table_path}: rows {seen[rel]} and {i} both have path {rel!r} — {NOTHING}")
        seen[rel] = i
    for i, rel in checked.items():
        inside = next((p.as_posix() for p in PurePosixPath(rel).parents if p.as_posix() in seen), None)
        if inside is not None:
            raise BadInput(f"{table_path}: row {i} path {rel!r} lies inside task {inside!r} — {NOTHING}")
    return checked


def _relative_path(value: str | None, row: int, table_path: Path) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadInput(f"{table_path}: row {row} has no path — {NOTHING}")
    p = PurePosixPath(value)
    if p.is_absolute() or ".." in p.parts or p.as_posix() == "." or "\x00" in value:
        raise BadInput(f"{table_path}: row {row} path {value!r} is absolute or has a '..' component "
                       f"— {NOTHING}")
    return p.as_posix()
