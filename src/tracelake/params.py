"""params.yaml, whole or in part: each top-level section is declared once, in the params module of
the phase that owns it (`SECTION_HOMES`), and loaded only where it is needed. A stage loads the
sections it declares (stages/), so it imports, and depends on, the params code of those sections
only; `load_params()` with no sections loads the whole file (the CLI, `python -m stages check`).

Whichever sections are loaded, the file's top-level keys are checked against every known section
(a misspelled `filtr:` stops any stage), and each loaded section is checked whole: an unknown key
inside it stops the stage with one line naming the key. The checks that span sections run when
every section they read is loaded. Loading imports no engine (duckdb, pyarrow, tokenizers, polars).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable, Iterable

from pydantic import create_model, model_validator

from tracelake.core.errors import BadParams
from tracelake.core.params import MAX_INT, Invalid, Section, huge_integer, read_yaml, validated

# Top-level section -> the module that declares it (its SECTIONS maps the name to (type, default)).
# In file order: pydantic reports the first error in this order.
SECTION_HOMES: dict[str, str] = {
    "lake": "tracelake.core.params",
    "executor": "tracelake.core.params",
    "synth": "tracelake.sample.params",
    "ingest": "tracelake.ingest.params",
    "sources": "tracelake.ingest.params",
    "tokenizer": "tracelake.core.params",
    "score": "tracelake.curate.score_params",
    "dedup": "tracelake.curate.params",
    "decontaminate": "tracelake.curate.params",
    "filter": "tracelake.curate.filter_params",
    "mix": "tracelake.curate.params",
    "select": "tracelake.curate.params",
    "scales": "tracelake.curate.params",
    "export_sft": "tracelake.export.params",
    "export_rl": "tracelake.export.params",
    "train": "tracelake.export.params",
}


class Params(Section):
    """Some or all sections of params.yaml, as loaded; a section not loaded is not an attribute."""

    def section(self, name: str) -> Any:
        """One section as plain data (what a stage's manifest records, what dataset ids hash)."""
        value = getattr(self, name)
        if isinstance(value, dict):
            return {k: v.model_dump() if isinstance(v, Section) else v for k, v in value.items()}
        return value.model_dump() if isinstance(value, Section) else value


# --- checks across sections: (the sections they read, the check) ----------------------------------


def _mix_draws_on_sources(p: Any) -> None:
    mix = p.mix
    if mix.sources != "all":
        for name in mix.sources:
            if name not in p.sources:
                raise Invalid(f": no source {name!r} under sources", at=("mix", "sources"))
    mixed = list(p.sources) if mix.sources == "all" else mix.sources
    for name in mix.weights:
        if name not in mixed:
            raise Invalid(f": not a mixed source ({', '.join(mixed)})", at=("mix", "weights", name))
    if mix.top_k is not None and mix.top_k > len(mixed):
        raise Invalid(f"must be between 1 and {len(mixed)}, got {mix.top_k}", at=("mix", "top_k"))


def _select_uses_a_configured_scorer(p: Any) -> None:
    known = [*p.score.scorers, *p.score.imports]
    if p.select.score not in known:
        raise Invalid(
            f": {p.select.score!r} is not a configured scorer ({', '.join(known) or 'none'})", at=("select", "score")
        )


def _dedup_names_sources(p: Any) -> None:
    for name in p.dedup.per_source:
        if name not in p.sources:
            raise Invalid(f": no source {name!r} under sources", at=("dedup", "per_source", name))


def _export_rl_draws_on_sources(p: Any) -> None:
    rl = p.export_rl.sources
    if rl != "all" and any(name not in p.sources for name in rl):
        raise Invalid(
            f'must be "all" or a list of source names ({", ".join(p.sources)}), got {rl!r}', at=("export_rl", "sources")
        )


def _export_rl_pick_names_what_exists(p: Any) -> None:
    pick = p.export_rl.pick
    known = [*p.score.scorers, *p.score.imports]
    if pick.score is not None and pick.score not in known:
        raise Invalid(
            f": {pick.score!r} is not a configured scorer ({', '.join(known) or 'none'})",
            at=("export_rl", "pick", "score"),
        )
    exported = list(p.sources) if p.export_rl.sources == "all" else p.export_rl.sources
    for name in pick.weights:
        if name not in exported:
            raise Invalid(
                f": not an exported source ({', '.join(exported)})", at=("export_rl", "pick", "weights", name)
            )


def _filter_keeps_what_fits(p: Any) -> None:
    """The filter's length limit is the trainer's: a row the pool keeps is a row export_sft exports
    (both count LLaMA-Factory's rendering, tokens/rendering.py), so a dataset of N rows has N rows."""
    limit, cutoff = p.filter.max_tokens, p.train.sft.example_limit
    if p.filter.count_tokens and (limit is None or limit > cutoff):
        what = (
            f"train.sft.cutoff_len - 1 ({cutoff}, packing)"
            if p.train.sft.packing
            else f"train.sft.cutoff_len ({cutoff})"
        )
        raise Invalid(
            f"{limit if limit is not None else 'null'} lets rows longer than {what} into "
            f"the pool: export_sft would reject them and a dataset would have fewer rows than its scale; "
            f"set it to at most {cutoff}",
            at=("filter", "max_tokens"),
        )


CHECKS: list[tuple[tuple[str, ...], Callable[[Any], None]]] = [
    (("filter", "train"), _filter_keeps_what_fits),
    (("mix", "sources"), _mix_draws_on_sources),
    (("select", "score"), _select_uses_a_configured_scorer),
    (("dedup", "sources"), _dedup_names_sources),
    (("export_rl", "sources"), _export_rl_draws_on_sources),
    (("export_rl", "score", "sources"), _export_rl_pick_names_what_exists),
]


# --- loading ----------------------------------------------------------------------------------------


def section_root(entry: str) -> str:
    """The top-level section of a params entry: `filter`, `train.sft.template` -> `train`."""
    return entry.split(".", 1)[0]


def _model(sections: tuple[str, ...]) -> type[Params]:
    fields = {}
    for name in SECTION_HOMES:
        if name in sections:
            fields[name] = importlib.import_module(SECTION_HOMES[name]).SECTIONS[name]
    validators = {}
    for needs, check in CHECKS:
        if set(needs) <= set(sections):
            validators[check.__name__] = model_validator(mode="after")(_after(check))
    return create_model("Params", __base__=Params, __validators__=validators, **fields)


def _after(check: Callable[[Any], None]) -> Callable[[Any], Any]:
    def run(self: Any) -> Any:
        check(self)
        return self

    run.__name__ = check.__name__
    return run


def parse_params(data: Any, sections: Iterable[str] | None = None) -> Params:
    """`data` (params.yaml as read) checked and typed: `sections` (top-level names, or entries such as
    `train.sft.template`, whose whole section is loaded), or every section."""
    if not isinstance(data, dict):
        raise BadParams("params.yaml must be a mapping")
    for key in data:
        if key not in SECTION_HOMES:
            raise BadParams(f"params.yaml: unknown top-level key {key!r} (known: {', '.join(SECTION_HOMES)})")
    huge = huge_integer(data)
    if huge is not None:
        raise BadParams(f"params.yaml: {huge} is beyond a 64-bit integer (at most {MAX_INT:,})")
    wanted = tuple(SECTION_HOMES) if sections is None else tuple(dict.fromkeys(section_root(s) for s in sections))
    for name in wanted:
        if name not in SECTION_HOMES:
            raise ValueError(f"{name!r} is not a section of params.yaml")
    return validated(_model(wanted), {k: v for k, v in data.items() if k in wanted})


def load_params(path: Path | str = "params.yaml", sections: Iterable[str] | None = None) -> Params:
    return parse_params(read_yaml(path), sections)
