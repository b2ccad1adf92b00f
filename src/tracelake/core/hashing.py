"""Content hashing: canonical JSON and short, stable ids.

Every row id is sha256 over the canonical JSON of the fields that make the row what it is
(sorted keys, no whitespace, UTF-8), cut to 16 hex digits (64 bits: ~1e-10 collision odds at 100K rows).
Same content on any machine, in any run, gives the same id.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import orjson

ID_HEX = 16


def canonical_json(value: Any) -> bytes:
    """Deterministic JSON bytes: sorted keys, compact, UTF-8, non-str keys refused."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def content_id(kind: str, value: Any, n_hex: int = ID_HEX) -> str:
    """Id of `value`, namespaced by `kind` so a task and a trajectory never share an id."""
    h = hashlib.sha256(kind.encode() + b"\x00" + canonical_json(value))
    return h.hexdigest()[:n_hex]


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


FINGERPRINT_EDGE = 1 << 20  # bytes read at each end of a model file


def model_fingerprint(directory: Path) -> str:
    """sha256 over each file's relative path, size, first and last MiB: cheap on a 16 GB model,
    and any re-download, conversion or edit of a file changes it."""
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        size = path.stat().st_size
        digest.update(f"{path.relative_to(directory).as_posix()}\0{size}\0".encode())
        with path.open("rb") as f:
            digest.update(f.read(FINGERPRINT_EDGE))
            if size > 2 * FINGERPRINT_EDGE:
                f.seek(size - FINGERPRINT_EDGE)
                digest.update(f.read())
    return digest.hexdigest()[:16]
