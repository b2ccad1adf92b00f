"""Stage `scan`: every configured source's inputs -> .tracelake/scan/<source>.json (the path, size
and sha256 of each file under its path and tasks), the version of the source that ingest@<source>
depends on in place of its files. DVC runs it at every `dvc repro`, since it is how a new or
changed input file is seen; it reads only new and changed files (core/scan.py: hashes recalled by
stat), and rewrites a manifest only when the source changed."""

from __future__ import annotations

from pathlib import Path

from tracelake.core.outputs import write_bytes
from tracelake.core.stage import Context, Result, Stage
from tracelake.ingest.sources import MANIFESTS, manifest_path, scan_source


def _scans(ctx: Context) -> dict[str, tuple[bytes, object]]:
    p = ctx.params
    return {name: scan_source(name, src, Path(p.ingest.cache)) for name, src in p.sources.items()}


def run(ctx: Context) -> Result:
    scans = _scans(ctx)
    MANIFESTS.mkdir(parents=True, exist_ok=True)
    lines = []
    for name, (manifest, scan) in scans.items():
        path = manifest_path(name)
        old = path.read_bytes() if path.is_file() else None
        if old != manifest:
            write_bytes(path, manifest)
        state = "unchanged" if old == manifest else "changed" if old is not None else "new"
        lines.append(
            f"scan {name}: {scan.files:,} files, {scan.hashed:,} read ({scan.hashed_bytes / 1e6:,.1f} MB), {state}"
        )
    for stale in MANIFESTS.glob("*.json"):  # a source no longer configured
        if stale.stem not in scans:
            stale.unlink()
    return Result(summary=lines)


def pending(ctx: Context) -> dict[str, list[str]]:
    """The ingest stages whose source's files differ from their manifest now (nothing written)."""
    out = {}
    for name, (manifest, _) in _scans(ctx).items():
        path = manifest_path(name)
        if not path.is_file() or path.read_bytes() != manifest:
            out[f"ingest@{name}"] = ["changed inputs"]
    return out


STAGE = Stage(
    "scan",
    __doc__,
    run,
    params=("sources",),
    untracked=("ingest.cache",),
    outs_uncached=(str(MANIFESTS),),
    always_run=pending,
)
