"""Any OpenAI-compatible chat endpoint (`POST {base_url}/chat/completions`): a hosted API or `vllm serve`.

- Requests run on `concurrency` threads, under optional requests/min and tokens/min limits.
- Retries, with exponential backoff and jitter, only on 429, 5xx, timeouts and dropped connections;
  a `Retry-After` header sets the wait (and pauses every thread: the limit is the endpoint's).
- 401, 403 and 404 stop the run with one line (a refused key, an unknown model or endpoint: no
  retry can fix them); another 4xx fails that request only, with its reason (e.g. a prompt over the
  model's context).
"""

from __future__ import annotations

import email.utils
import random
import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Iterable, Iterator

import httpx

from tracelake.core.errors import BadInput
from tracelake.curate.scoring.engines import Answer, Engine, Failure, GenRequest, Sample

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
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def backoff_seconds(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """base * 2^attempt, capped, times a jitter in [0.5, 1.5)."""
    return min(cap, base * (2**attempt)) * (0.5 + rng.random())


class OpenAIEngine(Engine):
    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None,
        api_key_env: str | None,
        concurrency: int,
        requests_per_minute: int | None,
        tokens_per_minute: int | None,
        timeout_s: float,
        max_retries: int,
        backoff_s: float,
        max_backoff_s: float,
    ):
        super().__init__()
        self.base_url = base_url.rstrip("/")
        self.label = f"openai {self.base_url} ({model})"
        self.model, self.api_key, self.api_key_env = model, api_key, api_key_env
        self.concurrency, self.timeout_s = concurrency, float(timeout_s)
        self.max_retries, self.backoff_s, self.max_backoff_s = max_retries, float(backoff_s), float(max_backoff_s)
        self.rpm, self.tpm = requests_per_minute, tokens_per_minute
        self._stop = threading.Event()
        self._rng = random.Random()
        self._lock = threading.Lock()

    # --- the pool ---------------------------------------------------------------------------

    def answers(self, requests: Iterable[GenRequest]) -> Iterator[Answer | Failure]:
        self._stop.clear()
        limiter = RateLimiter(self.rpm, self.tpm, self._stop)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        client = httpx.Client(
            headers=headers,
            timeout=self.timeout_s,
            limits=httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency),
        )
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

    def _ask(self, client: httpx.Client, limiter: RateLimiter, request: GenRequest) -> Answer | Failure:
        body = self._body(request)
        estimate = sum(len(str(m.get("content", ""))) for m in request.messages) // 4 + request.max_tokens * request.n
        reason, detail = "cancelled", ""
        for attempt in range(self.max_retries + 1):
            if self._stop.is_set():
                break
            if attempt:
                with self._lock:
                    self.usage.retries[reason] = self.usage.retries.get(reason, 0) + 1
            limiter.acquire(estimate)
            wait_s: float | None = None
            try:
                with self._lock:
                    self.usage.calls += 1
                response = client.post(f"{self.base_url}/chat/completions", json=body)
            except httpx.TimeoutException as e:
                reason, detail = "timeout", f"no answer in {self.timeout_s:g} s ({type(e).__name__})"
            except httpx.TransportError as e:
                reason, detail = "connection_error", f"{type(e).__name__}: {e}"
            else:
                status = response.status_code
                if status == 200:
                    return self._parse(request, response)
                message = _error_message(response)
                if status in FATAL_STATUS:
                    key = f" in ${self.api_key_env}" if status in (401, 403) and self.api_key_env else ""
                    raise BadInput(
                        f"score.model: {self.base_url} {FATAL_STATUS[status]}{key} "
                        f"({status} {response.reason_phrase}: {message})"
                    )
                reason, detail = f"http_{status}", message
                if status not in RETRIED_STATUS:
                    return Failure(request.key, reason, detail)
                wait_s = retry_after_seconds(response.headers.get("retry-after"))
                if wait_s is not None:
                    limiter.pause(wait_s)
            if attempt == self.max_retries:
                break
            if wait_s is None:
                wait_s = backoff_seconds(attempt, self.backoff_s, self.max_backoff_s, self._rng)
            self._stop.wait(wait_s)
        if reason != "cancelled":
            detail = f"{detail} (after {self.max_retries} retries)"
        return Failure(request.key, reason, detail)

    def _parse(self, request: GenRequest, response: httpx.Response) -> Answer | Failure:
        try:
            data = response.json()
            choices = sorted(data["choices"], key=lambda c: c.get("index", 0))
            usage = data.get("usage") or {}
            prompt_tokens = usage.get("prompt_tokens")
            completion = usage.get("completion_tokens")
            samples = [
                Sample(
                    text=(c.get("message") or {}).get("content") or "",
                    finish_reason=c.get("finish_reason"),
                    prompt_tokens=prompt_tokens,
                    # usage counts all n answers together: per answer only when n == 1
                    completion_tokens=completion if len(choices) == 1 else None,
                )
                for c in choices
            ]
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            return Failure(request.key, "bad_response", f"not a chat completion ({type(e).__name__}: {e})")
        if len(samples) != request.n:
            return Failure(request.key, "bad_response", f"asked for {request.n} answers, got {len(samples)}")
        with self._lock:
            self.usage.input_tokens += prompt_tokens or 0
            self.usage.output_tokens += completion or 0
        return Answer(request.key, samples)


def _error_message(response: httpx.Response) -> str:
    """The endpoint's own error message, on one line."""
    try:
        data = response.json()
        error = data.get("error", data) if isinstance(data, dict) else data
        message = error.get("message", error) if isinstance(error, dict) else error
        text = str(message)
    except ValueError:
        text = response.text
    return " ".join(text.split())[:300] or "(no message)"
