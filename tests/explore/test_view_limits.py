"""`tracelake view` under hostile requests and hostile data, on the real app (create_app over a real
LakeView, DuckDB and the LanceDB search index) over a small lake built by the real ingest:

- every request finishes within a stated bound, whatever its URL: hostile-sized searches (30,000
  words, a 1 MB word), thousands of facet parameters, WHERE boxes that ask DuckDB for minutes of work,
  LIKE and regex metacharacters, unicode: each answered with a clear status in about
  db.REQUEST_SECONDS (limits.py refuses the oversized ones before any work, db.py stops the rest);
- a request another site's page made (an image, a script's fetch, a frame) is refused, 403;
- every response, errors and refusals included, carries the same security headers;
- task names, source names, messages and git subjects holding ESC, OSC, BEL and C1 controls reach no
  page and no exported HTML file as raw control characters;
- a lake whose output directory a rebuild took away is answered 503, "the lake is being rebuilt".

Requests go to the ASGI app directly (`_get`): the oversized ones are larger than an HTTP client
library sends, and the app is what bounds them (uvicorn refuses a request head over 16 KiB itself).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import quote, unquote, urlencode

import pytest

from tracelake.explore.view import limits
from tracelake.explore.view.app import HEADERS, create_app
from tracelake.explore.view.db import REQUEST_SECONDS, LakeView

from ..helpers import make_trial, run_ok, simple_trajectory

BOUND = REQUEST_SECONDS + 3.0  # wall seconds a request may take: its budget, and a busy machine's slack
RAW_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x80-\x9f]")  # C0 but \t \n \r, DEL, C1
OSC8 = "\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\"
OSC0 = "\x1b]0;pwned\x07"
HOSTILE = f"{OSC8} {OSC0} csi \x9b31m c1 \x85\x90 nul \x00 del \x7f bs \x08 \x1b[2J\x1b[31mred\x1b[0m"
SOURCE = "evil"  # (a source name is letters, digits, - and _: ingest checks it)
TASKS = [f"task-{k}\x1b]0;t{k}\x07\x9b1m\x1b[31m" for k in range(3)]


# --- the lake and the app ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Path:
    """Harbor trials whose task names and messages hold escape sequences and C0/C1 controls, through the real ingest, beside the sample corpus's plain ones."""
    root = tmp_path_factory.mktemp("view-limits")
    for i, task in enumerate(TASKS * 2):
        trajectory = simple_trajectory(3)
        trajectory["steps"][0]["message"] = f"Task: hello {HOSTILE}"
        trajectory["steps"][1]["message"] = f"needle {HOSTILE}\n" + "plain line\n" * 20
        trajectory["steps"][1]["observation"]["results"][0]["content"] = f"{OSC0} needle\n" * 30
        make_trial(root / "jobs", f"trial-{i}", task=task, files={"trajectory.json": trajectory})
    run_ok(["tracelake", "ingest", "harbor", "jobs", "-s", SOURCE, "-o", "lake"], root)
    run_ok(["tracelake", "synth", "--out", "data", "--trials", "12", "--tasks", "4"], root)
    run_ok(["tracelake", "ingest", "harbor", "data/swesmith/jobs", "-s", "swesmith", "-o", "lake"], root)
    return root / "lake"


@pytest.fixture(scope="module")
def served(lake, tmp_path_factory):
    """(the app, its LakeView) with the search index built."""
    db = LakeView(lake, label="lake")
    db.start_search(tmp_path_factory.mktemp("search"), background=False)
    assert db.search is not None and db.search.ready
    return create_app(db), db


def _get(app, target: str, headers: dict[str, str] | None = None, method: str = "GET", host: str = "127.0.0.1"):
    """One request to the ASGI app: (status, headers, body, wall seconds, CPU seconds of the process)."""
    path, _, query = target.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": unquote(path),  # as a server hands it on: percent-escapes decoded
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", host.encode())] + [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8765),
    }
    sent: list[dict] = []

    requested = []

    async def receive():  # the request, then a client that stays until the response ends
        if not requested:
            requested.append(True)
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()

    async def send(message):
        sent.append(message)

    wall, cpu = time.monotonic(), time.process_time()
    asyncio.run(app(scope, receive, send))
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    names = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    return start["status"], names, body, wall, cpu


