"""Output directories and manifests: the one way a stage's output directory is built (atomically,
core/swap.py), its manifest.json (written last: a directory is finished exactly when it has one), and
stable JSON files (metrics). Light on purpose (no pyarrow): writing a config or reading a manifest
needs no engine; the Parquet tables inside an output are core/tables.py's.
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import orjson

from tracelake import __version__
from tracelake.core.errors import BadInput
from tracelake.core.hashing import content_id
from tracelake.core.swap import remove_stale, replace_dir, temp_path

VERSION_HEX = 12

_UNFINISHED: list[Path] = []  # outputs whose build was abandoned in this process (for the Ctrl-C message)


@contextmanager
def output_dir(final: Path, clean_siblings: bool = True) -> Iterator[Path]:
    """The one way an output directory is built: yield a fresh temporary directory beside `final`;
    on success swap it into place whole, on any failure (Ctrl-C included) remove it. `final` is
    always either the previous complete version or the new complete one, never a mix; the swap is
    one atomic exchange where the system allows (core/swap.py). What a killed run left beside
    `final` (its temporary, old or scratch directories) is removed first, and with `clean_siblings`
    what it left beside the outputs next to `final` (off where the parent is a user's directory)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(final, siblings=clean_siblings)
    tmp = temp_path(final, "tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        _UNFINISHED.append(final)
        raise
    replace_dir(tmp, final, old=temp_path(final, "old"))


def unfinished_outputs() -> list[Path]:
    """Outputs this process started and did not finish (their previous versions are untouched)."""
    return list(dict.fromkeys(_UNFINISHED))


def write_json(path: Path, value: Any) -> None:
    """Pretty, sorted, newline-terminated JSON (stable bytes for DVC and git), written to a temporary
    file and renamed into place; a temporary file that a killed run left beside it is removed."""
    write_bytes(path, orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2) + b"\n")


def write_bytes(path: Path, data: bytes) -> None:
    """`data` written to a temporary file beside `path` and renamed into place (a temporary file that
    a killed run left there is removed)."""
    path = Path(path)
    remove_stale(path, siblings=False)
    tmp = temp_path(path, "tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def write_manifest(
    directory: Path,
    *,
    kind: str,
    tables: list[Any],
    inputs: dict[str, Any],
    params: dict[str, Any],
    formulas: dict[str, str],
    counts: dict[str, Any],
    dataset_id: str | None = None,
) -> dict:
    """Write manifest.json (call last; `tables`: core.tables.TableInfo). The directory's version id
    hashes its tables and params;
    a dataset (one scale's selection) also carries its content-addressed name, `dataset_id`."""
    table_map = {t.name: t.as_json() for t in tables}
    version_id = content_id(
        "manifest",
        {
            "kind": kind,
            "tables": {n: t["version_id"] for n, t in table_map.items()},
            "params": params,
            "formulas": formulas,
        },
        n_hex=VERSION_HEX,
    )
    manifest = {
        "kind": kind,
        "version_id": version_id,
        **({"dataset_id": dataset_id} if dataset_id else {}),
        "tables": table_map,
        "inputs": inputs,
        "params": params,
        "formulas": formulas,
        "counts": counts,
        "tracelake_version": __version__,
    }
    write_json(directory / "manifest.json", manifest)
    return manifest


def read_manifest(directory: Path) -> dict[str, Any]:
    """An output's manifest, or BadInput in one line: missing, not JSON, or without its tables (each
    a {file, rows} mapping): a hand-edited or foreign manifest.json never reaches a reader as a
    KeyError."""
    path = Path(directory) / "manifest.json"
    if not path.is_file():
        raise BadInput(f"{directory} is not a finished tracelake output (no manifest.json)")
    try:
        manifest = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError:
        raise BadInput(f"{path} is not JSON (rebuild the output: dvc repro)") from None
    tables = manifest.get("tables") if isinstance(manifest, dict) else None
    if not isinstance(tables, dict) or not all(
        isinstance(t, dict) and isinstance(t.get("file"), str) and isinstance(t.get("rows"), int)
        for t in tables.values()
    ):
        raise BadInput(f"{path} is not a tracelake manifest (no tables; rebuild the output: dvc repro)")
    return manifest


def manifest_files(directory: Path, manifest: dict[str, Any], table: str) -> list[Path]:
    """The files of one table of a built directory as its manifest names them: the table's one file,
    or the Parquet files of the directory it names (a parted table's parts, an export's shards)."""
    name = manifest["tables"][table]["file"]
    root = Path(directory)
    path = root / name
    # by name, not by resolving: a file may be a link into the DVC cache (a lake at a revision)
    if not Path(os.path.normpath(path)).is_relative_to(os.path.normpath(root)):  # a hand-made manifest
        raise BadInput(f"{root / 'manifest.json'}: table {table}'s file {name!r} is outside its directory")
    return sorted(path.glob("*.parquet")) if name.endswith("/") else [path]
