"""A small OpenAI-compatible chat server on 127.0.0.1 for the model scorers' tests (a real HTTP server,
standard library only), and a proxy that answers 429 with Retry-After before forwarding.

The server's answer depends only on the request (its messages and seed), like a seeded model, so
an interrupted and resumed run must end with the same scores as an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def send_json(handler: BaseHTTPRequestHandler, status: int, data: bytes, headers=()) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    for k, v in headers:
        handler.send_header(k, v)
    handler.end_headers()
    handler.wfile.write(data)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # many clients connecting at once (benchmarks) are queued, not reset


def answer_text(messages: list[dict], seed: Any, i: int, chars: int | None = None) -> str:
    """1-40 words, or about `chars` characters (0.5x-1.5x), chosen by a hash of the request."""
    digest = hashlib.sha256(json.dumps([messages, seed, i], sort_keys=True).encode()).digest()
    if chars is None:
        return "word " * (1 + digest[0] % 40)
    return "word " * max(1, chars * (128 + digest[0]) // 256 // 5)


class LocalServer:
    """An HTTP server on 127.0.0.1 (a free port unless `_port` names one), served by a daemon
    thread; `base_url` ends in /v1 and keeps its port after `stop`, for a restart on the same one."""

    _port = 0
    httpd: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}/v1"

    def _serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = Server(("127.0.0.1", self._port), handler)
        self._port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None


class ChatServer(LocalServer):
    """POST /v1/chat/completions. `api_key`: required bearer key. `fail_marker`: a user message
    containing it gets a 400. `answer_chars`: answers of about that many characters (default: 1-40
    words). `requests` counts the chat requests it answered (any status)."""

    def __init__(
        self, api_key: str | None = None, fail_marker: str | None = None, port: int = 0, answer_chars: int | None = None
    ):
        self.api_key, self.fail_marker, self.answer_chars = api_key, fail_marker, answer_chars
        self.requests = 0
        self.answered = 0
        self._lock = threading.Lock()
        self._port = port

    def start(self) -> "ChatServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests += 1
                if server.api_key and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                    return self._send(401, {"error": {"message": "Incorrect API key provided: sk-wr**ng"}})
                user = body["messages"][-1]["content"]
                if server.fail_marker and server.fail_marker in user:
                    return self._send(400, {"error": {"message": "This model's maximum context length is 8 tokens"}})
                limit = body.get("max_completion_tokens", 10**9)
                choices = []
                for i in range(body.get("n", 1)):
                    words = answer_text(body["messages"], body.get("seed"), i, server.answer_chars).split()
                    cut = len(words) > limit
                    choices.append(
                        {
                            "index": i,
                            "finish_reason": "length" if cut else "stop",
                            "message": {"role": "assistant", "content": " ".join(words[:limit])},
                        }
                    )
                with server._lock:
                    server.answered += 1
                self._send(
                    200,
                    {
                        "choices": choices,
                        "usage": {
                            "prompt_tokens": sum(len(m["content"].split()) for m in body["messages"]),
                            "completion_tokens": sum(len(c["message"]["content"].split()) for c in choices),
                        },
                    },
                )

            def _send(self, status, payload):
                send_json(self, status, json.dumps(payload).encode())

        self._serve(Handler)
        return self


class RateLimitProxy(LocalServer):
    """Answers the first `limited` requests with 429 and `Retry-After: retry_after`, forwards the rest
    to `upstream` (a base URL ending in /v1)."""

    def __init__(self, upstream: str, limited: int, retry_after: str = "1"):
        self.upstream, self.limited, self.retry_after = upstream.rstrip("/"), limited, retry_after
        self.seen = self.refused = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                data = self.rfile.read(int(self.headers["Content-Length"]))
                with proxy._lock:
                    proxy.seen += 1
                    refuse = proxy.refused < proxy.limited
                    proxy.refused += refuse
                if refuse:
                    return self._reply(
                        429, b'{"error": {"message": "Rate limit reached"}}', [("Retry-After", proxy.retry_after)]
                    )
                path = self.path[len("/v1") :] if self.path.startswith("/v1") else self.path
                request = urllib.request.Request(
                    proxy.upstream + path,
                    data=data,
                    method="POST",
                    headers={k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")},
                )
                try:
                    with urllib.request.urlopen(request, timeout=600) as response:
                        return self._reply(response.status, response.read())
                except urllib.error.HTTPError as e:
                    return self._reply(e.code, e.read())

            def _reply(self, status, data, headers=()):
                send_json(self, status, data, headers)

        self._serve(Handler)


if __name__ == "__main__":  # python -m tests.chat_server PORT [ANSWER_CHARS]: serve until killed (benchmarks)
    import sys
    import time

    chat = ChatServer(port=int(sys.argv[1]), answer_chars=int(sys.argv[2]) if len(sys.argv) > 2 else None).start()
    print(chat.base_url, flush=True)
    while True:
        time.sleep(3600)
