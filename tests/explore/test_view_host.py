"""`tracelake view` answers only to its own names: a request whose Host header is another name (a page
that rebinds its own domain to 127.0.0.1, DNS rebinding) gets a 400 and nothing of the lake, on every
route. Real servers (`tracelake view` in a subprocess) over a small lake built by the real ingest, and
a fuzz of requests (paths, query strings, Host headers, methods) against them: never a 500, never
data for a foreign Host."""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ..helpers import FUZZ_EXAMPLES, run_ok, stop_process

FOREIGN = "Invalid host header"
ROUTES = [
    "/",
    "/t/{id}",
    "/compare?a={id}&b={id}",
    "/datasets",
    "/diff",
    "/export?format=jsonl",
    "/export?format=parquet",
    "/export?format=html",
    "/static/view.css",
    "/static/view.js",
    "/favicon.ico",
    "/no/such/page",
]


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Path:
    """A small lake: the sample corpus's Harbor jobs of one source, ingested."""
    root = tmp_path_factory.mktemp("view-host")
    run_ok(["tracelake", "synth", "--out", "data", "--trials", "12", "--tasks", "4"], root)
    run_ok(["tracelake", "ingest", "harbor", "data/swesmith/jobs", "-s", "swesmith", "-o", "lake"], root)
    return root / "lake"


@pytest.fixture(scope="module")
def trajectory_ids(lake) -> list[str]:
    import duckdb

    files = f"{lake}/trajectories/*/trajectories/*.parquet"
    return [r[0] for r in duckdb.connect().execute(f"SELECT trajectory_id FROM '{files}'").fetchall()]


class Server:
    """`tracelake view` in a subprocess on a free port of `host`; stopped with Ctrl-C."""

    def __init__(self, lake: Path, host: str | None):
        exe = Path(sys.executable).parent / "tracelake"
        args = [str(exe), "view", "--lake", str(lake), "--port", "0", "--no-search"]
        self.proc = subprocess.Popen(
            args + (["--host", host] if host else []),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "COLUMNS": "200"},
        )
        self.lines = [self.proc.stdout.readline()]
        while self.lines[-1] and "http://" not in self.lines[-1]:
            self.lines.append(self.proc.stdout.readline())
        assert "http://" in self.lines[-1], "".join(self.lines) + self.proc.stdout.read()
        self.address, port = self.lines[-1].split("http://")[1].split("/")[0].rsplit(":", 1)
        self.port = int(port)

    def request(
        self, path: str, host: str | None, method: str = "GET", headers: dict | None = None
    ) -> tuple[int, bytes]:
        """One request to the server's URL with this Host header (None: no Host header at all)."""
        con = http.client.HTTPConnection(self.address, self.port, timeout=30)
        try:
            con.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            if host is not None:
                con.putheader("Host", host)
            for name, value in (headers or {}).items():
                con.putheader(name, value)
            con.endheaders()
            response = con.getresponse()
            return response.status, response.read()
        finally:
            con.close()

    def stop(self) -> str:
        stop_process(self.proc, signal.SIGINT)
        return "".join(self.lines) + self.proc.stdout.read()


@pytest.fixture(scope="module")
def server(lake):
    s = Server(lake, None)
    yield s
    assert "Traceback" not in s.stop()


def _paths(ids: list[str]) -> list[str]:
    return [route.format(id=ids[0]) for route in ROUTES]


def _leaks(body: bytes, ids: list[str]) -> bool:
    return any(i.encode() in body for i in ids)


@pytest.mark.parametrize(
    "host",
    ["attacker.example", "attacker.example:{port}", "127.0.0.1.attacker.example", "localhost.", "0.0.0.0:{port}", ""],
)
def test_a_foreign_host_gets_nothing_on_any_route(server, trajectory_ids, host):
    """DNS rebinding: the attacker's page asks 127.0.0.1:P under its own name. Every route, static files
    and unknown pages included, answers 400 and nothing of the lake."""
    host = host.format(port=server.port)
    for path in _paths(trajectory_ids):
        status, body = server.request(path, host)
        assert (status, body.decode()) == (400, FOREIGN), (path, host)


def test_no_host_header_and_a_websocket_upgrade_get_nothing(server, trajectory_ids):
    status, body = server.request("/export?format=jsonl", None)
    assert status == 400 and not _leaks(body, trajectory_ids)
    upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13"}
    upgrade["Sec-WebSocket-Key"] = "dGhlIHNhbXBsZSBub25jZQ=="
    status, body = server.request("/", "attacker.example", headers=upgrade)
    assert status == 400 and not _leaks(body, trajectory_ids)


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST", "127.0.0.1"])
def test_the_servers_own_names_get_the_lake(server, trajectory_ids, host):
    status, body = server.request("/export?format=jsonl", host.format(port=server.port))
    assert status == 200 and sorted(trajectory_ids) == sorted(
        line.split(b'"trajectory_id":"')[1].split(b'"')[0].decode() for line in body.splitlines()
    )
    for path in _paths(trajectory_ids)[:-1]:
        status, _ = server.request(path, host.format(port=server.port))
        assert status in (200, 204), path


