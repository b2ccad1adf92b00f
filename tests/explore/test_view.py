"""`tracelake view`: the pages' HTML escaping and tool-call pairing (unit), and the served app in
headless Chromium over a copy of the built sample lake (e2e): facets, the WHERE box, keyset pages,
one trajectory with its folded blocks and subagent links, write attempts refused, 127.0.0.1 only."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit
from urllib.request import urlopen

import pytest

from tracelake.explore.view.db import Query
from tracelake.explore.view.html import esc, list_page, messages_html, tool_calls

from ..helpers import chromium_page, start_view, stop_process, tree_bytes

HOSTILE = "<script>alert(1)</script>"


# --- unit ----------------------------------------------------------------------------------------


def test_hostile_text_is_escaped_everywhere():
    assert esc(HOSTILE) == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert esc('"><img src=x onerror=alert(1)>') == "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"
    assert esc(None) == ""
    long = "\n".join([HOSTILE] * 40)
    messages = [
        {"role": "user", "content": HOSTILE},
        {
            "role": "assistant",
            "content": f'<think>{HOSTILE}</think>{{"commands": [{{"keystrokes": "{"<b>x</b>"}\\n"}}]}}',
        },
        {"role": "user", "content": long},
        {"role": f"<i>{HOSTILE}</i>", "content": "x"},
    ]
    page = messages_html(messages)
    assert "<script" not in page and "<b>" not in page and "<i>" not in page
    # the message, the thought, 40 lines and the fold's summary line, the role in its class and its label
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") == 1 + 1 + 40 + 1 + 2
    assert '<details class="think">' in page and '<details class="fold">' in page  # folded, not dropped
    q = Query(where=f"task = '{HOSTILE}'", source=HOSTILE, task='"><x')
    listing = list_page(q, [], 0, None, {"source": [(HOSTILE, 3)]}, label=HOSTILE, error=HOSTILE)
    assert listing.count("<script") == 1  # the page's own script tag, nothing else
    assert "&quot;&gt;&lt;x" in listing


def test_tool_calls_pair_with_their_observation():
    messages = [
        {"role": "user", "content": "task"},
        {
            "role": "assistant",
            "content": '<think>hmm</think>{"analysis": "a", "commands": '
            '[{"keystrokes": "ls -la\\n", "duration": 0.1}]}',
        },
        {"role": "user", "content": "New Terminal Output:\nfile"},
        {"role": "assistant", "content": "done"},
    ]
    assert tool_calls(messages[1]["content"]) == ["ls -la\n"]
    assert tool_calls("not json {") == []
    page = messages_html(messages)
    pair = page[page.index('id="m1"') : page.index('id="m3"')]
    assert "<code>ls -la</code>" in pair and 'class="obs" id="m2"' in pair and "file" in pair
    assert [f'id="m{i}"' in page for i in range(4)] == [True] * 4
    # a reply to an assistant turn that called no tool is a message of its own, not an observation
    chat = messages_html([{"role": "assistant", "content": "Which file?"}, {"role": "user", "content": "a.py"}])
    assert "obs" not in chat and 'class="msg user" id="m1"' in chat
    tool = messages_html([{"role": "assistant", "content": "x"}, {"role": "tool", "content": "out"}])
    assert 'class="obs" id="m1"' in tool


def test_query_round_trips_through_its_url():
    q = Query.from_params(
        {
            "where": "n_assistant_turns >= 10",
            "source": "a",
            "timed_out": "no",
            "turns_min": "3",
            "reward_max": "0.5",
            "after": "00ff",
            "task": "",
        }
    )
    assert q == Query(
        where="n_assistant_turns >= 10", source="a", timed_out=False, turns_min=3, reward_max=0.5, after="00ff"
    )
    assert Query.from_params(q.params()) == q
    from tracelake.core.errors import BadInput

    with pytest.raises(BadInput, match="turns_min='ten' is not a valid int"):
        Query.from_params({"turns_min": "ten"})


def test_a_port_in_use_is_a_one_line_error():
    from tracelake.core.errors import BadInput
    from tracelake.explore.view.app import bind

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        with pytest.raises(BadInput, match=r"cannot listen on 127\.0\.0\.1:\d+: .*choose another --port"):
            bind(held.getsockname()[1])
    sock = bind(0)
    try:
        assert sock.getsockname()[0] == "127.0.0.1"
    finally:
        sock.close()


# --- the served app in Chromium ------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> list[str]:
    """The local addresses listening on `port` (from /proc/net/tcp and tcp6), as hex ip:port."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                found.append(local)
    return found


