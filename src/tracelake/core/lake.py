"""Where every table and dataset lives in a lake, which of them are built, and how a name given on
the command line (a scale, a dataset id, a unique prefix of one) finds its directory.

    <lake>/
      trajectories/<source>/  trajectories/part-NNNNN.parquet rejects.parquet
                              manifest.json                                        ingest@<source>
      tasks/<source>/         tasks.parquet rejects.parquet manifest.json          ingest@<source>
      scores/                 scores.parquet manifest.json                         score
      dedup/                  task_clusters.parquet contamination.parquet
                              manifest.json                                        dedup
      pool/                   pool.parquet dropped.parquet manifest.json           filter
      selections/<scale>/     selection.parquet manifest.json                      select@<scale>
      exports/sft/<scale>/    <dataset id>/train-NNNNN.parquet dataset_info.json
                              export_rejects.parquet manifest.json                 export_sft@<scale>
      exports/rl/             prompts/ tasks/ export_rejects.parquet manifest.json export_rl

Every directory is an output: built whole, swapped into place, `manifest.json` written last, so a
directory is *built* exactly when its manifest exists. Names starting with a dot are a build's
temporary, old or scratch directories (core/swap.py), never outputs, whatever they hold: every
listing of built sources and scales skips them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from tracelake.core.errors import BadInput

# Tables stored as a directory of Parquet parts, <table>/part-00000.parquet, ...: ingest workers
# write their own parts, and an input file that did not change brings back its parts unchanged.
PARTED_TABLES = frozenset({"trajectories"})
MANIFEST = "manifest.json"
INGESTED = ("trajectories", "tasks")


def table_paths(directory: Path, name: str) -> list[Path]:
    """The Parquet files of one table of an output directory, in row order."""
    directory = Path(directory)
    if name in PARTED_TABLES:
        return sorted((directory / name).glob("part-*.parquet"))
    return [directory / f"{name}.parquet"]


def is_built(directory: Path) -> bool:
    return (Path(directory) / MANIFEST).is_file()


def built_children(parent: Path) -> list[Path]:
    """The built output directories directly under `parent`, sorted: hidden names (a build's
    temporary or leftover directories, which may hold a manifest) and unfinished ones left out."""
    parent = Path(parent)
    if not parent.is_dir():
        return []
    return sorted(d for d in parent.iterdir() if not d.name.startswith(".") and d.is_dir() and is_built(d))


class _Under:
    """A fixed directory under the lake's root: `Lake.pool` is `<root>/pool`."""

    def __init__(self, *parts: str):
        self.parts = parts

    def __get__(self, lake: "Lake | None", owner: type | None = None) -> Path:
        return lake.root.joinpath(*self.parts) if lake is not None else Path(*self.parts)


TOKENIZED_DIR = "tokenized"  # an SFT export's pre-tokenized dataset: lake/exports/sft/<scale>/tokenized


@dataclass(frozen=True)
class Lake:
    """The paths of one lake (`params.lake`, default `lake`)."""

    root: Path

    def __init__(self, root: Path | str):
        object.__setattr__(self, "root", Path(root))

    # --- one directory per stage output -------------------------------------------------------
    def table(self, table: str, source: str) -> Path:
        """An ingested table of one source: <lake>/trajectories/<source>, <lake>/tasks/<source>."""
        return self.root / table / source

    scores = _Under("scores")
    dedup = _Under("dedup")
    pool = _Under("pool")
    selections = _Under("selections")
    sft_exports = _Under("exports", "sft")
    rl_export = _Under("exports", "rl")

    def selection(self, scale: str) -> Path:
        return self.selections / scale

    def sft_export(self, scale: str) -> Path:
        return self.sft_exports / scale

    @staticmethod
    def tokenized(export: Path) -> Path:
        """An SFT export's pre-tokenized dataset (LLaMA-Factory's tokenized_path), inside the export."""
        return export / TOKENIZED_DIR

    # --- what is built ----------------------------------------------------------------------
    def table_files(self, table: str, sources: Iterable[str]) -> list[str]:
        """The Parquet files of <lake>/<table>/<source> for each source (the trajectories table's
        parts, the tasks table's one file), each source checked to be built."""
        files = []
        for source in sources:
            directory = self.table(table, source)
            if not is_built(directory):
                raise BadInput(f"{directory} is not built: run `dvc repro` (or `tracelake ingest`) first")
            files.extend(str(p) for p in table_paths(directory, table))
        return files

    def ingested(self) -> list[tuple[str, str, Path]]:
        """(table, source, directory) of every built ingest output, sorted."""
        return sorted((table, d.name, d) for table in INGESTED for d in built_children(self.root / table))

    def built_selections(self) -> dict[str, Path]:
        """scale -> directory of every built selection."""
        return {d.name: d for d in built_children(self.selections)}

    def built_sft_exports(self) -> dict[str, Path]:
        """scale -> directory of every built SFT export."""
        return {d.name: d for d in built_children(self.sft_exports)}
