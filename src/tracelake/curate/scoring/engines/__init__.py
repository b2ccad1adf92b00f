"""Engines that answer chat prompts for the model scorers: one interface, three backends.

- openai_api.py    any OpenAI-compatible chat endpoint over HTTP (a hosted API, `vllm serve`)
- local.py         vLLM's offline `LLM.generate` or transformers' `generate`, in a worker process
                   running in the environment that holds the engine (worker.py, stdlib + engine only)

An engine gets the requests the cache does not hold and yields an `Answer` or a `Failure` for each,
in any order, as they arrive: the caller stores answers as they come, so an interrupted run loses
only what was in flight.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator


@dataclass(frozen=True)
class GenRequest:
    key: str  # the request id (cache key)
    messages: list[dict[str, Any]]
    temperature: float | None
    max_tokens: int
    n: int
    seed: int | None  # this request's own seed (request_seed), or None


@dataclass(frozen=True)
class Sample:
    text: str
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None


@dataclass(frozen=True)
class Answer:
    key: str
    samples: list[Sample]


@dataclass(frozen=True)
class Failure:
    key: str
    reason: str  # snake_case: http_429, timeout, connection_error, http_400, ...
    detail: str = ""


@dataclass
class Usage:
    """What an engine spent: model calls sent (retries included) and tokens."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    retries: dict[str, int] = field(default_factory=dict)  # reason -> retries

    def record(self, result: Answer | Failure) -> None:
        """One model call's result: counted, with its tokens when it is an answer."""
        self.calls += 1
        if isinstance(result, Answer) and result.samples:
            self.input_tokens += result.samples[0].prompt_tokens or 0
            self.output_tokens += sum(s.completion_tokens or 0 for s in result.samples)


class Engine(ABC):
    """Answers chat requests. `usage` counts what it sent."""

    label: str  # for messages: "openai http://127.0.0.1:8000/v1", "vllm /models/x"

    def __init__(self) -> None:
        self.usage = Usage()

    @abstractmethod
    def answers(self, requests: Iterable[GenRequest]) -> Iterator[Answer | Failure]:
        """One Answer or Failure per request, in any order. Errors that no retry can fix (a refused
        key, an unknown model, a broken environment) raise BadInput at once."""


def request_seed(seed: int | None, key: str) -> int | None:
    """A request's own seed from the params' seed and its key: the same request samples the same
    way in any batch and any order, and two requests never share a stream."""
    if seed is None:
        return None
    return int.from_bytes(hashlib.sha256(f"{seed}:{key}".encode()).digest()[:4], "big") & 0x7FFFFFFF