def _rewrite(lake: Path, trajectory_id: str | None, change) -> str:
    """Rewrite one trajectory of the copy (the first one when `trajectory_id` is None) with `change`
    (row -> None), its part file written again with the same rows otherwise; its id."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for part in sorted(lake.glob("trajectories/*/trajectories/part-*.parquet")):
        table = pq.read_table(part)
        rows = table.to_pylist()
        for row in rows:
            if trajectory_id is None or row["trajectory_id"] == trajectory_id:
                change(row)
                pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), part)
                return row["trajectory_id"]
    raise LookupError(trajectory_id)


def _with_hostile_message(lake: Path) -> str:
    """Put HOSTILE into one message of one trajectory of the copy; its id."""

    def change(row):
        row["messages"][0]["content"] = f"look: {HOSTILE} and <img src=x onerror=alert(2)>"

    return _rewrite(lake, None, change)


UNIQUE = "xylophonequartz"  # a word in one message of the served lake, planted in a folded output


def _with_unique_word(lake: Path, trajectory_id: str) -> int:
    """Append UNIQUE to the last line of the trajectory's first folded observation; its position."""
    folded = [
        i
        for i, m in enumerate(_messages(lake, trajectory_id))
        if m["role"] != "assistant" and i > 1 and (m["content"].count("\n") >= 12 or len(m["content"]) > 2000)
    ]
    position = folded[0]

    def change(row):
        row["messages"][position]["content"] += f"\nerror: {UNIQUE} not found"

    _rewrite(lake, trajectory_id, change)
    return position


def _messages(lake: Path, trajectory_id: str) -> list[dict]:
    import duckdb

    return (
        duckdb.connect()
        .execute(
            f"SELECT messages FROM read_parquet('{lake}/trajectories/*/trajectories/*.parquet') "
            "WHERE trajectory_id = $id",
            {"id": trajectory_id},
        )
        .fetchall()[0][0]
    )


def _target(lake: Path) -> tuple[str, str, int]:
    """A main trajectory with 10+ assistant turns, a subagent trace in its trial, a <think> block and a
    folded observation: (id, its source, rows of that source with 10+ turns)."""
    import duckdb

    parts = f"'{lake}/trajectories/*/trajectories/*.parquet'"
    con = duckdb.connect()
    candidates = con.execute(f"""
        WITH t AS (SELECT * FROM read_parquet({parts}, union_by_name := true))
        SELECT trajectory_id, source, messages FROM t
        WHERE trace_source = 'main' AND n_assistant_turns >= 10
          AND EXISTS (SELECT 1 FROM t s WHERE s.trial_name = t.trial_name AND s.source = t.source
                      AND s.trace_source <> 'main')
        ORDER BY trajectory_id DESC""").fetchall()
    folded = re.compile(r'<div class="obs"[^>]*><h4>.*?</h4><details class="fold">')
    found = [
        c for c in candidates if '<details class="think">' in (page := messages_html(c[2])) and folded.search(page)
    ]
    assert found, "the sample has no main trajectory with a subagent, a <think> block and a long output"
    row = found[0]
    n = con.execute(
        f"SELECT count(*) FROM read_parquet({parts}, union_by_name := true) "
        f"WHERE source = $s AND n_assistant_turns >= 10",
        {"s": row[1]},
    ).fetchall()[0][0]
    return row[0], row[1], n


@pytest.fixture()
def served(sample_project, tmp_path):
    """`tracelake view` over a copy of the sample lake (with one hostile message) on a free port:
    (base URL, lake copy, the hostile trajectory's id, the server's stdout file)."""
    lake = tmp_path / "lake"
    shutil.copytree(sample_project / "lake", lake)
    hostile = _with_hostile_message(lake)
    target = _target(lake)
    planted = _with_unique_word(lake, target[0])
    proc, port = start_view(
        ["--lake", str(lake), "--search-cache", str(tmp_path / "search")], sample_project, tmp_path / "view.log"
    )
    log = tmp_path / "view.log"
    try:
        yield f"http://127.0.0.1:{port}", lake, hostile, log, port, proc, target, planted
    finally:
        stop_process(proc, timeout=15)


