"""The dataset kinds, each declared once: what a manifest's `kind` is, which stage builds it, where
it lives in the lake, its id prefix, its SQL view, the name `diff` knows it by and the params the
viewer shows, its tables and what it was built from. The diffable versions (`versions`), freshness
(`building_stage`), dataset ids, `tracelake sql`'s dataset views and the viewer's datasets follow
from KINDS; an unknown kind is an error, never a fallback to another kind's answer.

    pool        filter             <lake>/pool                    view pool              diff: pool
    selection   select@<scale>     <lake>/selections/<scale>      view selection_<scale>  diff: <scale>
    export_sft  export_sft@<scale> <lake>/exports/sft/<scale>     view sft_<scale>        diff: sft-<scale>
    export_rl   export_rl          <lake>/exports/rl              view rl_prompts         diff: rl
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

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
    per_trajectory: bool = True  # one trajectory per row: the viewer lists its rows (not the RL prompts)
    built_from: str = ""  # the manifest's `inputs` key naming what it was built from (the viewer)

    @property
    def per_scale(self) -> bool:
        return "{scale}" in self.view

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
    return {k.diff_name.format(scale=scale): d for k in KINDS for scale, d in k.built(lake).items()}


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
