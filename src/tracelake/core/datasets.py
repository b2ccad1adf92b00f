"""The dataset kinds, each declared once: what a manifest's `kind` is, which stage builds it, where
it lives in the lake, its id prefix, its SQL view, the name `diff` knows it by, the params the viewer
shows, its tables, what it was built from and how `diff` reads and explains it. The diffable versions
(`versions`), freshness (`building_stage`), dataset ids, `tracelake sql`'s dataset views, `diff`,
`status`, the viewer's datasets, the report and the docs' table of kinds (docs/exploring.md:
`python -m tracelake.core.datasets --docs docs/exploring.md`) follow from KINDS; an unknown kind is
an error, never a fallback to another kind's answer.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tracelake.core.doc_tables import DocTable
from tracelake.core.errors import BadInput, Bug, check
from tracelake.core.ids import dataset_label, matches_id_prefix
from tracelake.core.lake import Lake, built_children, is_built


@dataclass(frozen=True)
class DatasetKind:
    name: str  # the `kind` its manifest records
    stage: str  # the dvc.yaml stage that builds it (`<stage>@<scale>` for a kind built per scale)
    id_prefix: str | None  # its dataset ids' head (sel-1k-<hex>); None: named by its version (pool-<hex>)
    under: Callable[[Lake], Path]  # its directory; for a kind built per scale, the one holding each scale's
    view: str  # its rows' view in `tracelake sql` and the viewer ({scale} for a kind built per scale)
    diff_name: str  # what `tracelake diff` calls a built one
    table: str  # the table of its rows (the view reads it)
    also: tuple[str, ...] = ()  # other tables of its directory, each a view of that name when present
    shows: tuple[str, ...] | None = None  # the manifest's params the viewer shows (None: every one)
    per_trajectory: bool = True  # one trajectory per row (False: one task per row, keyed by task_id)
    built_from: str = ""  # the manifest's `inputs` key naming what it was built from (the viewer)
    trained_by: str = ""  # a training dataset: `tracelake train <trained_by> --dataset` takes it (sft, rl)
    # --- how `tracelake diff` reads and explains it (explore/diff.py) ---
    diff_rows: str = ""  # sql/<diff_rows>.sql: one row per dataset row ($files: its rows table's files)
    parent: str = ""  # the kind it was drawn from (same scale), whose lineage explains its moves
    parent_input: str = ""  # the manifest's `inputs` key holding that parent's version id
    dropped: str = ""  # its own table of dropped rows (key, rule, detail): what its filters dropped
    rejects: str = ""  # its own table of rejected rows (reason, detail): what its export rejected
    content_stage: str = "filter"  # the stage a changed row of it comes from
    task_scores: str = ""  # sql/<task_scores>.sql reads each task's score from its rows table ($file)
    # its manifest's params keys -> their params.yaml names where not `<stage>.<key>` (None: no param)
    param_names: dict[str, str | None] = field(default_factory=dict)

    @property
    def per_scale(self) -> bool:
        return "{scale}" in self.view

    @property
    def is_export(self) -> bool:
        """A dataset the export renders for a trainer: `tracelake status` lists it with the exports."""
        return self.content_stage == "export"

    @property
    def key(self) -> str:
        """The column a row is known by across versions (the diff joins on it)."""
        return "trajectory_id" if self.per_trajectory else "task_id"

    def building_stage(self, scale: str = "") -> str:
        """The dvc.yaml stage that builds the one of this scale (a kind not built per scale has one)."""
        check(bool(scale) or not self.per_scale, f"{self.name} is built per scale: which scale?")
        return f"{self.stage}@{scale}" if self.per_scale else self.stage

    def home(self, lake: Lake, scale: str = "") -> Path:
        """The directory of the one of this scale."""
        return self.under(lake) / scale if self.per_scale else self.under(lake)

    def built(self, lake: Lake) -> dict[str, Path]:
        """scale ('' for a kind not built per scale) -> the directory of each built one."""
        if self.per_scale:
            return {d.name: d for d in built_children(self.under(lake))}
        return {"": self.under(lake)} if is_built(self.under(lake)) else {}

    def named(self, scale: str = "") -> str:
        """What `tracelake diff` calls the one of this scale (pool, 1k, sft-1k, rl)."""
        return self.diff_name.format(scale=scale)

    def lake_of(self, directory: Path) -> tuple[Lake, str] | None:
        """The lake a built one at `directory` belongs to, and its scale; None when it is not where
        this kind lives (a copy elsewhere)."""
        directory = Path(directory)
        scale = directory.name if self.per_scale else ""
        for root in directory.parents:
            if self.home(Lake(root), scale) == directory:
                return Lake(root), scale
        return None


KINDS: tuple[DatasetKind, ...] = (
    DatasetKind(
        "pool",
        "filter",
        None,
        lambda lake: lake.pool,
        view="pool",
        diff_name="pool",
        table="pool",
        also=("dropped",),
        built_from="trajectories",
        diff_rows="diff/rows_pool",
        dropped="dropped",
    ),
    DatasetKind(
        "selection",
        "select",
        "sel",
        lambda lake: lake.selections,
        view="selection_{scale}",
        diff_name="{scale}",
        table="selection",
        built_from="pool",
        shows=("score", "rows", "mix", "max_copies_per_trajectory", "unscored"),
        diff_rows="diff/rows_selection",
        parent="pool",
        parent_input="pool",
        task_scores="diff/scores_selection",
        param_names={"mix": "mix", "scale": None, "rows": "scales.{scale}"},
    ),
    DatasetKind(
        "export_sft",
        "export_sft",
        "sft",
        lambda lake: lake.sft_exports,
        view="sft_{scale}",
        diff_name="sft-{scale}",
        table="sft_rows",
        built_from="selection_dataset",
        shows=("template", "mode", "thinking", "cutoff_len", "packing"),
        trained_by="sft",
        diff_rows="diff/rows_export_sft",
        parent="selection",
        parent_input="selection",
        rejects="export_rejects",
        content_stage="export",
        param_names={
            "export_sft": "export_sft",
            "scale": None,
            "cutoff_len": "train.sft.cutoff_len",
            "template": "train.sft.template",
            "special_tokens": "filter.special_tokens",
        },
    ),
    DatasetKind(
        "export_rl",
        "export_rl",
        "rl",
        lambda lake: lake.rl_export,
        view="rl_prompts",
        diff_name="rl",
        table="rl_prompts",
        also=("harbor_tasks", "rl_dropped"),
        per_trajectory=False,
        trained_by="rl",
        diff_rows="diff/rows_export_rl",
        dropped="rl_dropped",
        rejects="export_rejects",
        content_stage="export",
        param_names={"contaminated": "filter.contaminated", "near_duplicates": "filter.near_duplicates"},
    ),
)
ID_PREFIXES = tuple(k.id_prefix for k in KINDS if k.id_prefix)


def dataset_id(kind: str, rows: int, version_id: str) -> str:
    """A dataset's content-addressed name: `<kind>-<label of its row count>-<version id>`.

    `kind` is sel (a scale's selection), sft (its LLaMA-Factory export) or rl (the SkyRL prompts);
    `rows` is the selection's N for sel and sft, the number of task prompts for rl."""
    if kind not in ID_PREFIXES:
        raise ValueError(f"dataset kind {kind!r} is not one of {ID_PREFIXES} (core/datasets.py KINDS)")
    return f"{kind}-{dataset_label(rows)}-{version_id}"


def dataset_kind(name: str) -> DatasetKind:
    """The declared kind of that name; an unknown one is a bug, said in one line."""
    for k in KINDS:
        if k.name == name:
            return k
    raise Bug(f"no dataset kind {name!r} (declared: {', '.join(k.name for k in KINDS)})")


def building_stage(kind: str, scale: str = "") -> str:
    """The dvc.yaml stage that builds a dataset of `kind` (and `scale`, for a kind built per scale)."""
    return dataset_kind(kind).building_stage(scale)


def versions(lake: Lake) -> dict[str, Path]:
    """Every built dataset that `diff` compares, by its diff name (pool, <scale>, sft-<scale>, rl)."""
    return {k.named(scale): d for k in KINDS for scale, d in k.built(lake).items()}


def trained_kind(trainer: str) -> DatasetKind:
    """The kind `tracelake train <trainer>` trains on (sft: the SFT export, rl: the RL export)."""
    for k in KINDS:
        if k.trained_by == trainer:
            return k
    raise Bug(f"no dataset kind is trained by {trainer!r}")


def pick_dataset(ref: str, named: dict[str, str], what: str = "dataset", where: str = "") -> str:
    """The one name in `named` (name -> dataset id) that `ref` means: the name itself, the full
    dataset id, or a unique prefix of the id's hash (6+ hex digits, like git). One-line errors for
    no match (listing what is built) and for an ambiguous prefix (listing the candidates)."""
    if ref in named:
        return ref
    matches = [n for n, i in named.items() if i == ref] or [
        n for n, i in named.items() if i and matches_id_prefix(ref, i)
    ]
    if len(matches) > 1:
        raise BadInput(f"{ref!r} is ambiguous: {', '.join(named[n] for n in matches)}")
    if not matches:
        known = ", ".join(f"{n} ({i})" if i else n for n, i in named.items()) or "nothing built"
        raise BadInput(f"no {what} {ref!r}{where} (known: {known})")
    return matches[0]


def docs_table() -> str:
    """The dataset kinds' table of docs/exploring.md: each kind, where it lives, its names."""
    lines = [
        "| kind | built by | in the lake | id | `tracelake sql` view | `tracelake diff` name | a row is |",
        "|---|---|---|---|---|---|---|",
    ]
    for k in KINDS:
        scale = "<scale>" if k.per_scale else ""
        where = k.home(Lake("lake"), scale).as_posix() + "/"
        ident = f"`{k.id_prefix}-<rows>-<hex>`" if k.id_prefix else f"`{k.name}-<version>`"
        row = "a trajectory (a copy, where upsampled)" if k.per_trajectory else "a task"
        lines.append(
            f"| `{k.name}` | `{k.building_stage(scale)}` | `{where}` | {ident} | `{k.view.format(scale=scale)}` "
            f"| `{k.named(scale)}` | {row} |"
        )
    return "\n".join(lines)


DOCS = DocTable("dataset kinds", "tracelake.core.datasets", "docs/exploring.md", docs_table)

if __name__ == "__main__":
    sys.exit(DOCS.main())