def _shots_dir() -> Path | None:
    keep = os.environ.get("TRACELAKE_SCREENSHOTS")
    return Path(keep) if keep else None


def test_view_in_headless_chromium(served, tmp_path):
    base, lake, hostile, log, port, proc, (target, source, n_source_10), planted = served
    before = tree_bytes(lake)

    # 127.0.0.1 only: one listening socket on this port, on the loopback address
    assert _listening(port) == [f"0100007F:{port:04X}"], _listening(port)
    assert f"tracelake view: http://127.0.0.1:{port}/" in log.read_text()

    shots = {}
    with chromium_page(1300) as (page, messages, failures, dialogs):

        def shot(name: str) -> None:
            path = tmp_path / f"{name}.png"
            page.screenshot(path=str(path), full_page=name != "trace")
            shots[name] = path

        # the list: every trajectory, 50 a page
        page.goto(base + "/", wait_until="load")
        total = int(page.inner_text("#total").replace(",", ""))
        assert total == sum(1 for _ in _ids(lake))
        assert page.locator("table.list tbody tr").count() == 50
        shot("list")

        # a source facet: the <select> submits itself
        page.select_option("#f-source", source)
        page.wait_for_url(f"**/?*source={source}*")
        sources = page.locator("table.list tbody tr td:nth-child(2)").all_inner_texts()
        assert sources and set(sources) == {source}

        # a SQL WHERE over the list's columns
        page.fill("#f-where", "n_assistant_turns >= 10")
        page.press("#f-where", "Enter")
        page.wait_for_url("**where=n_assistant_turns*")
        assert int(page.inner_text("#total").replace(",", "")) == n_source_10
        turns = [int(t) for t in page.locator("table.list tbody tr td:nth-child(6)").all_inner_texts()]
        assert turns and min(turns) >= 10
        assert set(page.locator("table.list tbody tr td:nth-child(2)").all_inner_texts()) == {source}
        shot("list-filtered")

        # keyset pages until the target row shows, then open it
        seen: list[str] = []
        while page.locator(f"tr[data-id='{target}']").count() == 0:
            ids = [
                page.locator("table.list tbody tr").nth(i).get_attribute("data-id")
                for i in range(page.locator("table.list tbody tr").count())
            ]
            assert ids == sorted(ids) and (not seen or ids[0] > seen[-1])
            seen += ids
            page.click("a.next")
            page.wait_for_load_state("load")
            assert "after=" in page.url
        page.click(f"tr[data-id='{target}'] a.open")
        page.wait_for_url(f"**/t/{target}?*")
        query = parse_qs(urlsplit(page.url).query)
        assert query["source"] == [source] and query["where"] == ["n_assistant_turns >= 10"]
        assert page.inner_text("#tid") == target
        body = page.inner_text("body")
        assert "Harbor result" in body and "reward" in body and "exception_type" in body
        assert "Datasets" in body and ("in the pool" in body or "dropped by the filter" in body)
        assert page.locator("ul.datasets li.scale").count() >= 1
        assert page.locator(".task pre, .task details").count() >= 1  # the task's instruction

        # <think> is collapsed until opened
        think = page.locator(".messages details.think").first
        assert not think.locator("pre").is_visible()
        think.locator("summary").click()
        assert think.locator("pre").is_visible() and think.get_attribute("open") is not None
        # a long observation is folded, paired with the call that caused it
        fold = page.locator(".messages .toolpair details.fold").first
        assert not fold.locator("pre").is_visible()
        fold.locator("summary").click()
        assert fold.locator("pre").is_visible()
        assert page.locator(".toolpair ul.calls code").count() > 0
        page.evaluate("window.scrollTo(0, 0)")
        shot("trace")

        # a subagent trace of the same trial
        sub = page.locator("ul.subagents a").first
        sub_label = sub.inner_text()
        sub.click()
        page.wait_for_url("**/t/*")
        assert page.inner_text("#tid") != target
        body = page.inner_text("body")
        assert sub_label.split()[0] in body and sub_label.split()[0] != "main"
        sub_id = page.inner_text("#tid")
        rule, detail = _dropped(lake, sub_id)  # why it is in no dataset: the rule that dropped it
        assert f"dropped by the filter: {rule} — {detail}" in body
        assert page.locator("ul.subagents a").count() >= 1  # and links back to the main trace
        shot("subagent")

        # back to the trace, then to the results it was opened from: the same page, its row marked
        page.go_back()
        page.wait_for_url(f"**/t/{target}?*")
        page.click("p.back a")
        page.wait_for_url(f"**/?*open={target}*")
        assert parse_qs(urlsplit(page.url).query)["where"] == ["n_assistant_turns >= 10"]
        assert page.locator("tr.opened").get_attribute("data-id") == target

        # full-text search: a word in one message finds that trajectory, and its link opens the
        # trajectory at that turn, the folded output around it opened and the word marked
        deadline = time.monotonic() + 120
        page.goto(f"{base}/?q={UNIQUE}", wait_until="load")
        while page.locator("p.searching").count():  # the index is built in the background
            assert "being built" in page.inner_text("p.searching") and time.monotonic() < deadline
            time.sleep(0.5)
            page.reload(wait_until="load")
        page.goto(base + "/", wait_until="load")
        page.fill("#f-q", UNIQUE.upper())  # words match whatever their case
        page.press("#f-q", "Enter")
        page.wait_for_url(f"**q={UNIQUE.upper()}*")
        assert page.inner_text("#total") == "1"
        assert page.locator("table.list tbody tr").get_attribute("data-id") == target
        assert UNIQUE in page.inner_text("td.hit .snippet mark")
        shot("search")
        page.click("td.hit a.best")
        page.wait_for_url(f"**/t/{target}?*#m{planted}")
        mark = page.locator(f"#m{planted} mark.hit")
        assert mark.count() == 1 and mark.is_visible() and mark.inner_text().lower() == UNIQUE
        assert page.locator(f"#m{planted}.turn-target").count() == 1
        # tokens per turn (their sum is checked in test_turn_tokens_sum_to_the_pools_count)
        turn_tokens = [int(t.split()[0].replace(",", "")) for t in page.locator(".messages .tok").all_inner_texts()]
        assert len(turn_tokens) == len(_messages(lake, target))
        # what LLaMA-Factory trains on: its export row, label spans marked
        if page.locator("details.training").count():
            page.locator("details.training summary").click()
            assert page.locator("pre.training span.seg.label").count() >= 1
            assert page.locator("pre.training span.seg.prompt").count() >= 1

        # another rollout of the same task, side by side
        page.goto(f"{base}/t/{target}", wait_until="load")
        other = page.locator("table.rollouts a.compare").first
        other.click()
        page.wait_for_url("**/compare?*")
        assert page.locator(".compare .side").count() == 2
        assert page.locator(".side-a .messages [id^='m']").count() == len(
            _messages(lake, target)
        )  # messages and observations
        shot("compare")

        # the datasets, and a diff of two versions from there
        page.goto(base + "/datasets", wait_until="load")
        views = page.locator("tr.dataset").evaluate_all("rows => rows.map(r => r.dataset.view)")
        assert views[0] == "pool" and any(v.startswith("selection_") for v in views)
        shot("datasets")
        page.locator("tr.dataset a.rows").nth(1).click()
        page.wait_for_url(f"**/?dataset={views[1]}")
        in_dataset = int(page.inner_text("#total").replace(",", ""))
        assert in_dataset == _distinct(lake, views[1])
        page.go_back()
        link = page.locator("a.diff").first
        link.click()
        page.wait_for_url("**/diff?a=*&b=*")
        assert page.locator("#diff .cards").count() == 1
        assert "Why rows moved" in page.inner_text("#diff") and "Moved trajectories" in page.inner_text("#diff")
        shot("diff")

        # hostile text is shown as text
        page.goto(f"{base}/t/{hostile}", wait_until="load")
        assert HOSTILE in page.inner_text("body")
        assert page.locator("script").count() == 1 and page.locator(".messages img").count() == 0

        assert messages == [] and failures == [] and dialogs == []
        # writes through the WHERE box and through the URL: one visible line, nothing written
        # (from here on the browser logs each refused page's 400 or 404 status)
        attempts = [
            "1=1) TO 'pwn.csv' (FORMAT csv) --",
            "(SELECT 1 FROM (COPY trajectories TO 'pwn.csv')) = 1",
            "1 = (WITH x AS (COPY (SELECT 1) TO 'pwn.csv') SELECT 1)",
            "1=1; COPY trajectories TO 'pwn.csv'",
            "1=1; CREATE TABLE pwn AS SELECT 1",
            "trajectory_id IN (SELECT content FROM read_text('/etc/passwd'))",
        ]
        page.goto(base + "/", wait_until="load")
        page.fill("#f-where", attempts[2])
        page.press("#f-where", "Enter")
        page.wait_for_load_state("load")
        error = page.locator("p.error")
        assert error.is_visible() and "COPY" in error.inner_text() and "refused" in error.inner_text()
        shot("refused")
        for attempt in attempts:
            response = page.goto(f"{base}/?where={quote(attempt)}", wait_until="load")
            assert response.status == 400, attempt
            line = page.locator("p.error").inner_text()
            assert line.startswith("tracelake: sql:") and "\n" not in line, (attempt, line)
            assert page.locator("table.list").count() == 0
        response = page.goto(f"{base}/?turns_min={quote('1; DROP TABLE x')}", wait_until="load")
        assert response.status == 400 and "is not a valid int" in page.inner_text("p.error")
        response = page.goto(f"{base}/?source={quote(chr(39) + '; COPY trajectories TO ' + chr(39) + 'pwn.csv')}")
        assert response.status == 200 and page.inner_text("#total") == "0"  # a bound value, no SQL
        response = page.goto(f"{base}/t/{quote('x; COPY trajectories TO pwn')}", wait_until="load")
        assert response.status == 404 and "no trajectory" in page.inner_text("p.error")
        response = page.goto(f"{base}/diff?a=/etc&b=pool", wait_until="load")  # versions only, no paths
        assert response.status == 400 and "no paths" in page.inner_text("p.error")
        injected = quote('pool" UNION SELECT 1 --')
        response = page.goto(f"{base}/?dataset={injected}", wait_until="load")
        assert response.status == 400 and "no dataset" in page.inner_text("p.error")
    assert failures == [] and dialogs == []
    assert all("the server responded with a status of 40" in m for m in messages), messages
    assert tree_bytes(lake) == before
    assert not list(tmp_path.rglob("pwn*")) and not list(Path.cwd().glob("pwn*"))
    for name, path in shots.items():
        assert path.stat().st_size > 10_000, name
    keep = _shots_dir()
    if keep:
        keep.mkdir(parents=True, exist_ok=True)
        for name, path in shots.items():
            shutil.copy(path, keep / f"view-{name}.png")
    # the selection exported: every matched trajectory, whole, as JSONL, Parquet or one HTML file
    _check_exports(base, lake, source)
    # plain HTTP, no browser: the static files are the package's, served with a strict CSP
    with urlopen(f"{base}/static/view.js") as r:
        assert "script-src 'self'" in r.headers["Content-Security-Policy"] and b"autosubmit" in r.read()
    # Ctrl-C stops it cleanly
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=20) == 0
    assert log.read_text().rstrip().endswith("tracelake view: stopped")
    assert _listening(port) == []


