"""Each source's inputs as one manifest (core/scan.py): what DVC tracks of a source, in place of its files.

    .tracelake/scan/<source>.json     the path, size and sha256 of every file under the source's
                                      `path` and `tasks`, written by the `scan` stage
    <ingest.cache>/scan/<source>.json each file's sha256, recalled by its stat (a cache)

ingest@<source> depends on its manifest; it reads the files themselves and, once its tables are
written, checks that the manifest still describes them (a source written to during the run is
an error, never a dataset half of one version and half of the next).
"""

from __future__ import annotations

from pathlib import Path

from tracelake.core.errors import BadInput
from tracelake.core.scan import Scan
from tracelake.ingest.params import SourceParams

MANIFESTS = Path(".tracelake/scan")


def manifest_path(source: str) -> Path:
    return MANIFESTS / f"{source}.json"


def scan_source(source: str, params: SourceParams, cache: Path) -> tuple[bytes, Scan]:
    """The source's manifest as its inputs stand now (file hashes recalled from `cache`, and the new
    ones remembered there), and the scan that wrote it (its counts)."""
    scan = Scan(Path(cache) / "scan" / f"{source}.json")
    manifest = scan.manifest([params.path, params.tasks])
    scan.save()
    return manifest, scan


def check_unchanged(source: str, params: SourceParams, cache: Path) -> None:
    """Stop with one line when the source's inputs are not what its manifest says (written to since
    `scan` ran, or while ingest read them). Without a manifest (the stage run by hand, outside
    `dvc repro`, before any `scan`), no version was recorded, and there is nothing to check."""
    path = manifest_path(source)
    try:
        recorded = path.read_bytes()
    except FileNotFoundError:
        return
    if scan_source(source, params, cache)[0] != recorded:
        raise BadInput(
            f"source {source}: its files changed since `scan` listed them ({path}); nothing is published "
            f"from a source being written to: run `dvc repro` again once it is complete"
        )
