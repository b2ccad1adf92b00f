"""Reading a task_binary (a gzipped tar of a Harbor task) in memory: vetted, capped, streamed.

    entries = read_archive(binary)                               # ingest.archive defaults
    entries = read_archive(binary, ArchiveParams(max_members=100))

Members are read one by one from the decompressing stream, so a hostile archive is refused as
soon as it crosses a cap (`archive_too_large`), never after it has been read whole: more than
`max_members` members, more than `max_total_bytes` of file contents (checked from each header
before its data is read), or a decompressed stream far larger than its files (a huge PAX header,
which tarfile would otherwise read into memory).

Each member is vetted with the standard extraction filter, tarfile.data_filter: devices, fifos
and other special files, and paths that are absolute or resolve outside the destination by the
running OS's rules, are refused. The project also refuses what that filter lets by: a leading '/'
(it strips one) and any '..' component (even one that stays inside), a NUL byte in a name, every
link (even one inside: a task is plain files and directories) and duplicate members. Refusals
raise Reject, which ingest records as a reject row and extraction as a one-line error. A tar that
holds the task under one top-level directory is read relative to it.

Whatever is accepted can be extracted (ingest keeps nothing that `tasks extract` would refuse): the
members' paths are checked together as they come (Layout: no member twice, no file where another
member needs a directory) and each against the file system's limits (check_member_path: a name of
at most 255 bytes, a path of at most 1024). Ingest (scan_archive) and extraction (members) read
the stream in chunks, so memory stays bounded whatever the archive inflates to.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import tarfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import PurePosixPath
from typing import IO, TypeVar

from tracelake.core.hashing import sha256_bytes
from tracelake.ingest.common import Reject, check_text
from tracelake.ingest.params import ArchiveParams

T = TypeVar("T")

DEFAULT_LIMITS = ArchiveParams()
# Tar bytes a member may take beyond its file data: its header, padding and PAX headers (a path of
# up to 4096 bytes fits), so any archive build_archive writes stays under the stream cap.
MEMBER_OVERHEAD = 8192
END_OVERHEAD = 4 * tarfile.RECORDSIZE  # end-of-archive blocks and the reader's read-ahead
# The destination data_filter vets members against; it need not exist ('/nonexistent' never
# should); if it did, the filter could only refuse more, never less.
_VET_ROOT = "/nonexistent/tracelake-task"
CHUNK_BYTES = 1 << 20  # a file's data is read (hashed, written) this much at a time
MAX_NAME_BYTES = 255  # one path component: NAME_MAX of the common file systems
MAX_PATH_BYTES = 1024  # a whole member path: leaves room under PATH_MAX (4096) for where it is extracted


@dataclasses.dataclass(frozen=True)
class Entry:
    """A regular file or directory of a task, path relative to the task directory."""

    name: str
    is_dir: bool
    executable: bool = False
    data: bytes = b""  # empty where a scan (scan_archive) kept only the file's sha256
    sha256: str | None = None  # of the file's data, where a scan computed it


def too_many_members(limits: ArchiveParams) -> Reject:
    return Reject(
        "archive_too_large",
        f"the task has more than {limits.max_members} members "
        f"(files and directories; raise ingest.archive.max_members to accept it)",
    )


def too_many_bytes(limits: ArchiveParams) -> Reject:
    return Reject(
        "archive_too_large",
        f"the task's files hold more than {limits.max_total_bytes} bytes "
        f"uncompressed (raise ingest.archive.max_total_bytes to accept it)",
    )


class _CappedStream:
    """The decompressed tar stream, refused once it grows past what the members read so far allow."""

    def __init__(self, raw: io.BufferedIOBase, limits: ArchiveParams):
        self.raw, self.limits, self.read_bytes, self.members = raw, limits, 0, 0

    def read(self, size: int = -1) -> bytes:
        allowed = self.limits.max_total_bytes + MEMBER_OVERHEAD * (self.members + 1) + END_OVERHEAD
        room = allowed + 1 - self.read_bytes  # one byte past the cap tells a stream that crosses it
        chunk = self.raw.read(room if size < 0 else min(size, room))
        self.read_bytes += len(chunk)
        if self.read_bytes > allowed:
            raise too_many_bytes(self.limits)
        return chunk


def read_archive(data: bytes, limits: ArchiveParams = DEFAULT_LIMITS) -> list[Entry]:
    """The entries of a gzipped tar, every file's data in memory (small archives, tests): unsafe
    members and archives past the caps are refused (Reject), never skipped. Ingest and extraction
    stream instead (scan_archive, members)."""
    entries = [
        Entry(m.name, m.is_dir, m.executable, b"" if chunks is None else b"".join(chunks))
        for m, chunks in members(data, limits)
    ]
    return _strip_top_dir(sorted(entries, key=lambda e: e.name))


def scan_archive(
    data: bytes, limits: ArchiveParams = DEFAULT_LIMITS, keep: frozenset[str] = frozenset()
) -> list[Entry]:
    """The entries of a gzipped tar, read as a stream in bounded memory: each file's sha256 is
    computed chunk by chunk and its data dropped, except files whose name (under the top-level
    directory that is stripped, if any) is in `keep`. Refusals as read_archive's."""
    entries = []
    for m, chunks in members(data, limits):
        if chunks is None:
            entries.append(Entry(m.name, True))
        elif _kept(m.name, keep):
            body = b"".join(chunks)
            entries.append(Entry(m.name, False, m.executable, body, sha256_bytes(body)))
        else:
            digest = hashlib.sha256()
            for chunk in chunks:
                digest.update(chunk)
            entries.append(Entry(m.name, False, m.executable, b"", digest.hexdigest()))
    return _strip_top_dir(sorted(entries, key=lambda e: e.name))