def _check_exports(base: str, lake: Path, source: str) -> None:
    import io
    import json

    import duckdb
    import pyarrow.parquet as pq

    where = "n_assistant_turns >= 10"
    query = f"source={quote(source)}&where={quote(where)}"
    expected = sorted(
        r[0]
        for r in duckdb.connect()
        .execute(
            f"SELECT trajectory_id FROM read_parquet('{lake}/trajectories/*/trajectories/*.parquet', union_by_name := true) "
            f"WHERE source = $s AND {where}",
            {"s": source},
        )
        .fetchall()
    )
    with urlopen(f"{base}/export?format=jsonl&{query}") as r:
        assert r.headers["Content-Disposition"] == f'attachment; filename="tracelake-{len(expected)}.jsonl"'
        rows = [json.loads(line) for line in r.read().decode().splitlines()]
    assert sorted(row["trajectory_id"] for row in rows) == expected
    assert all(row["messages"] and row["source"] == source for row in rows)
    with urlopen(f"{base}/export?format=parquet&{query}") as r:
        table = pq.read_table(io.BytesIO(r.read()))
    assert sorted(table.column("trajectory_id").to_pylist()) == expected
    assert table.to_pylist() == rows  # the same rows, every column, in the same order
    with urlopen(f"{base}/export?format=html&{query}") as r:
        page = r.read().decode()
    assert page.count('<article class="trajectory"') == min(len(expected), 200)
    assert "<script" not in page and "src=" not in page and 'href="/' not in page  # nothing fetched, no server link
    assert "<style>" in page and page.count('class="msg ') >= len(expected)
    try:
        urlopen(f"{base}/export?format=csv")
        raise AssertionError("an unknown export format was served")
    except Exception as e:
        assert getattr(e, "code", None) == 400


