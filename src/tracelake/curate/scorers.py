"""The scorer interface and the built-in scorers, without any engine: params.yaml checks
`score.scorers` against BUILTIN_SCORERS. The score cache and imported scores are in score.py.

A scorer turns each task into one *request* (the exact text it looks at) and each request into a
float; model scorers (vLLM, transformers, OpenAI-compatible servers) implement `Scorer` the same way:
`requests` renders each task's prompt, `score_batch` returns the characters of the answers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from tracelake.core.assets import sql
from tracelake.core.hashing import sha256_bytes

if TYPE_CHECKING:
    import duckdb


@dataclass(frozen=True)
class ScoreRequest:
    task_id: str
    prompt: str          # the exact input the scorer looks at; its sha256 is part of the cache key


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


BUILTIN_SCORERS: dict[str, Callable[[], Scorer]] = {ResponseLengthProxy.name: ResponseLengthProxy}


def _key_hash(request: ScoreRequest) -> str:
    return sha256_bytes(request.task_id.encode() + b"\x00" + request.prompt.encode())