def _line(body: bytes) -> str:
    """The page's one error line."""
    found = re.search(rb'<p class="error" role="alert">(.*?)</p>', body)
    assert found, body[:500]
    return found[1].decode()


def _vocabulary(db: LakeView) -> list[str]:
    rows = db.con.execute("SELECT content FROM messages").fetchall()
    return sorted({w.lower() for (m,) in rows for w in re.findall(r"[^\W_]+", m or "")})


# --- (2) every request within a bound ------------------------------------------------------------


def _hostile_requests(db: LakeView) -> list[tuple[str, str, set[int]]]:
    """(name, target, the statuses it may get) for requests shaped to cost as much as they can."""
    vocab = _vocabulary(db)
    words = " ".join(vocab[i % len(vocab)] + ("" if i < len(vocab) else str(i)) for i in range(30_000))
    heavy = "(SELECT count(*) FROM range(100000000000) a) > 0"
    cross = "trajectory_id IN (SELECT a.trajectory_id FROM view_rows a, view_rows b, view_rows c, range(100000000))"
    return [
        ("30,000 words", "/?" + urlencode({"q": words}), {400, 414}),
        ("30,000 words, short", "/?" + urlencode({"q": " ".join(vocab[:5] * 6000)}), {400, 414}),
        ("1 MB word", "/?" + urlencode({"q": "a" * 1_000_000}), {414}),
        ("a 64 KB word", "/?" + urlencode({"q": "needle" + "b" * 65_530}), {414}),
        ("a 100-character word", "/?" + urlencode({"q": "c" * 100}), {400}),
        ("33 words", "/?" + urlencode({"q": " ".join(vocab[:33])}), {400}),
        ("5,000 facet params", "/?" + urlencode([("source", "x")] * 5000), {414}),
        ("100 facet params", "/?" + urlencode([("source", "x")] * 100), {400}),
        ("a search export of 30,000 words", "/export?" + urlencode({"format": "jsonl", "q": words}), {400, 414}),
        ("a WHERE of minutes", "/?" + urlencode({"where": heavy}), {503}),
        ("a cross join", "/?" + urlencode({"where": cross}), {503}),
        ("an export of minutes", "/export?" + urlencode({"format": "jsonl", "where": heavy}), {503}),
        ("LIKE metacharacters", "/?" + urlencode({"where": "task LIKE '%\\_%%[%]^$' ESCAPE '\\'"}), {200}),
        ("regex metacharacters", "/?" + urlencode({"where": "regexp_matches(task, '(a+)+$|((.*)*)*x')"}), {200}),
        ("regex in a search", "/?" + urlencode({"q": "(a+)+$ .* [^] needle \\1 %_"}), {200}),
        ("unicode", "/?" + urlencode({"q": "ｎｅｅｄｌｅ é ✓ \u202e 😀 needle", "task": "\u202e✓"}), {200}),
        ("a trajectory page with a hostile list query", "/t/00?" + urlencode({"q": "x " * 40}), {400}),
        ("a diff of long specs", "/diff?" + urlencode({"a": "p" * 8000, "b": "q"}), {400}),
    ]


def test_every_request_finishes_within_the_bound(served):
    app, db = served
    slow, wrong = [], []
    for name, target, statuses in _hostile_requests(db):
        try:
            status, headers, body, wall, cpu = _get(app, target)
        except Exception as e:  # a real server answers 500
            wrong.append((name, f"500 {type(e).__name__}"))
            continue
        if wall > BOUND:
            slow.append((name, round(wall, 1), round(cpu, 1)))
        if status not in statuses:
            wrong.append((name, status))
            continue
        assert headers["content-security-policy"] == HEADERS["Content-Security-Policy"], name
        if status >= 400:
            assert _line(body).startswith("tracelake: "), name  # a one-line reason on a page
    assert not slow, f"requests over {BOUND} s (name, wall, CPU seconds): {slow}"
    assert not wrong, f"(request, status) not the one expected: {wrong}"


