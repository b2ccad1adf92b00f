"""params.yaml `synth`: the embedded sample corpus (stage `synth`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from tracelake.core.params import Section


class SynthParams(Section):
    seed: int = 0
    trials: Annotated[int, Field(ge=1)] = 2000  # trial directories / trace rows over all sources
    tasks: Annotated[int, Field(ge=1)] = 300  # task directories over all sources
    out: str = "data/sample"


SECTIONS: dict[str, tuple[Any, Any]] = {"synth": (SynthParams, Field(default_factory=SynthParams))}
