"""params.yaml `score` (stage score, `tracelake score`): which scorers run, the model behind the
model scorers, imported score columns. Its own module, beside the scorers it names: the stages that
read `score` depend on the scorers' registry, no other stage does (tracelake/params.py).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from tracelake.core.params import CheckedAs, Invalid, Number, Section
from tracelake.curate.scoring.scorers import BUILTIN_SCORERS as BUILTIN
from tracelake.curate.scoring.scorers import ModelScorer

_SCORER = re.compile(r"^[a-z0-9_]+_v[0-9]+$")

# The built-in scorers by name, from their one registry (curate/scoring/scorers.py, engine-free); a
# model scorer needs score.model
BUILTIN_SCORERS = tuple(BUILTIN)
MODEL_SCORERS = tuple(name for name, scorer in BUILTIN.items() if issubclass(scorer, ModelScorer))


class ImportParams(Section):
    """A column of precomputed scores in a user's own Parquet file, imported as a scorer."""

    path: str
    score: str  # column holding the score
    task: str | None = None  # column holding task names (matched on the base name)
    task_id: str | None = None  # or: column holding tracelake task ids
    source: str | None = None  # optional column restricting a name to one source
    model: str | None = None  # recorded in the scores table

    @model_validator(mode="after")
    def _one_way_to_match(self) -> ImportParams:
        if (self.task is None) == (self.task_id is None):
            raise Invalid("needs exactly one of task (a column of task names) or task_id (a column of task ids)")
        return self


def _scorer_name(name: Any) -> Any:
    if not isinstance(name, str) or not _SCORER.match(name):
        raise Invalid(": a scorer name is snake_case ending in a version, e.g. difficulty_v1", at=(name,))
    if name in BUILTIN_SCORERS:
        raise Invalid("shadows a built-in scorer", at=(name,))
    return name


ScorerName = Annotated[str, BeforeValidator(_scorer_name)]


class ModelParams(Section):
    """The model behind the model scorers (score.model): which engine, which model, how to sample.

    The cache key of an answer is (task, scorer, model name, sha256 of the rendered prompt, and the
    sampling keys: temperature, max_tokens, seed, n); every other key changes how answers are
    fetched, never which answers are kept.
    """

    backend: Literal["openai", "vllm", "transformers"] = "openai"
    name: Annotated[str, Field(min_length=1)]  # the model id: sent to the endpoint, recorded in scores
    path: str | None = None  # vllm, transformers: local model directory (default: name)
    python: str | None = None  # vllm, transformers: interpreter of the environment holding the engine
    # sampling (part of the cache key)
    temperature: Annotated[Number | None, Field(ge=0)] = 1.0  # null: the endpoint's default
    max_tokens: Annotated[int, Field(ge=1)] = 4096  # an answer cut here is marked censored
    seed: int | None = 0  # each request samples with a seed drawn from this and its key
    n: Annotated[int, Field(ge=1)] = 1  # answers per task; the score averages them
    score_by: Literal["chars", "tokens"] = "chars"  # chars: the recipe's len(response)
    # openai: any OpenAI-compatible chat endpoint
    base_url: str = "https://api.openai.com/v1"
    api_key_env: str | None = "OPENAI_API_KEY"  # the variable holding the key (never written anywhere)
    concurrency: Annotated[int, Field(ge=1)] = 16
    requests_per_minute: Annotated[int | None, Field(ge=1)] = None
    tokens_per_minute: Annotated[int | None, Field(ge=1)] = None
    timeout_s: Annotated[Number, Field(gt=0)] = 300  # the whole request (connect, headers, body), not each read
    max_retries: Annotated[int, Field(ge=0)] = 8  # on 429, 5xx, timeouts and dropped connections only
    backoff_s: Annotated[Number, Field(ge=0)] = 1.0  # first retry wait, doubled each time, with jitter
    max_backoff_s: Annotated[Number, Field(ge=0)] = 60  # (a Retry-After header wins)
    # a longer Retry-After fails the task at once (retry_after_too_long) instead of waiting
    max_retry_after_s: Annotated[Number, Field(ge=0, le=86400)] = 120
    # a larger response body is read no further: the task fails as bad_response
    max_response_bytes: Annotated[int, Field(ge=1 << 16, le=1 << 30)] = 4 << 20
    price_input_per_million: Annotated[Number | None, Field(ge=0)] = None  # for the cost estimate
    price_output_per_million: Annotated[Number | None, Field(ge=0)] = None
    # vllm, transformers
    batch_size: Annotated[int, Field(ge=1)] = 64  # requests per generate call (answers stored after each)
    max_model_len: Annotated[int | None, Field(ge=1)] = None  # context length (default: the model's)

    def sampling(self) -> dict[str, Any]:
        """The keys that decide which answers a request gets (part of every cache key)."""
        return {"temperature": self.temperature, "max_tokens": self.max_tokens, "seed": self.seed, "n": self.n}


class ScoreModalParams(Section):
    """`tracelake score --backend modal`: the vllm engine on a Modal GPU (scoring/modal_app.py). Where
    answers come from changes nothing they are keyed by: not a parameter of the score stage."""

    app: str = "tracelake-score"
    gpu: str = "H100:1"
    timeout_hours: Annotated[int, Field(ge=1)] = 4
    volume: str = "tracelake-scoring"  # model directories by content hash (uploaded once) and the hub cache
    image_python: str = "3.12"
    vllm: str = "0.32.0"  # the vllm release the GPU image installs


class ScoreParams(Section):
    scorers: list[str] = Field(default_factory=lambda: ["response_length_proxy_v1"])
    # checked as ImportParams, kept as written: stages/score.py reads them, the manifest records them
    imports: Annotated[dict[str, dict[str, Any]], CheckedAs(dict[ScorerName, ImportParams])] = Field(
        default_factory=dict
    )
    model: ModelParams | None = None  # needed by the model scorers (llm_response_length_v1)
    max_failures: Annotated[int, Field(ge=0)] = 0  # tasks a model scorer may fail after retries
    modal: ScoreModalParams = Field(default_factory=ScoreModalParams)  # tracelake score --backend modal
    cache: str = ".tracelake/cache/scores"

    @field_validator("scorers")
    @classmethod
    def _built_in(cls, scorers: list[str]) -> list[str]:
        for name in scorers:
            if name not in BUILTIN_SCORERS:
                raise Invalid(
                    f": unknown scorer {name!r} (built in: {', '.join(BUILTIN_SCORERS)}; import "
                    f"others under score.imports)"
                )
        return scorers

    @model_validator(mode="after")
    def _model_for_model_scorers(self) -> ScoreParams:
        needing = [name for name in self.scorers if name in MODEL_SCORERS]
        if needing and self.model is None:
            raise Invalid(f": {needing[0]} needs a score.model block (backend, name: see params.yaml)", at=("scorers",))
        return self


SECTIONS: dict[str, tuple[Any, Any]] = {"score": (ScoreParams, Field(default_factory=ScoreParams))}