@pytest.mark.parametrize(
    ("bound", "own", "refused"),
    [
        ("127.0.0.2", ["127.0.0.2:{port}", "localhost:{port}", "127.0.0.1"], ["attacker.example", "0.0.0.0"]),
        ("0.0.0.0", ["127.0.0.1:{port}", "localhost:{port}"], ["0.0.0.0:{port}", "attacker.example", "10.1.2.3"]),
    ],
)
def test_another_bound_address_keeps_the_check(lake, trajectory_ids, bound, own, refused):
    """--host ADDR: the pages answer to ADDR, localhost and 127.0.0.1; with the wildcard 0.0.0.0 (a
    container's forwarded port) to localhost and 127.0.0.1 only, never to any name, and the command
    says that other machines can reach the lake."""
    s = Server(lake, bound)
    try:
        for host in own:
            status, body = s.request("/export?format=jsonl", host.format(port=s.port))
            assert status == 200 and _leaks(body, trajectory_ids), host
        for host in refused:
            assert s.request("/export?format=jsonl", host.format(port=s.port)) == (400, FOREIGN.encode()), host
    finally:
        out = s.stop()
    assert "Traceback" not in out
    warned = f"listening on {bound}:{s.port}: any machine that reaches this one can read the lake"
    assert (warned in out) == (bound == "0.0.0.0")


@pytest.mark.parametrize("host", ["localhost", "::1", "example.org", "127.0.0.1:80", "300.1.1.1"])
def test_a_host_that_is_not_one_ipv4_address_is_a_one_line_error(lake, host):
    exe = Path(sys.executable).parent / "tracelake"
    proc = subprocess.run(
        [str(exe), "view", "--lake", str(lake), "--port", "0", "--no-search", "--host", host],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("tracelake: view: --host ")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


# --- fuzz: random requests against the real server ------------------------------------------------------

QUERY_KEYS = ["where", "source", "task", "rule", "dataset", "q", "page", "after", "open", "format", "a", "b"]
QUERY_KEYS += ["reward_min", "reward_max", "turns_min", "turns_max", "tokens_min", "tokens_max", "timed_out"]
METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "PROPFIND"]
OWN_NAMES = {"localhost", "127.0.0.1"}
HOST_CHARS = st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789.-_:[]@%*~ ")


def _request_parts(ids: list[str]):
    value = st.one_of(
        st.text(max_size=30),
        st.sampled_from(["1", "-1", "1e309", "nan", "yes", "no", "jsonl", "html", "parquet", "pool", "1k"]),
        st.sampled_from(ids),
    )
    query = st.lists(st.tuples(st.one_of(st.sampled_from(QUERY_KEYS), st.text(max_size=8)), value), max_size=5)
    segment = st.one_of(st.sampled_from(["", "t", "static", "export", "diff", "compare", "datasets"]), st.text())
    path = st.one_of(
        st.sampled_from([route.split("?")[0].format(id=ids[0]) for route in ROUTES]),
        st.lists(segment, min_size=1, max_size=4).map(lambda parts: "/" + "/".join(quote(p, safe="") for p in parts)),
    )
    return path, query


def _foreign(host: str) -> bool:
    name = host.strip().rsplit(":", 1)[0] if host.count(":") == 1 else host.strip()
    return name.lower() not in OWN_NAMES


def _check_request(server, ids, path, query, host, method) -> None:
    target = path + ("?" + urlencode(query) if query else "")
    status, body = server.request(target, host, method)
    assert status < 500, (method, target, host, status, body[:300])
    if host is None or _foreign(host):
        assert status == 400 and not _leaks(body, ids), (method, target, host)


def _fuzz(server, ids, examples: int) -> None:
    path, query = _request_parts(ids)
    own = st.sampled_from(sorted(OWN_NAMES)).flatmap(
        lambda name: st.sampled_from([name, f"{name}:{server.port}", name.upper()])
    )
    host = st.one_of(own, st.one_of(st.none(), st.text(HOST_CHARS, max_size=40)))  # half the server's own

    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(path=path, query=query, host=host, method=st.sampled_from(METHODS))
    def run(path, query, host, method):
        _check_request(server, ids, path, query, host, method)

    run()


def test_fuzz_requests(server, trajectory_ids):
    _fuzz(server, trajectory_ids, FUZZ_EXAMPLES)


@pytest.mark.long
def test_fuzz_requests_long(server, trajectory_ids):
    _fuzz(server, trajectory_ids, 3000)
