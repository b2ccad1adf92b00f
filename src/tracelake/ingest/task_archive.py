"""Harbor task archives: a task directory <-> task_binary (a gzipped tar), built, read and extracted.

    entries = walk_task_dir(Path("tasks/hello-world"))   # files and directories, sorted
    binary = build_archive(entries)                      # deterministic bytes (ARCHIVE_FORMAT)
    entries = read_archive(binary)                       # in memory; unsafe members are refused
    entries = scan_archive(binary)                       # streamed: data hashed in chunks, not kept
    extract_archive(binary, Path("out/hello-world"))     # safe, streamed extraction, all or nothing
    extract_table(Path("tasks.parquet"), Path("out"))    # every (path, task_binary) row -> out/<path>

build_archive writes sorted entries with mode 0644/0755, owner 0, mtime 0 and a gzip header
without name or time, so the same directory gives the same bytes on any machine.

walk_task_dir never follows a link: one that leads outside the task directory (or a task directory
that is itself a link leading outside its parent) is rejected `symlink_outside_input`, any other
`unsafe_archive`, so no byte outside the input is ever read and a loop (`loop -> .`) is never
walked. A directory past the ingest.archive caps is rejected `archive_too_large` as soon as the
walk crosses one. read_archive (tracelake.ingest.archive_read) vets and caps archives the same way.

The extract functions vet a whole archive first (a streamed pass: its members, caps and paths
together, archive_read.list_archive), write plain files and directories themselves in a second
pass, in chunks (never tarfile.extract), and raise BadInput, leaving nothing behind, when an
archive or a table row is unusable. walk_task_dir applies the same path limits
(check_member_path), so a task directory that is kept also extracts. extract_table resolves real paths: a symlink already in the output
directory that would lead a write outside it is refused before anything is written.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import tarfile
from pathlib import Path, PurePosixPath
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from tracelake.core.errors import BadInput
from tracelake.core.hashing import canonical_json, sha256_bytes
from tracelake.core.outputs import output_dir
from tracelake.core.tables import open_parquet
from tracelake.ingest.archive_read import (
    DEFAULT_LIMITS,
    Chunks,
    Entry,
    Member,
    check_member_path,
    list_archive,
    members,
    read_archive,
    scan_archive,
    too_many_bytes,
    too_many_members,
    top_dir_prefix,
)
from tracelake.ingest.common import Reject
from tracelake.ingest.params import ArchiveParams
from tracelake.ingest.walk import Root, display, is_text

__all__ = [
    "ARCHIVE_FORMAT",
    "CHECKSUM_FORMULA",
    "DEFAULT_LIMITS",
    "Entry",
    "build_archive",
    "extract_archive",
    "extract_table",
    "read_archive",
    "scan_archive",
    "task_checksum",
    "walk_task_dir",
]

ARCHIVE_FORMAT = "tar-pax-sorted-mode644/755-uid0-mtime0-gzip9-v1"
CHECKSUM_FORMULA = "sha256(canonical_json(sorted [posix path, sha256(bytes)] of regular files))"
TABLE_BATCH_ROWS = 64  # task_binary values can be megabytes each
NOTHING = "nothing was extracted"


# --- task directories ------------------------------------------------------------------------


def walk_task_dir(task_dir: Path, limits: ArchiveParams = DEFAULT_LIMITS) -> list[Entry]:
    """Every file and directory under task_dir, sorted by path; links are refused, never followed,
    and so are devices and a task past the caps."""
    task_dir = Path(task_dir)
    if task_dir.is_symlink():
        _refuse_link(task_dir, task_dir.name, task_dir.parent, "its input directory")
    root = os.path.realpath(task_dir)
    entries: list[Entry] = []
    total = 0

    def visit(d: Path, prefix: str) -> None:
        nonlocal total
        children = []
        with os.scandir(d) as it:
            for e in it:  # counted as listed: a directory of a million files stops at the cap
                children.append(e)
                if len(entries) + len(children) > limits.max_members:
                    raise too_many_members(limits)
        for e in sorted(children, key=lambda e: e.name):
            rel = prefix + e.name
            if not is_text(rel):
                raise Reject("invalid_path", f"{display(rel)} is not UTF-8")
            check_member_path(rel, rel[:80])  # its archive must extract wherever it goes
            if e.is_symlink():
                _refuse_link(Path(e.path), rel, root, "the task directory")
            if e.is_dir(follow_symlinks=False):
                entries.append(Entry(rel, is_dir=True))
                visit(Path(e.path), rel + "/")
            elif e.is_file(follow_symlinks=False):
                st = e.stat(follow_symlinks=False)
                total += st.st_size
                if total > limits.max_total_bytes:  # from the size: the file is not read
                    raise too_many_bytes(limits)
                entries.append(
                    Entry(rel, is_dir=False, executable=bool(st.st_mode & 0o111), data=_read_no_follow(e.path))
                )
            else:
                raise Reject("unsafe_archive", f"{rel} is not a regular file or directory")
            if len(entries) > limits.max_members:
                raise too_many_members(limits)

    try:
        visit(task_dir, "")
    except OSError as e:
        raise Reject("unreadable_file", f"{e.filename}: {e.strerror or e}") from None
    return sorted(entries, key=lambda e: e.name)


def _refuse_link(path: Path, rel: str, inside: str | Path, where: str) -> None:
    """Reject a symlink: symlink_outside_input when it leads outside `inside`, else unsafe_archive."""
    if not Root(inside).contains(path):  # realpath only reads links (and stops at loops)
        raise Reject(
            "symlink_outside_input",
            f"{rel} is a symlink leading outside {where} "
            f"(to {os.readlink(path)!r}); links are never followed: copy the file in instead",
        )
    raise Reject("unsafe_archive", f"{rel} is a symlink (links are never followed)")


def _read_no_follow(path: str) -> bytes:
    """A regular file's bytes, refusing to follow a link swapped in since it was listed."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def build_archive(entries: list[Entry]) -> bytes:
    """A deterministic gzipped tar of the entries (same entries -> same bytes)."""
    buf = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="", compresslevel=9) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar,
    ):
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
    listing = sorted([e.name, e.sha256 or sha256_bytes(e.data)] for e in entries if not e.is_dir)
    return sha256_bytes(canonical_json(listing))