def list_archive(data: bytes, limits: ArchiveParams = DEFAULT_LIMITS) -> list[Entry]:
    """The members of a gzipped tar as named in it (no top-level directory stripped, no data), read
    as a stream: vetting a whole archive before extraction writes any of it."""
    entries = []
    for m, chunks in members(data, limits):
        for _ in chunks or ():
            pass
        entries.append(Entry(m.name, m.is_dir))
    return entries


def _kept(name: str, keep: frozenset[str]) -> bool:
    """A file `keep` names, at the top level or under a single top-level directory."""
    parts = name.split("/")
    return len(parts) <= 2 and parts[-1] in keep


@dataclasses.dataclass(frozen=True)
class Member:
    """A vetted member as the stream reaches it (its data, if a file, follows as chunks)."""

    name: str
    is_dir: bool
    executable: bool


Chunks = Iterator[bytes]


def members(data: bytes, limits: ArchiveParams = DEFAULT_LIMITS) -> Iterator[tuple[Member, Chunks | None]]:
    """Each member of a gzipped tar, vetted, with its data as chunks (None for a directory), in
    archive order, one at a time: memory stays bounded whatever the archive inflates to. The
    member '.' is passed over. Raises Reject at the first member that breaks a rule or a cap, or
    where the stream is damaged. A member's chunks can be read until the next member is asked for
    (unread data is skipped, never held)."""
    with gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb") as gz:
        stream = _CappedStream(gz, limits)
        tar = _reading(lambda: tarfile.open(fileobj=stream, mode="r|", bufsize=1 << 16))
        with tar:
            layout, total, count = Layout(), 0, 0
            while (m := _reading(tar.next)) is not None:
                tar.members.clear()  # stream mode keeps every header otherwise
                count += 1
                if count > limits.max_members:
                    raise too_many_members(limits)
                stream.members = count
                name = _safe_name(m)
                layout.add(name, m.isdir())
                if not m.isdir():
                    total += m.size
                    if total > limits.max_total_bytes:  # from the header: the data is not read yet
                        raise too_many_bytes(limits)
                if name == ".":
                    continue
                member = Member(name, m.isdir(), bool(m.mode & 0o111))
                yield member, None if m.isdir() else _chunks(_reading(lambda: tar.extractfile(m)))


def _reading(read: Callable[[], T]) -> T:
    """read(), with a damaged or truncated stream refused as unreadable_archive."""
    try:
        return read()
    except (tarfile.TarError, EOFError, OSError, zlib.error) as e:
        raise Reject("unreadable_archive", f"task_binary is not a readable gzipped tar ({e})") from None


def _chunks(f: IO[bytes]) -> Chunks:
    while chunk := _reading(lambda: f.read(CHUNK_BYTES)):
        yield chunk


