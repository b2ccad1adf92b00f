"""HTTP for the openai engine: one total deadline per request, a body read no further than a cap,
and every connection closed at once on a stop.

httpx's timeouts apply to each read: a server that sends a header line, or a byte of the body,
every second never times out. Here every socket operation of a request (connect, send, each read)
waits at most until the request's deadline: the time left is the timeout of each. The body is
streamed and reading stops past `max_bytes` (a Content-Length over it is not read at all), so a
64 MiB answer costs 4 MiB, not 64. `abort()` shuts every open socket down: a thread blocked on a
silent server returns at once, and a Ctrl-C is never held up by a read.
"""

from __future__ import annotations

import contextvars
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

# When the request this thread is sending must be over (time.monotonic()); None outside a request.
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("tracelake_http_deadline", default=None)


@dataclass(frozen=True)
class HttpReply:
    status: int
    reason_phrase: str
    headers: httpx.Headers
    body: bytearray  # at most max_bytes
    over_cap: bool  # the body (or its Content-Length) was larger than max_bytes: `body` is its start


def _time_left(timeout: float | None, error: type[Exception]) -> float | None:
    """`timeout` shortened to what is left of this request's deadline; past it, `error`."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every wait ends by its request's deadline, and that `abort` can cut."""

    def __init__(self, inner: httpcore.NetworkStream, backend: "_DeadlineBackend"):
        self._inner, self._backend = inner, backend
        backend.opened(self)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _time_left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _time_left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._backend.closed(self)
        self._inner.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None) -> httpcore.NetworkStream:
        self._backend.closed(self)
        inner = self._inner.start_tls(ssl_context, server_hostname, _time_left(timeout, httpcore.ConnectTimeout))
        return _DeadlineStream(inner, self._backend)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)

    def abort(self) -> None:
        sock = self._inner.get_extra_info("socket")
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a recv blocked in another thread
            except OSError:
                pass


class _DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's network backend with deadlines, keeping the open connections for `abort`."""

    def __init__(self, inner: httpcore.NetworkBackend):
        self._inner = inner
        self._open: set[_DeadlineStream] = set()
        self._lock = threading.Lock()
        self._aborted = False

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        if self._aborted:
            raise httpcore.ConnectError("stopped")
        timeout = _time_left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options), self)

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        timeout = _time_left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_unix_socket(path, timeout, socket_options), self)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)

    def opened(self, stream: _DeadlineStream) -> None:
        with self._lock:
            self._open.add(stream)

    def closed(self, stream: _DeadlineStream) -> None:
        with self._lock:
            self._open.discard(stream)

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            streams = list(self._open)
        for stream in streams:
            stream.abort()


class DeadlineClient:
    """POSTs JSON with a total deadline and a capped body, on up to `connections` connections."""

    def __init__(self, connections: int, headers: dict[str, str]):
        transport = httpx.HTTPTransport(
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        )
        # httpx takes no network backend: its pool (direct or through a proxy) keeps httpcore's here
        self._backend = _DeadlineBackend(transport._pool._network_backend)
        transport._pool._network_backend = self._backend
        self._client = httpx.Client(headers=headers, transport=transport)

    def post_json(self, url: str, body: Any, deadline_s: float, max_bytes: int) -> HttpReply:
        """The reply, its body read up to `max_bytes`. Raises httpx.TimeoutException when the whole
        exchange takes longer than `deadline_s`, another httpx.HTTPError when it fails."""
        token = _DEADLINE.set(time.monotonic() + deadline_s)
        try:
            with self._client.stream("POST", url, json=body, timeout=deadline_s) as response:
                data, over = _read_capped(response, max_bytes)
                return HttpReply(response.status_code, response.reason_phrase, response.headers, data, over)
        finally:
            _DEADLINE.reset(token)

    def abort(self) -> None:
        """Cut every connection now (and refuse new ones): the threads waiting on them return."""
        self._backend.abort()

    def close(self) -> None:
        self._client.close()


def _read_capped(response: httpx.Response, max_bytes: int) -> tuple[bytearray, bool]:
    """The body, or its first `max_bytes` and True when it is longer (or says it will be). A body of
    a known length is read into a buffer of that size: the body is held once, never copied."""
    declared = response.headers.get("content-length", "").strip()
    known = declared.isdigit() and "content-encoding" not in response.headers
    if declared.isdigit() and int(declared) > max_bytes:
        return bytearray(), True
    body = bytearray(int(declared)) if known else bytearray()
    size = 0
    for chunk in response.iter_bytes():
        if size + len(chunk) > max_bytes:
            return body[:size] + chunk[: max_bytes - size], True
        if size + len(chunk) <= len(body):
            body[size : size + len(chunk)] = chunk
        else:
            body[size:] = chunk
        size += len(chunk)
    del body[size:]
    return body, False