# --- extracting one archive ------------------------------------------------------------------


def extract_archive(
    data: bytes, dest: Path, *, label: str | None = None, limits: ArchiveParams = DEFAULT_LIMITS
) -> list[str]:
    """Extract a task_binary into dest (absent or an empty directory); the files written, sorted.

    The archive is streamed twice, in bounded memory: once to vet it whole (list_archive: every
    member, the caps, the paths together), then again to write it, each file in chunks, with
    `lake.output_dir` (a temporary directory beside dest, renamed into place), so a refused
    archive leaves nothing behind. Files get mode 0755 when executable in the archive, else 0644;
    directories 0755. label names the archive in error messages (default: dest); limits caps the
    archive as ingest does (ingest.archive).
    """
    dest = Path(os.path.abspath(dest))
    what = f"task_binary of {label or dest}"
    if not _is_free(dest):
        raise BadInput(f"{what}: {dest} already exists and is not an empty directory — {NOTHING}")
    try:
        listing = list_archive(data, limits)
    except Reject as r:
        raise BadInput(f"{what}: {r.detail} — {NOTHING}") from None
    strip = top_dir_prefix(listing)
    created = _make_parents(dest.parent, what)
    try:
        with output_dir(dest, clean_siblings=False) as tmp:  # dest's parent is the user's
            _write_members(data, limits, strip, tmp, what)
    except OSError as e:
        _remove_dirs(created)
        raise BadInput(f"{what}: cannot write {dest} ({e.strerror or e}) — {NOTHING}") from None
    except BaseException:
        _remove_dirs(created)
        raise
    return sorted(e.name[len(strip) :] for e in listing if not e.is_dir and e.name.startswith(strip))


def _is_free(dest: Path) -> bool:
    """dest is absent, or an empty directory that is not a link."""
    if not os.path.lexists(dest):
        return True
    try:
        return not dest.is_symlink() and dest.is_dir() and not any(dest.iterdir())
    except OSError:
        return False


def _write_members(data: bytes, limits: ArchiveParams, strip: str, root: Path, what: str) -> None:
    """Write an archive already vetted under root (a new, empty directory), member by member as the
    stream gives them, `strip` (its top-level directory, or '') removed from each name: plain
    directories and files only, each file in chunks."""
    base = root.resolve()
    try:
        for m, chunks in members(data, limits):
            if m.name.startswith(strip):
                _write_member(root / m.name[len(strip) :], base, m, chunks, what)
    except Reject as r:  # the archive was vetted: only a stream that changed under us gets here
        raise BadInput(f"{what}: {r.detail} — {NOTHING}") from None
    for d, _, _ in os.walk(root):
        os.chmod(d, 0o755)


