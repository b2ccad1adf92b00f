"""The scorer interfaces and the built-in scorers, without any engine: BUILTIN_SCORERS is the one
registry of their names, which params.yaml's `score` is checked against (curate/score_params.py).
Running them, the score cache and imported scores are in runs.py; model answers, their cache and the
engines in answers.py and engines/.

A scorer turns each task into one *request* (the exact text it looks at). A `Scorer` turns each
request into a float itself (the model-free proxy). A `ModelScorer` renders a chat prompt per
request from its versioned prompt file (scoring/prompts/<name>.yaml); an engine answers it (vLLM,
transformers, an OpenAI-compatible server) and the scorer turns the answers into the score.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Union

import orjson
import yaml

from tracelake.core.assets import asset_dir, sql
from tracelake.core.hashing import canonical_json, content_id, sha256_bytes

if TYPE_CHECKING:
    import duckdb


@dataclass(frozen=True)
class ScoreRequest:
    task_id: str
    prompt: str  # the exact input the scorer looks at; its sha256 is part of the cache key

    def key(self, kind: str, scorer: str, model: str | None, sampling: Any) -> tuple[str, str]:
        """(its content id as a `kind` id, its prompt's sha256): what a score or an answer of it is
        cached under, the task, scorer, model, prompt and sampling."""
        prompt_sha = sha256_bytes(self.prompt.encode())
        fields = {
            "task_id": self.task_id,
            "scorer": scorer,
            "model": model,
            "prompt_sha256": prompt_sha,
            "sampling": sampling,
        }
        return content_id(kind, fields), prompt_sha


class Scorer(ABC):
    """One versioned way of scoring tasks. `name` must change whenever the scores would."""

    name: str
    model: str | None = None

    @abstractmethod
    def requests(self, con: duckdb.DuckDBPyConnection) -> list[ScoreRequest]:
        """One request per task to score, from the views `trajectories` and `tasks`."""

    @abstractmethod
    def score_batch(self, requests: list[ScoreRequest]) -> list[float]:
        """Scores for `requests`, in order. Called only for requests the cache does not hold."""


class ResponseLengthProxy(Scorer):
    """response_length_proxy_v1: mean characters per assistant turn of the teacher's own rollouts.

    Needs no model: the teacher's answers stand in for a cheap model's answer to the instruction.
    The request is the sorted list of trajectory ids it averages over, so any change in the
    rollouts of a task changes its key.
    """

    name = "response_length_proxy_v1"

    def __init__(self) -> None:
        self._values: dict[str, float] = {}

    def requests(self, con):
        out = []
        for task_id, ids, score in con.execute(sql("score_response_length")).fetchall():
            request = ScoreRequest(task_id, "\n".join(ids))
            self._values[_key_hash(request)] = float(score)
            out.append(request)
        return out

    def score_batch(self, requests):
        return [self._values[_key_hash(r)] for r in requests]


REQUEST_BATCH = 1024  # task instructions fetched at a time


class ModelScorer(ABC):
    """A scorer whose requests a model answers. `name` must change whenever the prompt would."""

    name: str

    def __init__(self) -> None:
        path = asset_dir("scoring") / "prompts" / f"{self.name}.yaml"
        template = yaml.safe_load(path.read_text())
        self.system: str | None = template.get("system")
        self.user: str = template["user"]

    @abstractmethod
    def requests(self, con: duckdb.DuckDBPyConnection) -> Iterator[ScoreRequest]:
        """One request per task to score, streamed (a caller keeps only the prompts it sends); its
        prompt is `render`'s messages as canonical JSON."""

    @abstractmethod
    def score(self, lengths: list[int]) -> float:
        """The score of one request from the lengths of its answers (characters or tokens)."""

    def render(self, instruction: str) -> str:
        messages = ([{"role": "system", "content": self.system}] if self.system else []) + [
            {"role": "user", "content": self.user.replace("{instruction}", instruction)}
        ]
        return canonical_json(messages).decode()

    @staticmethod
    def messages_of(prompt: str) -> list[dict[str, Any]]:
        """The chat messages a request's prompt holds."""
        return orjson.loads(prompt)


class LlmResponseLength(ModelScorer):
    """llm_response_length_v1: the recipe's task score. A cheap model answers the task's instruction;
    the score is the length of its answer (characters by default, as in the paper), the mean over
    `n` answers."""

    name = "llm_response_length_v1"

    def requests(self, con):
        tasks = con.sql(sql("score_task_instructions")).to_arrow_table()  # Arrow holds the texts compactly
        for batch in tasks.to_batches(REQUEST_BATCH):
            for task_id, instruction in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
                yield ScoreRequest(task_id, self.render(instruction))

    def score(self, lengths):
        return sum(lengths) / len(lengths)


BUILTIN_SCORERS: dict[str, Callable[[], Union[Scorer, ModelScorer]]] = {
    ResponseLengthProxy.name: ResponseLengthProxy,
    LlmResponseLength.name: LlmResponseLength,
}


def _key_hash(request: ScoreRequest) -> str:
    return sha256_bytes(request.task_id.encode() + b"\x00" + request.prompt.encode())