def _ids(lake: Path):
    import duckdb

    yield from (
        duckdb.connect()
        .execute(f"SELECT trajectory_id FROM read_parquet('{lake}/trajectories/*/trajectories/*.parquet')")
        .fetchall()
    )


def _distinct(lake: Path, view: str) -> int:
    """Distinct trajectories of a dataset view (selection_<scale>, sft_<scale>, pool) of the copy."""
    import duckdb

    kind, _, scale = view.partition("_")
    files = {
        "pool": f"{lake}/pool/pool.parquet",
        "selection": f"{lake}/selections/{scale}/*.parquet",
        "sft": f"{lake}/exports/sft/{scale}/*/*.parquet",
    }[kind]
    return (
        duckdb.connect().execute(f"SELECT count(DISTINCT trajectory_id) FROM read_parquet('{files}')").fetchall()[0][0]
    )


def _dropped(lake: Path, trajectory_id: str) -> tuple[str, str]:
    import duckdb

    return (
        duckdb.connect()
        .execute(
            f"SELECT rule, detail FROM read_parquet('{lake}/pool/dropped.parquet') WHERE trajectory_id = $id",
            {"id": trajectory_id},
        )
        .fetchall()[0]
    )


def test_view_serves_the_lake_at_a_revision(sample_project, tmp_path):
    """--rev: the lake as a commit recorded it, read from the DVC cache; Ctrl-C removes that tree."""
    import glob

    repo = tmp_path / "repo"
    shutil.copytree(sample_project, repo, symlinks=True)
    for args in (["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "built"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True).stdout
    trees = f"{tempfile.gettempdir()}/tracelake-{sha[:8]}-*"  # this commit's tree only: other tests make tracelake-*
    before = set(glob.glob(trees))
    exe = Path(sys.executable).parent / "tracelake"
    proc = subprocess.Popen(
        [str(exe), "view", "--rev", "HEAD", "--port", "0"],
        cwd=repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("tracelake view: http://127.0.0.1:"), line + proc.stdout.read()
        base = line.split()[2].rstrip("/")
        with urlopen(base + "/") as r:
            page = r.read().decode()
        assert "lake at HEAD (" in page
        total = int(page.split('id="total">')[1].split("<")[0].replace(",", ""))
        assert total == sum(1 for _ in _ids(repo / "lake"))
    finally:
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=30)
    assert rc == 0
    assert set(glob.glob(trees)) == before


# --- the lake's views, in process ------------------------------------------------------------------


def test_turn_tokens_are_each_messages_chatml_tokens(sample_project, monkeypatch):
    """Tokens per turn are each message's ChatML tokens with the pool's tokenizer: for every kept
    trajectory they add up to its ChatML count; the pool's n_tokens is the trained rendering's."""
    from tracelake.explore.view.db import LakeView
    from tracelake.tokens.token_count import count_chatml_tokens

    monkeypatch.chdir(sample_project)  # the pool's tokenizer path is the project's
    db = LakeView(sample_project / "lake")
    assert db.tokenizer is not None
    kept = db._rows("SELECT trajectory_id, n_tokens FROM pool ORDER BY trajectory_id LIMIT 40")
    for row in kept:
        t = db.trajectory(row["trajectory_id"])
        assert len(t["turn_tokens"]) == len(t["messages"])
        assert sum(t["turn_tokens"]) == count_chatml_tokens(db.tokenizer[1], [t["messages"]])[0], row["trajectory_id"]
        assert row["n_tokens"] > 0


def test_search_index_is_cached_by_the_trajectories_content(sample_project, tmp_path):
    from tracelake.explore.view.db import LakeView
    from tracelake.explore.view.search import index_key

    cache = tmp_path / "search"
    (cache / f".{index_key(sample_project / 'lake')}.tmp-999999999").mkdir(parents=True)  # a killed build
    db = LakeView(sample_project / "lake")
    index = db.start_search(cache, background=False)
    assert index.ready and index.path.parent == cache and (index.path / "complete").is_file()
    assert [p.name for p in cache.iterdir()] == [index.key]  # the dead build's leftover is gone
    n = db._rows("SELECT count(*) AS n FROM messages WHERE content <> ''")[0]["n"]
    assert index._written == n
    # a word of one message: the message, at its position
    word = db._rows(
        "SELECT trajectory_id, position, content FROM messages WHERE content LIKE '%systemctl%' "
        "ORDER BY trajectory_id, position LIMIT 1"
    )[0]
    hits = index.search("SYSTEMCTL")
    assert hits and all("systemctl" in h.content.lower() for h in hits)
    assert (
        any((h.trajectory_id, h.position) == (word["trajectory_id"], word["position"]) for h in hits)
        or len(hits) == 2000
    )
    # a copy of the lake (same trajectories) reuses it; hostile or empty queries find nothing, raise nothing
    copy = tmp_path / "copy"
    shutil.copytree(sample_project / "lake", copy)
    again = LakeView(copy).start_search(cache, background=False)
    assert again.path == index.path and again.seconds == 0.0 and again.ready
    for text in ("", "   ", "(", '"', "AND OR NOT", "*", HOSTILE, "a" * 500):
        assert isinstance(index.search(text), list)
    rows, total, capped, state = db.search_page(Query(q="systemctl", source="tezos"))
    assert (
        state == "ready"
        and {r["source"] for r in rows} <= {"tezos"}
        and total
        == len(
            {
                h.trajectory_id
                for h in hits
                if db._rows("SELECT source FROM view_rows WHERE trajectory_id = $id", {"id": h.trajectory_id})[0][
                    "source"
                ]
                == "tezos"
            }
        )
    )


def test_diff_sides_from_a_request_are_versions_never_paths():
    from tracelake.core.errors import BadInput
    from tracelake.explore.view.datasets import check_spec

    for ok in ("pool", "1k", "sft-3k", "sft-3.16k-2e9abe4fdb3d", "HEAD~1:1k", "main:pool", "v1.0^:sft-1k"):
        assert check_spec(ok) == ok
    for bad in ("/etc", "../lake/pool", "lake/pool", "--output=x:1k", "HEAD:../x", ":1k", "-x:pool", ""):
        with pytest.raises(BadInput, match="no paths"):
            check_spec(bad)


def test_dataset_facet_takes_only_the_lakes_datasets(sample_project):
    from tracelake.core.errors import BadInput
    from tracelake.explore.view.db import LakeView

    db = LakeView(sample_project / "lake")
    views = [d["view"] for d in db.datasets]
    assert views[0] == "pool" and "selection_1k" in views and "sft_1k" in views
    rows, total, _ = db.page(Query(dataset="selection_1k"))
    assert total == db._rows("SELECT count(DISTINCT trajectory_id) AS n FROM selection_1k")[0]["n"]
    with pytest.raises(BadInput, match="no dataset 'trajectories'"):
        db.page(Query(dataset="trajectories"))
    with pytest.raises(BadInput, match="no dataset"):
        db.page(Query(dataset='pool" UNION SELECT 1 --'))


def test_stopping_the_viewer_stops_an_index_build_and_leaves_nothing(sample_project, tmp_path):
    """Ctrl-C while the index is built: the build stops between batches, its temporary directory goes."""
    import threading

    from tracelake.explore.view.db import LakeView
    from tracelake.explore.view.search import SearchIndex

    db = LakeView(sample_project / "lake")
    total, batches = db._messages()
    first = threading.Event()

    def slow():
        for batch in batches:
            first.set()
            time.sleep(0.2)
            yield batch.slice(0, 10)

    index = SearchIndex(sample_project / "lake", tmp_path / "search")
    index.start(lambda: (total, slow()))
    assert first.wait(30)
    assert "being built" in index.state()
    index.stop()
    assert not index.ready and "stopped before the index was built" in index.state()
    assert list((tmp_path / "search").iterdir()) == []
    # an export of a search that cannot run is a one-line refusal, never an empty file
    from tracelake.core.errors import BadInput
    from tracelake.explore.view.download import selected_ids

    db.search = index
    with pytest.raises(BadInput, match="cannot export the search: search is off: the viewer stopped"):
        selected_ids(db, Query(q="error"))
