"""A hostile OpenAI-compatible server on 127.0.0.1 for the model scorers' tests: raw sockets, so a
reply can be anything a broken or malicious endpoint sends. Wrong types in every field, any status
and headers (a Retry-After of a day), a body cut short, headers or a body dripped a byte at a time,
answers of many megabytes streamed without ever being held whole.

`HostileServer(reply)` calls `reply(index, body)` for each request (its order of arrival and its
parsed JSON body) and sends the `Reply` it returns. Each connection serves one request and closes.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

REASONS = {200: "OK", 400: "Bad Request", 429: "Too Many Requests", 500: "Internal Server Error"}


@dataclass
class Reply:
    """One HTTP response. `body` is bytes or an iterable of byte chunks (sent as they come: a big
    body is never whole in memory); `length` is the Content-Length sent (default: the body's size
    when it is bytes; a larger one with a shorter body is a body cut short; None with an iterable
    body: no Content-Length, the body ends when the connection closes). `header_drip_s`: a pause
    after each header line; `body_drip_s`: a pause after each `drip_bytes` of the body."""

    status: int = 200
    body: bytes | Iterable[bytes] = b""
    headers: list[tuple[str, str]] = field(default_factory=list)
    length: int | None = -1  # -1: len(body)
    header_drip_s: float = 0.0
    body_drip_s: float = 0.0
    drip_bytes: int = 1


def json_reply(payload: Any, status: int = 200, headers: list[tuple[str, str]] = (), **kw) -> Reply:
    return Reply(status, json.dumps(payload).encode(), [("Content-Type", "application/json"), *headers], **kw)


def completion(content: Any = "ok", finish_reason: Any = "stop", usage: Any = None, n: int = 1) -> dict:
    """A chat completion with `n` choices of the given fields (any JSON value: the point is to send
    wrong ones)."""
    choice = {"message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}
    choices = [{"index": i, **choice} for i in range(n)]
    return {"choices": choices, "usage": {"prompt_tokens": 3, "completion_tokens": 1} if usage is None else usage}


def big_completion(text_bytes: int, chunk: int = 1 << 20) -> Reply:
    """A valid completion whose answer is `text_bytes` characters, streamed in `chunk`-byte pieces
    with its exact Content-Length."""
    head = b'{"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "'
    tail = b'"}}], "usage": {"prompt_tokens": 3, "completion_tokens": 9}}'

    def pieces() -> Iterator[bytes]:
        yield head
        block = b"word " * (chunk // 5)
        left = text_bytes
        while left > 0:
            yield block[:left]
            left -= len(block)
        yield tail

    return Reply(200, pieces(), [("Content-Type", "application/json")], length=len(head) + text_bytes + len(tail))


class HostileServer:
    """Serves `reply(index, request_body)` to every POST. `requests` counts the requests read,
    `replied` the replies sent to the end."""

    def __init__(self, reply: Callable[[int, dict], Reply]):
        self.reply = reply
        self.requests = self.replied = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0), backlog=256)
        self._sock.settimeout(0.2)
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"

    def stop(self) -> None:
        self._stop.set()
        self._sock.close()

    def __enter__(self) -> "HostileServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            with conn:
                body = _read_request(conn)
                if body is None:
                    return
                with self._lock:
                    index = self.requests
                    self.requests += 1
                self._send(conn, self.reply(index, body))
                with self._lock:
                    self.replied += 1
        except OSError:  # the client gave up (a deadline, a cap, Ctrl-C): that is the point
            pass

    def _pause(self, seconds: float) -> None:
        if seconds and self._stop.wait(seconds):
            raise OSError("server stopped")

    def _send(self, conn: socket.socket, reply: Reply) -> None:
        length = len(reply.body) if reply.length == -1 else reply.length
        lines = [f"HTTP/1.1 {reply.status} {REASONS.get(reply.status, 'Whatever')}", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in reply.headers]
        if length is not None:
            lines.append(f"Content-Length: {length}")
        for line in lines:
            conn.sendall(line.encode("latin-1") + b"\r\n")
            self._pause(reply.header_drip_s)
        conn.sendall(b"\r\n")
        chunks = [reply.body] if isinstance(reply.body, bytes) else reply.body
        for chunk in chunks:
            if not reply.body_drip_s:
                conn.sendall(chunk)
                continue
            for start in range(0, len(chunk), reply.drip_bytes):
                conn.sendall(chunk[start : start + reply.drip_bytes])
                self._pause(reply.body_drip_s)


def _read_request(conn: socket.socket) -> dict | None:
    """The JSON body of one HTTP/1.1 request (None when the client closed first)."""
    conn.settimeout(30)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        rest += chunk
    conn.settimeout(None)
    return json.loads(rest[:length] or b"{}")


def wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll until `predicate()` holds (a test's view of a server in another thread or process)."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)
