"""Any OpenAI-compatible chat endpoint (`POST {base_url}/chat/completions`): a hosted API or `vllm serve`.

- Requests run on `concurrency` threads, under optional requests/min and tokens/min limits.
- Retries, with exponential backoff and jitter, only on 429, 5xx, timeouts and dropped connections;
  a `Retry-After` header sets the wait (and pauses every thread: the limit is the endpoint's), up to
  `max_retry_after_s`: a longer one fails the task (retry_after_too_long) rather than stall the run.
- `timeout_s` is the deadline of a whole request, and a body is read up to `max_response_bytes`
  (http_deadline.py): a server dripping bytes, or sending megabytes, costs one task, not the run.
- Every field of an answer is checked against the shape the cache stores (`parse_completion`):
  a wrong one fails that task as bad_response, naming the field.
- A stop (Ctrl-C, a fatal status) cuts every connection at once: no thread outlives the run.
- 401, 403 and 404 stop the run with one line (a refused key, an unknown model or endpoint: no
  retry can fix them); another 4xx fails that request only, with its reason (e.g. a prompt over the
  model's context).
"""

from __future__ import annotations

import email.utils
import math
import random
import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import httpx
import orjson

from tracelake.core.errors import BadInput
from tracelake.curate.score_params import ModelParams
from tracelake.curate.scoring.engines import Answer, Engine, Failure, GenRequest, Sample
from tracelake.curate.scoring.engines.http_deadline import DeadlineClient, HttpReply

RETRIED_STATUS = frozenset({429, 500, 502, 503, 504, 529})
FATAL_STATUS = {401: "refused the API key", 403: "refused the API key", 404: "does not know this model or path"}


class RateLimiter:
    """Requests and tokens per minute over a sliding 60 s window, shared by all threads; and a
    pause every thread honours after a Retry-After."""

    WINDOW_S = 60.0

    def __init__(self, requests_per_minute: int | None, tokens_per_minute: int | None, stop: threading.Event):
        self.rpm, self.tpm, self.stop = requests_per_minute, tokens_per_minute, stop
        self._sent: deque[tuple[float, int]] = deque()  # (time, tokens) of each request in the window
        self._paused_until = 0.0
        self._lock = threading.Lock()

    def pause(self, seconds: float) -> None:
        with self._lock:
            self._paused_until = max(self._paused_until, time.monotonic() + seconds)

    def acquire(self, tokens: int) -> None:
        while not self.stop.is_set():
            with self._lock:
                now = time.monotonic()
                while self._sent and self._sent[0][0] <= now - self.WINDOW_S:
                    self._sent.popleft()
                wait_s = self._paused_until - now
                if wait_s <= 0 and self.rpm is not None and len(self._sent) >= self.rpm:
                    wait_s = self._sent[0][0] + self.WINDOW_S - now
                if wait_s <= 0 and self.tpm is not None and self._sent:
                    used = sum(t for _, t in self._sent)
                    if used + tokens > self.tpm:
                        wait_s = self._sent[0][0] + self.WINDOW_S - now
                if wait_s <= 0:
                    self._sent.append((now, tokens))
                    return
            self.stop.wait(min(wait_s, 1.0))