def _write_member(target: Path, base: Path, m: Member, chunks: Chunks | None, what: str) -> None:
    resolved = target.resolve()
    if resolved == base or not resolved.is_relative_to(base):
        raise BadInput(f"{what}: member {m.name!r} resolves outside the destination — {NOTHING}")
    try:
        if chunks is None:
            target.mkdir(parents=True, exist_ok=True)
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
            os.fchmod(f.fileno(), 0o755 if m.executable else 0o644)
    except OSError as err:
        raise BadInput(f"{what}: member {m.name!r} cannot be written ({err.strerror or err}) — {NOTHING}") from None


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


def extract_table(
    table_path: Path,
    out: Path,
    *,
    names: list[str] | None = None,
    limits: ArchiveParams = DEFAULT_LIMITS,
    advance: Callable[[int], None] | None = None,
) -> list[Path]:
    """Extract each (path, task_binary) row of a Parquet task table into out/<path>.

    names keeps only the rows whose path, or its last component, is one of them. Every selected
    path and target is checked before anything is written (a target whose real path, through a
    symlink already under out, leaves out is refused), and a refused archive undoes the rows
    already extracted, so on BadInput nothing is left behind. Returns the task directories written.
    `advance(1)` is called after each (a progress bar).
    """
    table_path, out = Path(table_path), Path(out)
    table = _open_table(table_path)
    paths = _read_paths(table, table_path)
    selected = _select(paths, names, table_path)
    targets = {i: out / rel for i, rel in selected.items()}
    for i, target in targets.items():
        if os.path.lexists(target):
            raise BadInput(f"{table_path}: {target} already exists; pass a new --out — {NOTHING}")
        _check_inside(target, out, table_path)
    written: list[Path] = []
    created: list[Path] = []
    try:
        for i, binary in _read_binaries(table, table_path, set(selected)):
            _check_inside(targets[i], out, table_path)  # again: the check above was before any write
            created += _make_parents(targets[i].parent, f"{table_path} row {i}")
            _check_inside(targets[i], out, table_path)
            extract_archive(binary, targets[i], label=selected[i], limits=limits)
            written.append(targets[i])
            if advance is not None:
                advance(1)
    except BaseException:
        for d in written:
            shutil.rmtree(d, ignore_errors=True)
        _remove_dirs(sorted(created, key=lambda p: len(p.parts), reverse=True))
        raise
    return written


def _check_inside(target: Path, out: Path, table_path: Path) -> None:
    """Refuse a target whose real path leaves out's: a symlink under out would lead writes elsewhere."""
    root = os.path.realpath(out)
    real = os.path.realpath(target)
    if real != root and not real.startswith(root.rstrip("/") + "/"):
        raise BadInput(
            f"{table_path}: {target} resolves to {real}, outside {out} (a symlink under it "
            f"leads elsewhere); remove the link or pass a new --out — {NOTHING}"
        )


def _open_table(table_path: Path) -> pq.ParquetFile:
    table = open_parquet(table_path)
    for column in ("path", "task_binary"):
        if column not in table.schema_arrow.names:
            raise BadInput(f"{table_path} has no {column!r} column (a task table has path and task_binary)")
    return table


def _read_paths(table: pq.ParquetFile, table_path: Path) -> list[str | None]:
    try:
        return [p for b in table.iter_batches(batch_size=65536, columns=["path"]) for p in b.column("path").to_pylist()]
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
                        raise BadInput(
                            f"{table_path}: row {row + j} task_binary is "
                            f"{'missing' if value is None else 'not binary'} — {NOTHING}"
                        )
                    yield row + j, value
            row += len(column)
    except (pa.ArrowException, OSError) as e:
        raise BadInput(f"{table_path}: task_binary cannot be read ({e}) — {NOTHING}") from None


def _select(paths: list[str | None], names: list[str] | None, table_path: Path) -> dict[int, str]:
    """Row index -> its checked relative path, for the rows names selects (all when None)."""
    wanted = None if names is None else set(names)
    selected = {
        i: p
        for i, p in enumerate(paths)
        if wanted is None or (isinstance(p, str) and (p in wanted or PurePosixPath(p).name in wanted))
    }
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
    if "\x00" in value:
        raise BadInput(f"{table_path}: row {row} path {value!r} has a NUL byte — {NOTHING}")
    p = PurePosixPath(value)
    if p.is_absolute() or ".." in p.parts or p.as_posix() == ".":
        raise BadInput(f"{table_path}: row {row} path {value!r} is absolute or has a '..' component — {NOTHING}")
    return p.as_posix()
