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
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import tarfile
import zlib
from pathlib import PurePosixPath

from tracelake.ingest.common import Reject, check_text
from tracelake.ingest.params import ArchiveParams

DEFAULT_LIMITS = ArchiveParams()
# Tar bytes a member may take beyond its file data: its header, padding and PAX headers (a path of
# up to 4096 bytes fits), so any archive build_archive writes stays under the stream cap.
MEMBER_OVERHEAD = 8192
END_OVERHEAD = 4 * tarfile.RECORDSIZE  # end-of-archive blocks and the reader's read-ahead
# The destination data_filter vets members against; it need not exist ('/nonexistent' never
# should); if it did, the filter could only refuse more, never less.
_VET_ROOT = "/nonexistent/tracelake-task"


@dataclasses.dataclass(frozen=True)
class Entry:
    """A regular file or directory of a task, path relative to the task directory."""

    name: str
    is_dir: bool
    executable: bool = False
    data: bytes = b""


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
    """The entries of a gzipped tar, read in memory one member at a time; unsafe members and
    archives past the caps are refused (Reject), never skipped."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb") as gz:
            stream = _CappedStream(gz, limits)
            with tarfile.open(fileobj=stream, mode="r|", bufsize=1 << 16) as tar:
                entries = _read_members(tar, stream, limits)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as e:
        raise Reject("unreadable_archive", f"task_binary is not a readable gzipped tar ({e})") from None
    return _strip_top_dir(sorted(entries, key=lambda e: e.name))


def _read_members(tar: tarfile.TarFile, stream: _CappedStream, limits: ArchiveParams) -> list[Entry]:
    entries: list[Entry] = []
    seen: set[str] = set()
    total = 0
    for count, m in enumerate(tar, 1):
        if count > limits.max_members:
            raise too_many_members(limits)
        stream.members = count
        name = _safe_name(m)
        if name in seen:
            raise Reject("unsafe_archive", f"member {name!r} appears twice (one would overwrite the other)")
        seen.add(name)
        if not m.isdir():
            total += m.size
            if total > limits.max_total_bytes:  # from the header: the data is not read yet
                raise too_many_bytes(limits)
        if name != ".":
            entries.append(
                Entry(
                    name,
                    is_dir=m.isdir(),
                    executable=bool(m.mode & 0o111),
                    data=b"" if m.isdir() else tar.extractfile(m).read(),
                )
            )
    return entries


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
        raise Reject("unsafe_archive", f"member {m.name!r} is a device, fifo or other special file") from None
    except tarfile.FilterError:  # AbsolutePathError, OutsideDestinationError, by the OS's rules
        raise Reject("unsafe_archive", escapes) from None
    check_text(m.name, f"member {m.name!r}")
    return PurePosixPath(m.name).as_posix()


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
    return [dataclasses.replace(e, name=e.name[len(prefix) :]) for e in entries if e.name.startswith(prefix)]