def retry_after_seconds(value: str | None) -> float | None:
    """A Retry-After header in seconds (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    if math.isnan(seconds):
        return None
    return max(0.0, seconds)


def backoff_seconds(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """base * 2^attempt, capped, times a jitter in [0.5, 1.5)."""
    return min(cap, base * (2**attempt)) * (0.5 + rng.random())


class OpenAIEngine(Engine):
    def __init__(self, model: ModelParams, api_key: str | None):
        """The endpoint, model name, limits and retries of score.model (openai); `api_key` is the value
        of its api_key_env."""
        super().__init__()
        self.base_url = model.base_url.rstrip("/")
        self.label = f"openai {self.base_url} ({model.name})"
        self.model, self.api_key, self.api_key_env = model.name, api_key, model.api_key_env
        self.concurrency, self.timeout_s = model.concurrency, float(model.timeout_s)
        self.max_retries, self.backoff_s = model.max_retries, float(model.backoff_s)
        self.max_backoff_s, self.max_retry_after_s = float(model.max_backoff_s), float(model.max_retry_after_s)
        self.rpm, self.tpm = model.requests_per_minute, model.tokens_per_minute
        self.max_response_bytes = model.max_response_bytes
        self._stop = threading.Event()
        self._rng = random.Random()
        self._lock = threading.Lock()

    # --- the pool ---------------------------------------------------------------------------

    def answers(self, requests: Iterable[GenRequest]) -> Iterator[Answer | Failure]:
        self._stop.clear()
        limiter = RateLimiter(self.rpm, self.tpm, self._stop)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        client = DeadlineClient(self.concurrency, headers)
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="tracelake-openai")
        pending = iter(requests)
        inflight: set[Future] = set()

        def fill() -> None:
            while len(inflight) < 2 * self.concurrency:
                request = next(pending, None)
                if request is None:
                    return
                inflight.add(pool.submit(self._ask, client, limiter, request))

        try:
            fill()
            while inflight:
                done, inflight = wait(inflight, return_when=FIRST_COMPLETED)
                for future in done:
                    yield future.result()  # a fatal status raises here
                fill()
        finally:
            self._stop.set()  # wakes every thread waiting on a backoff or the limiter
            client.abort()  # and every thread waiting on the endpoint
            pool.shutdown(wait=False, cancel_futures=True)
            client.close()

    # --- one request ------------------------------------------------------------------------

    def _body(self, request: GenRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": request.messages,
            "max_completion_tokens": request.max_tokens,
            "n": request.n,
        }
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.seed is not None:
            body["seed"] = request.seed
        return body

    def _ask(self, client: DeadlineClient, limiter: RateLimiter, request: GenRequest) -> Answer | Failure:
        """One request, retried as the endpoint's answers allow, until an answer or a failure."""
        body = self._body(request)
        estimate = sum(len(str(m.get("content", ""))) for m in request.messages) // 4 + request.max_tokens * request.n
        retry = _Retry("cancelled", "", None)
        for attempt in range(self.max_retries + 1):
            if self._stop.is_set():
                break
            if attempt:
                with self._lock:
                    self.usage.retries[retry.reason] = self.usage.retries.get(retry.reason, 0) + 1
            limiter.acquire(estimate)
            if self._stop.is_set():
                break
            outcome = self._send(client, request, body)
            if not isinstance(outcome, _Retry):
                return outcome
            retry = outcome
            if retry.wait_s is not None:
                limiter.pause(retry.wait_s)  # the endpoint's limit: every thread waits
            if attempt < self.max_retries:
                wait_s = retry.wait_s
                self._stop.wait(
                    backoff_seconds(attempt, self.backoff_s, self.max_backoff_s, self._rng)
                    if wait_s is None
                    else wait_s
                )
        if retry.reason == "cancelled":
            return Failure(request.key, retry.reason, retry.detail)
        return Failure(request.key, retry.reason, f"{retry.detail} (after {self.max_retries} retries)")

    def _send(self, client: DeadlineClient, request: GenRequest, body: dict) -> Answer | Failure | _Retry:
        """One try: its answer, a failure no retry can fix, or what to retry after."""
        with self._lock:
            self.usage.calls += 1
        try:
            reply = client.post_json(f"{self.base_url}/chat/completions", body, self.timeout_s, self.max_response_bytes)
        except httpx.TimeoutException as e:
            return _Retry("timeout", f"no answer in {self.timeout_s:g} s ({type(e).__name__})", None)
        except httpx.TransportError as e:
            return _Retry("connection_error", f"{type(e).__name__}: {e}", None)
        except httpx.HTTPError as e:  # an undecodable body (a Content-Encoding it does not follow)
            return Failure(request.key, "bad_response", f"body: {type(e).__name__}: {e}")
        if reply.status == 200:
            return self._parse(request, reply)
        return self._refusal(request, reply)

    def _refusal(self, request: GenRequest, reply: HttpReply) -> Failure | _Retry:
        """What a status other than 200 means: stop the run (a refused key, an unknown model), fail
        the task, or retry it (after the endpoint's Retry-After, unless that is too long)."""
        message = _error_message(reply)
        if reply.status in FATAL_STATUS:
            key = f" in ${self.api_key_env}" if reply.status in (401, 403) and self.api_key_env else ""
            raise BadInput(
                f"score.model: {self.base_url} {FATAL_STATUS[reply.status]}{key} "
                f"({reply.status} {reply.reason_phrase}: {message})"
            )
        reason = f"http_{reply.status}"
        if reply.status not in RETRIED_STATUS:
            return Failure(request.key, reason, message)
        wait_s = retry_after_seconds(reply.headers.get("retry-after"))
        if wait_s is not None and wait_s > self.max_retry_after_s:
            return Failure(
                request.key,
                "retry_after_too_long",
                f"{reason}: Retry-After {wait_s:g} s is over score.model.max_retry_after_s "
                f"{self.max_retry_after_s:g} ({message})",
            )
        return _Retry(reason, message, wait_s)

    def _parse(self, request: GenRequest, reply: HttpReply) -> Answer | Failure:
        if reply.over_cap:
            return Failure(
                request.key,
                "bad_response",
                f"body: larger than score.model.max_response_bytes ({self.max_response_bytes:,} bytes); not read further",
            )
        try:
            completion = parse_completion(_json(reply.body), request.n)
        except BadResponse as e:
            return Failure(request.key, "bad_response", str(e))
        with self._lock:
            self.usage.input_tokens += completion.prompt_tokens or 0
            self.usage.output_tokens += completion.completion_tokens or 0
        return Answer(request.key, completion.samples)