def test_a_refusal_says_why_in_one_line(served):
    app, db = served
    status, _, body, _, _ = _get(app, "/?" + urlencode({"q": " ".join(["w"] * 40)}))
    assert (status, _line(body)) == (400, f"tracelake: view: a search takes at most {limits.MAX_WORDS} words, not 40")
    status, _, body, _, _ = _get(app, "/?" + urlencode({"q": "z" * 9000}))
    assert status == 414 and "view: the URL is 9,003 bytes; a request takes at most 8,192" in _line(body)
    status, _, body, wall, _ = _get(app, "/?" + urlencode({"where": "(SELECT count(*) FROM range(1000000000000)) > 0"}))
    assert status == 503 and f"ran past {REQUEST_SECONDS:g} s and were stopped" in _line(body)
    # the budget is the request's: the next request runs whole
    status, _, body, _, _ = _get(app, "/?" + urlencode({"q": "needle"}))
    assert status == 200 and b"needle" in body


def test_a_request_made_by_another_site_is_refused(served):
    app, _ = served
    cross = {"Sec-Fetch-Site": "cross-site"}
    for mode, dest in (("no-cors", "image"), ("cors", "empty"), ("navigate", "iframe"), ("no-cors", "script")):
        status, headers, body, _, _ = _get(app, "/?q=needle", {**cross, "Sec-Fetch-Mode": mode, "Sec-Fetch-Dest": dest})
        assert status == 403 and "another site" in _line(body), (mode, dest)
        assert b"needle" not in body.split(b"<main>")[1].split(b"tracelake:")[0]
    # the reader opening a page: a link from elsewhere, the address bar, the viewer's own pages
    for headers in (
        {**cross, "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"},
        {"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"},
        {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"},
        {},
    ):
        assert _get(app, "/?q=needle", headers)[0] == 200, headers


# --- (13a) the security headers on every response ------------------------------------------------


def test_every_status_carries_the_security_headers(served):
    app, db = served
    tid = db._rows("SELECT trajectory_id FROM view_index LIMIT 1")[0]["trajectory_id"]
    cases = [
        (200, "/", "GET", "127.0.0.1"),
        (200, f"/t/{tid}", "GET", "127.0.0.1"),
        (200, "/export?format=jsonl", "GET", "127.0.0.1"),
        (200, "/static/view.css", "GET", "127.0.0.1"),
        (204, "/favicon.ico", "GET", "127.0.0.1"),
        (400, "/?turns_min=ten", "GET", "127.0.0.1"),
        (400, "/export?format=zip", "GET", "127.0.0.1"),
        (400, "/", "GET", "attacker.example"),  # the Host check's own answer
        (403, "/?q=x", "GET", "127.0.0.1"),
        (404, "/no/such/page", "GET", "127.0.0.1"),
        (404, "/t/ffff", "GET", "127.0.0.1"),
        (405, "/", "POST", "127.0.0.1"),
        (405, "/datasets", "DELETE", "127.0.0.1"),
        (414, "/?q=" + "a" * 9000, "GET", "127.0.0.1"),
        (503, "/?" + urlencode({"where": "(SELECT count(*) FROM range(1000000000000)) > 0"}), "GET", "127.0.0.1"),
    ]
    for expected, target, method, host in cases:
        headers = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"} if expected == 403 else {}
        status, got, body, _, _ = _get(app, target, headers, method=method, host=host)
        assert status == expected, (target, method, status, body[:200])
        assert {k: got.get(k.lower()) for k in HEADERS} == HEADERS, (expected, target, method)


# --- (3) no raw control character on any page ----------------------------------------------------


@pytest.fixture()
def in_repository(tmp_path, monkeypatch):
    """The working directory a git repository whose branch's last commit subject is hostile (the
    datasets page lists the versions recorded in git)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a"}
    env["GIT_COMMITTER_EMAIL"] = "a@b"
    for args in (
        ["init", "-q", "-b", "main"],
        ["commit", "-q", "--allow-empty", "-m", "subject " + HOSTILE.replace("\x00", "")],
    ):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    monkeypatch.chdir(repo)
    return repo


def test_no_page_holds_a_raw_control_character(served, in_repository):
    app, db = served
    hostile = [
        r["trajectory_id"] for r in db._rows("SELECT trajectory_id FROM view_index WHERE task LIKE 'task-%' LIMIT 2")
    ]
    assert len(hostile) == 2
    pages = {
        "list (task names)": "/",
        "list of the hostile trials' source": "/?" + urlencode({"source": SOURCE}),
        "list with a hostile facet value": "/?" + urlencode({"task": TASKS[0]}),
        "search snippets": "/?q=needle",
        "trajectory": f"/t/{hostile[0]}",
        "compare": f"/compare?a={hostile[0]}&b={hostile[1]}",
        "datasets (versions from git)": "/datasets",
        "diff (the sides as typed)": "/diff?" + urlencode({"a": f"pool{OSC0}", "b": "1k\x9b\x1b[2J"}),
        "export, HTML": "/export?" + urlencode({"format": "html", "source": SOURCE}),
        "not found": "/t/" + quote(f"x{OSC0}\x85", safe=""),
    }
    for name, target in pages.items():
        status, _, body, _, _ = _get(app, target)
        assert status in (200, 400, 404), (name, status)
        text = body.decode()
        assert not RAW_CONTROL.findall(text), (name, RAW_CONTROL.findall(text)[:5])
        assert b"\\x1b" in body or b"\\x9b" in body or b"\\x07" in body, name  # shown, as the CLI shows them
    # the data as it was: the JSONL export keeps every byte (it is data, not a page)
    status, _, body, _, _ = _get(app, "/export?" + urlencode({"format": "jsonl", "source": SOURCE}))
    assert status == 200 and "\\u001b]0;pwned\\u0007".encode() in body


# --- (8b) a lake being rebuilt -------------------------------------------------------------------


def test_a_lake_being_rebuilt_is_503(lake, tmp_path):
    """`dvc repro` swaps a stage's output directory: the old one moves aside while the viewer runs.
    Every page that reads it says, in one line and with 503, that the lake is being rebuilt; once
    the directory is back, the pages work again."""
    copy = tmp_path / "lake"
    shutil.copytree(lake, copy)
    db = LakeView(copy, label="lake")
    app = create_app(db)
    tid = db._rows("SELECT trajectory_id FROM view_index WHERE source = 'swesmith' LIMIT 1")[0]["trajectory_id"]
    pages = [f"/t/{tid}", f"/compare?a={tid}&b={tid}", "/export?format=jsonl", "/export?format=parquet"]
    pages.append("/export?format=html")
    assert [_get(app, p)[0] for p in pages] == [200] * len(pages)
    source = copy / "trajectories" / "swesmith"
    aside = source.with_name(".swesmith.old")
    source.rename(aside)
    for target in pages:
        status, headers, body, _, _ = _get(app, target)
        assert status == 503, (target, status, body[:300])
        assert "the lake is being rebuilt" in _line(body) and headers["content-security-policy"], target
    aside.rename(source)
    assert [_get(app, p)[0] for p in pages] == [200] * len(pages)
    # a view the connection lost (made again mid-rebuild) is the same condition, not the request's fault
    db.con.execute("DROP TABLE view_index")
    status, _, body, _, _ = _get(app, f"/t/{tid}")
    assert status == 503 and "the lake is being rebuilt" in _line(body)