class Layout:
    """The paths an archive's members make, checked as they come, so that whatever is accepted can
    be written as given: no member twice, no file where another member needs a directory (a file
    `tests` and a member `tests/test.sh`, in either order)."""

    def __init__(self) -> None:
        self.files: set[str] = set()
        self.named_dirs: set[str] = set()
        self.dirs: set[str] = set()  # named, or implied by a member below them

    def add(self, name: str, is_dir: bool) -> None:
        if name == ".":
            return
        if name in self.files or name in self.named_dirs:
            raise Reject("unsafe_archive", f"member {name!r} appears twice (one would overwrite the other)")
        if not is_dir and name in self.dirs:
            raise Reject("unsafe_archive", f"member {name!r} is a file, but other members lie below it")
        parents = [p.as_posix() for p in PurePosixPath(name).parents][:-1]  # without '.'
        clash = next((p for p in parents if p in self.files), None)
        if clash is not None:
            raise Reject("unsafe_archive", f"member {name!r} lies below {clash!r}, which is a file")
        (self.named_dirs if is_dir else self.files).add(name)
        self.dirs.update(parents)
        if is_dir:
            self.dirs.add(name)


def check_member_path(name: str, where: str) -> None:
    """Refuse a path no file system would take: a component over MAX_NAME_BYTES or a whole path over
    MAX_PATH_BYTES (UTF-8 bytes), so every task that is kept can be extracted."""
    encoded = name.encode("utf-8", "surrogateescape")
    if len(encoded) > MAX_PATH_BYTES:
        raise Reject("unsafe_archive", f"{where} is {len(encoded)} bytes long (at most {MAX_PATH_BYTES} extract)")
    longest = max(encoded.split(b"/"), key=len)
    if len(longest) > MAX_NAME_BYTES:
        raise Reject(
            "unsafe_archive",
            f"{where} has a name of {len(longest)} bytes (no file system takes more than {MAX_NAME_BYTES})",
        )


def _safe_name(m: tarfile.TarInfo) -> str:
    """The member's normalised name, once the project's rules and tarfile.data_filter pass it."""
    escapes = f"member {m.name!r} has an absolute path or a '..' component"
    # Project rules first (in the order messages have always been given). data_filter strips a
    # leading '/' and passes a '..' that stays inside; we refuse both, so names stay literal.
    if m.name.startswith("/") or ".." in PurePosixPath(m.name).parts:
        raise Reject("unsafe_archive", escapes)
    if "\x00" in m.name:  # a PAX path can hold one; data_filter's realpath would raise ValueError
        raise Reject("unsafe_archive", f"member {m.name!r} has a NUL byte in its name")
    check_member_path(m.name.rstrip("/"), f"member {m.name[:80]!r}")
    # Project rule: no links at all, though data_filter passes those that stay inside the
    # destination; a task is plain files and directories, and only those are ever written.
    if m.issym() or m.islnk():
        raise Reject("unsafe_archive", f"member {m.name!r} is a link (to {m.linkname!r})")
    # The member data_filter returns (modes limited, owners dropped) is not used: Entry keeps the
    # original exec bits and extraction writes 0644/0755 itself.
    try:
        tarfile.data_filter(m, _VET_ROOT)
    except tarfile.SpecialFileError:
        raise Reject("unsafe_archive", f"member {m.name!r} is a device, fifo or other special file") from None
    except tarfile.FilterError:  # AbsolutePathError, OutsideDestinationError, by the OS's rules
        raise Reject("unsafe_archive", escapes) from None
    check_text(m.name, f"member {m.name!r}")
    return PurePosixPath(m.name).as_posix()


def _strip_top_dir(entries: list[Entry]) -> list[Entry]:
    """Files under one top-level directory (task-name/instruction.md) -> relative to it."""
    prefix = top_dir_prefix(entries)
    if not prefix:
        return entries
    return [dataclasses.replace(e, name=e.name[len(prefix) :]) for e in entries if e.name.startswith(prefix)]


def top_dir_prefix(entries: list[Entry]) -> str:
    """'task-name/' when the task lies under one top-level directory (no instruction.md or task.toml
    at the top, one of them below it), else ''."""
    files = {e.name for e in entries if not e.is_dir}
    if "instruction.md" in files or "task.toml" in files:
        return ""
    tops = {e.name.split("/", 1)[0] for e in entries}
    if len(tops) != 1:
        return ""
    prefix = tops.pop() + "/"
    if prefix + "instruction.md" not in files and prefix + "task.toml" not in files:
        return ""
    return prefix