@dataclass(frozen=True)
class _Retry:
    """A try that may succeed again: why it failed, and the endpoint's Retry-After (None: back off)."""

    reason: str
    detail: str
    wait_s: float | None


class BadResponse(ValueError):
    """A 200 whose body is not the chat completion asked for: `str()` names the field and what is wrong."""


INT64_MAX = 2**63 - 1


def _json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as e:
        raise BadResponse(f"body: not JSON ({e})") from None


def _kind(value: Any) -> str:
    """What a JSON value is, for a message: `a number (12345)`, `an object`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"[:60]
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _field(parent: Any, key: str, where: str) -> Any:
    """parent[key] of a JSON object (None when absent); `where` names the object."""
    if not isinstance(parent, dict):
        raise BadResponse(f"{where}: expected an object, got {_kind(parent)}")
    return parent.get(key)


def _text(value: Any, where: str, nullable: bool) -> str | None:
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        raise BadResponse(f"{where}: expected a string{' or null' if nullable else ''}, got {_kind(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadResponse(f"{where}: not valid Unicode (a lone surrogate)") from None
    return value


def _count(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT64_MAX:
        raise BadResponse(f"{where}: expected a token count (an integer >= 0) or null, got {_kind(value)}")
    return value


@dataclass(frozen=True)
class Completion:
    samples: list[Sample]
    prompt_tokens: int | None
    completion_tokens: int | None  # of all the answers together


def parse_completion(data: Any, n: int) -> Completion:
    """The `n` answers of a chat completion, every field checked against the shape the answer cache
    stores; the first field that is not raises BadResponse naming it (`choices[0].message.content:
    expected a string or null, got a number (12345)`)."""
    choices = _field(data, "choices", "body")
    if not isinstance(choices, list):
        raise BadResponse(f"choices: expected an array, got {_kind(choices)}")
    if len(choices) != n:
        raise BadResponse(f"choices: asked for {n} answers, got {len(choices)}")
    usage = _field(data, "usage", "body")
    if usage is not None and not isinstance(usage, dict):
        raise BadResponse(f"usage: expected an object or null, got {_kind(usage)}")
    prompt_tokens = _count((usage or {}).get("prompt_tokens"), "usage.prompt_tokens")
    completion_tokens = _count((usage or {}).get("completion_tokens"), "usage.completion_tokens")
    ordered = _in_index_order(choices)
    samples = []
    for i, choice in ordered:
        message = _field(choice, "message", f"choices[{i}]")
        content = _text(_field(message, "content", f"choices[{i}].message"), f"choices[{i}].message.content", True)
        samples.append(
            Sample(
                text=content or "",
                finish_reason=_text(
                    _field(choice, "finish_reason", f"choices[{i}]"), f"choices[{i}].finish_reason", True
                ),
                prompt_tokens=prompt_tokens,
                # usage counts all n answers together: per answer only when n == 1
                completion_tokens=completion_tokens if n == 1 else None,
            )
        )
    return Completion(samples, prompt_tokens, completion_tokens)


def _in_index_order(choices: list) -> list[tuple[int, Any]]:
    """(position, choice) sorted by each choice's `index`: 0 .. n-1 once each, or absent from all."""
    indices = []
    for i, choice in enumerate(choices):
        index = _field(choice, "index", f"choices[{i}]")
        if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
            raise BadResponse(f"choices[{i}].index: expected an integer, got {_kind(index)}")
        indices.append(index)
    if all(index is None for index in indices):
        return list(enumerate(choices))
    if sorted(indices, key=lambda x: -1 if x is None else x) != list(range(len(choices))):
        raise BadResponse(f"choices[].index: expected 0 .. {len(choices) - 1} once each, got {indices}"[:200])
    return sorted(enumerate(choices), key=lambda pair: indices[pair[0]])


def _error_message(reply: HttpReply) -> str:
    """The endpoint's own error message, on one line (whatever shape its body has)."""
    try:
        data = orjson.loads(reply.body)
        error = data.get("error", data) if isinstance(data, dict) else data
        message = error.get("message", error) if isinstance(error, dict) else error
        text = str(message)
    except orjson.JSONDecodeError:
        text = reply.body[:4096].decode("utf-8", errors="replace")
    return " ".join(text.split())[:300] or "(no message)"
