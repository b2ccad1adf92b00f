"""The whole params.yaml: every phase's sections assembled, the checks that span sections, and the
stages' entry (`stage_args`). Loading it imports no engine (duckdb, pyarrow, tokenizers, polars).

Each stage reads only its own sections; the resolved section is what its manifest records.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, model_validator

from tracelake.core.errors import BadParams
from tracelake.core.params import Invalid, Name, Section, TokenizerParams, read_yaml, validated
from tracelake.curate.params import (
    DecontaminateParams,
    DedupParams,
    FilterParams,
    MixParams,
    ScoreParams,
    SelectParams,
)
from tracelake.export.params import ExportRlParams, ExportSftParams, TrainParams
from tracelake.ingest.params import IngestParams, SourceParams
from tracelake.sample.params import SynthParams


def _lake(value: Any) -> Any:
    if not isinstance(value, str) or not value:
        raise Invalid("must be a directory path")
    return value


def _sources(value: Any) -> Any:
    if not isinstance(value, dict) or not value:
        raise Invalid("must map at least one source name to its settings")
    return value


class Params(Section):
    lake: Annotated[str, BeforeValidator(_lake)] = "lake"
    synth: SynthParams = Field(default_factory=SynthParams)
    ingest: IngestParams = Field(default_factory=IngestParams)
    sources: Annotated[dict[Name, SourceParams], BeforeValidator(_sources)]
    tokenizer: TokenizerParams = Field(default_factory=TokenizerParams)
    score: ScoreParams = Field(default_factory=ScoreParams)
    dedup: DedupParams = Field(default_factory=DedupParams)
    decontaminate: DecontaminateParams = Field(default_factory=DecontaminateParams)
    filter: FilterParams = Field(default_factory=FilterParams)
    mix: MixParams = Field(default_factory=MixParams)
    select: SelectParams = Field(default_factory=SelectParams)
    export_sft: ExportSftParams = Field(default_factory=ExportSftParams)
    export_rl: ExportRlParams = Field(default_factory=ExportRlParams)
    train: TrainParams = Field(default_factory=TrainParams)

    def section(self, name: str) -> Any:
        """One section as plain data (what a stage's manifest records, what dataset ids hash)."""
        value = getattr(self, name)
        if name == "sources":
            return {k: v.model_dump() for k, v in value.items()}
        return value.model_dump() if isinstance(value, Section) else value

    # --- checks across sections -----------------------------------------------------------

    @model_validator(mode="after")
    def _mix_draws_on_sources(self) -> Params:
        mix = self.mix
        if mix.sources != "all":
            for name in mix.sources:
                if name not in self.sources:
                    raise Invalid(f": no source {name!r} under sources", at=("mix", "sources"))
        mixed = list(self.sources) if mix.sources == "all" else mix.sources
        for name in mix.weights:
            if name not in mixed:
                raise Invalid(f": not a mixed source ({', '.join(mixed)})", at=("mix", "weights", name))
        if mix.top_k is not None and mix.top_k > len(mixed):
            raise Invalid(f"must be between 1 and {len(mixed)}, got {mix.top_k}", at=("mix", "top_k"))
        return self

    @model_validator(mode="after")
    def _select_uses_a_configured_scorer(self) -> Params:
        known = [*self.score.scorers, *self.score.imports]
        if self.select.score not in known:
            raise Invalid(f": {self.select.score!r} is not a configured scorer "
                          f"({', '.join(known) or 'none'})", at=("select", "score"))
        return self

    @model_validator(mode="after")
    def _dedup_names_sources(self) -> Params:
        for name in self.dedup.per_source:
            if name not in self.sources:
                raise Invalid(f": no source {name!r} under sources", at=("dedup", "per_source", name))
        return self

    @model_validator(mode="after")
    def _export_rl_draws_on_sources(self) -> Params:
        rl = self.export_rl.sources
        if rl != "all" and any(name not in self.sources for name in rl):
            raise Invalid(f'must be "all" or a list of source names ({", ".join(self.sources)}), got {rl!r}',
                          at=("export_rl", "sources"))
        return self


def parse_params(data: Any) -> Params:
    if not isinstance(data, dict):
        raise BadParams("params.yaml must be a mapping")
    return validated(Params, data)


def load_params(path: Path | str = "params.yaml") -> Params:
    return parse_params(read_yaml(path))


def stage_args(doc: str | None, argv: list[str] | None, key: str | None = None) -> tuple[Params, str | None]:
    """Parse `[KEY] [--params FILE]` and load params.yaml (checked whole, before any work).

    `key` names the stage's positional argument (a `foreach` key such as the source or the scale).
    """
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if key:
        parser.add_argument(key)
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args(argv)
    return load_params(args.params), getattr(args, key) if key else None
