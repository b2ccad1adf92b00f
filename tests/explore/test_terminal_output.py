"""Values from data reach the terminal literally: no rich markup of theirs is interpreted (a task named
`[/bold]x` neither crashes `tracelake show` nor styles anything; `[link=…]` is no hyperlink), and no
control sequence of theirs reaches the terminal (OSC 8 hyperlinks, OSC 0 window titles, cursor moves,
C1 controls): each is shown as a visible escape (`\\x1b`), an SGR colour is dropped. The real CLI in a
subprocess over a lake made by the real ingest, colours forced on as on a terminal; and a fuzz of
random text with control sequences and markup through every terminal renderer."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from io import StringIO
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ..helpers import FUZZ_EXAMPLES, make_trial, run_ok, simple_trajectory

MARKUP_TASKS = ["[/bold]evil-close-tag", "[red]x[/red][/]", "[link=javascript:alert(1)]evil-link[/link]"]
OSC8 = "\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\"
OSC0 = "\x1b]0;pwned\x07"
HOSTILE_TEXT = (  # lines short enough never to wrap
    f"link {OSC8} title\n{OSC0} clear \x1b[2J\x1b[H c1 \x9b31m del \x7f bell \x07 back \x08\n"
    f"cr \rover rtl \u202eevil [bold]not bold[/bold] :smile: \x1b[31mred\x1b[0m done"
)
SGR = re.compile(r"\x1b\[[0-9;]*m")  # the only sequences tracelake's own styling writes
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def unsafe(output: str) -> list[str]:
    """Control characters in terminal output other than tracelake's own SGR styling, \\n and \\t."""
    return CONTROL.findall(SGR.sub("", output))


def tracelake(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The CLI with colours forced on, as on a terminal (rich writes styles and hyperlinks)."""
    env = {**os.environ, "FORCE_COLOR": "1", "TERM": "xterm-256color", "COLUMNS": "1000"}
    env.pop("NO_COLOR", None)
    proc = subprocess.run(
        [sys.executable, "-m", "tracelake", *args], cwd=cwd, capture_output=True, env=env, timeout=120
    )
    # decoded here, not by text=True: its universal newlines would turn a carriage return into \n
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode())


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Path:
    """Harbor trials whose task names are rich markup and whose messages hold escape sequences,
    through the real ingest."""
    root = tmp_path_factory.mktemp("hostile-terminal")
    for i, task in enumerate(MARKUP_TASKS):
        trajectory = simple_trajectory(2)
        trajectory["steps"][0]["message"] = HOSTILE_TEXT
        trajectory["steps"][1]["observation"]["results"][0]["content"] = f"{OSC0}\n" * 30
        make_trial(root / "jobs", f"trial-{i}", task=task, files={"trajectory.json": trajectory})
    run_ok(["tracelake", "ingest", "harbor", "jobs", "-s", "evil", "-o", "lake"], root)
    return root / "lake"


@pytest.fixture(scope="module")
def rows(lake) -> dict[str, dict]:
    """task -> its trajectory row."""
    import duckdb

    files = f"{lake}/trajectories/*/trajectories/*.parquet"
    table = duckdb.connect().sql(f"SELECT * FROM '{files}'").to_arrow_table()
    return {r["task"]: r for r in table.to_pylist()}


@pytest.mark.parametrize("task", MARKUP_TASKS)
def test_show_prints_markup_in_values_literally(lake, rows, task):
    """Before: `[/bold]…` and `[red]x[/red][/]` crashed with a MarkupError traceback, `[link=…]`
    became a terminal hyperlink to javascript:alert(1)."""
    proc = tracelake(lake.parent, "show", "--lake", "lake", rows[task]["trajectory_id"])
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-2000:]
    assert f"evil / {task}" in SGR.sub("", proc.stdout)
    assert "[bold]not bold[/bold] :smile:" in SGR.sub("", proc.stdout)
    assert "\x1b]8" not in proc.stdout and not unsafe(proc.stdout)


@pytest.mark.parametrize("flags", [[], ["--full"]])
def test_show_makes_every_control_sequence_visible(lake, rows, flags):
    """Before: the OSC 8 hyperlink, the OSC 0 window title, the screen clear and the C1 CSI reached the
    terminal as they were."""
    proc = tracelake(lake.parent, "show", "--lake", "lake", rows[MARKUP_TASKS[0]]["trajectory_id"], *flags)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not unsafe(proc.stdout), unsafe(proc.stdout)
    text = SGR.sub("", proc.stdout)
    for visible in (
        r"link \x1b]8;;http://evil.example\x1b\click\x1b]8;;\x1b\ title",
        r"\x1b]0;pwned\x07 clear \x1b[2J\x1b[H c1 \x9b31m del \x7f bell \x07 back \x08",
        r"cr \x0dover rtl \u202eevil",
        "red done",  # an SGR colour of the data is dropped, its text kept
    ):
        assert visible in text, visible


def test_show_json_escapes_every_control(lake, rows):
    proc = tracelake(lake.parent, "show", "--lake", "lake", rows[MARKUP_TASKS[0]]["trajectory_id"], "--json")
    assert proc.returncode == 0 and not CONTROL.findall(proc.stdout)
    assert orjson.loads(proc.stdout)["messages"][0]["content"] == HOSTILE_TEXT


@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_sql_prints_values_literally(lake, fmt):
    """Before: the table format crashed with a MarkupError traceback on a task name; every format wrote
    the messages' escape sequences as they were (csv and json to a pipe keep the data exact)."""
    query = 'SELECT task AS "[bold]t", messages[1].content AS c FROM trajectories ORDER BY task'
    proc = tracelake(lake.parent, "sql", "--lake", "lake", "--format", fmt, query)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-2000:]
    if fmt == "table":
        assert not unsafe(proc.stdout)
        text = SGR.sub("", proc.stdout)
        assert all(task in text for task in MARKUP_TASKS) and "[bold]t" in text and r"\x1b]0;pwned\x07" in text
    elif fmt == "json":
        assert not CONTROL.findall(proc.stdout)
        assert [orjson.loads(line)["c"] for line in proc.stdout.splitlines()] == [HOSTILE_TEXT] * 3
    else:
        assert HOSTILE_TEXT in proc.stdout  # a pipe gets the data as it is


def test_an_error_quoting_data_shows_it_visibly(lake):
    """A DuckDB error that quotes a value (here a message, cast to a number) is one line, its controls
    visible."""
    proc = tracelake(
        lake.parent, "sql", "--lake", "lake", "SELECT CAST(messages[1].content AS INTEGER) FROM trajectories"
    )
    assert proc.returncode == 2 and proc.stderr.startswith("tracelake: sql: ")
    assert not unsafe(proc.stderr) and r"\x1b]8;;http://evil.example\x1b\click" in proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr


def test_a_source_name_with_markup_is_refused_and_printed_literally(tmp_path):
    """A source named with markup and an escape never becomes a table (names are checked as params
    are): the refusal is one line showing the name as it is, its escape visible."""
    make_trial(tmp_path / "jobs", "trial-0", task="t")
    source = "[bold]src\x1b]0;t\x07"
    proc = tracelake(tmp_path, "ingest", "harbor", "jobs", "-s", source, "-o", "lake")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(proc.stderr.splitlines()) == 1 and not unsafe(proc.stderr)
    assert r"[bold]src\x1b]0;t\x07" in SGR.sub("", proc.stderr)
    assert not (tmp_path / "lake").exists()


# --- every terminal renderer, in process -----------------------------------------------------------------


def _console():
    from tracelake.core.ui import terminal_console

    return terminal_console(file=StringIO(), force_terminal=True, color_system="truecolor", width=4000)


def _rendered(draw) -> str:
    console = _console()
    draw(console)
    return console.file.getvalue()


def test_diff_summary_prints_values_literally():
    """A diff report whose every text value is hostile (task names, sources, rules, params, notes)."""
    from tracelake.explore.diff_terminal import render

    h = "[/bold]" + OSC8
    side = {"spec": h, "path": h, "kind": h, "dataset_id": h, "rows": 1, "commit": h}
    counts = {"trajectories": 1}
    report = {
        "a": side,
        "b": side,
        "notes": [h],
        "identical": False,
        "summary": {
            "rows_a": 1,
            "rows_b": 2,
            "rows_delta": 1,
            "trajectories": {h: counts},
            "scorers": {"changed": True, "a": h, "b": h},
        },
        "explained": [{"status": h, "stage": h, "rule": h, "trajectories": 1, "rows_delta": -1}],
        "params": [{"key": h, "a": h, "b": 1.5}],
        "funnel": {
            "total": {
                "in_a": 1,
                "in_b": 1,
                "kept_a": 1,
                "kept_b": 1,
                "rules": [{"rule": h, "a": 1, "b": 2, "delta": 1}],
            }
        },
        "sources": [
            {
                "source": h,
                "rows_a": 1,
                "rows_b": 1,
                "rows_delta": 0,
                "trajectories_a": 1,
                "trajectories_b": 1,
                "tasks_a": 1,
                "tasks_b": 1,
            }
        ],
        "distributions": {"turns": {"a": {q: h for q in ("min", "p10", "p25", "p50", "p75", "p90", "mean", "max")}}},
        "tasks": {
            "counts": {"added": 1, "removed": 0, "changed": 0, "unchanged": 0},
            "top": [{"task": h, "source": h, "rows_a": 1, "rows_b": 2, "delta": 1, "task_id": h}],
        },
        "moved": [
            {
                "trajectory_id": h,
                "status": h,
                "copies_a": 1,
                "copies_b": 0,
                "source": h,
                "task": h,
                "stage": h,
                "rule": h,
                "detail": h,
            }
        ],
    }
    out = _rendered(lambda console: render(report, console))
    assert not unsafe(out) and "\x1b]8" not in out
    assert SGR.sub("", out).count("[/bold]" + r"\x1b]8;;http://evil.example\x1b\click") >= 15


def test_dedup_explain_prints_values_literally():
    from tracelake.explore.dedup_view import render_explain

    h = "[/bold]" + OSC0
    row = {
        "source": h,
        "task": h,
        "task_id": h,
        "cluster_size": 2,
        "trajectories": 1,
        "representative": True,
        "method": h,
        "jaccard": 0.5,
        "cosine": None,
        "dropped": False,
        "benchmark": h,
        "benchmark_item": h,
        "contamination_method": h,
        "ngram": h,
        "contamination_similarity": None,
        "instruction": h,
    }
    out = _rendered(lambda console: render_explain([row, {**row, "representative": False}], h, console))
    assert not unsafe(out) and SGR.sub("", out).count(r"[/bold]\x1b]0;pwned\x07") >= 8


# --- fuzz: random text with control sequences and markup -----------------------------------------------

PIECES = st.sampled_from(
    [
        OSC8,
        OSC0,
        "\x1b[2J",
        "\x1b[31m",
        "\x1b[0m",
        "\x1b",
        "\x9b",
        "\x9d0;t\x9c",
        "\x07",
        "\r",
        "\r\n",
        "\x00",
        "\x7f",
        "\u202e",
        "\u2066",
        "[bold]",
        "[/]",
        "[/bold]",
        "[link=javascript:alert(1)]",
        "[/link]",
        ":smile:",
        "\\",
        "<think>",
        "</think>",
        "\n",
        "\t",
        "[",
        "]",
    ]
)
TEXT = st.lists(st.one_of(PIECES, st.text(max_size=12)), max_size=16).map("".join)


def _row(task: str, content: str, role: str) -> dict:
    messages = [
        {"role": "user", "content": content},
        {"role": role, "content": content},
        {"role": "assistant", "content": None},
    ]
    return {
        "trajectory_id": "0" * 16,
        "source": task,
        "task": task,
        "trace_source": task,
        "n_messages": 3,
        "n_assistant_turns": 1,
        "exception_type": task or None,
        "reward": 1.0,
        "messages": messages,
    }


def _visible_pieces(text: str) -> list[str]:
    """The pieces of `printable(text)` between line breaks and tabs (a tab's width depends on its
    column and the width of the characters before it), as rich lays them out: trailing space gone."""
    from tracelake.core.ui import printable

    pieces = [piece.rstrip() for line in printable(text).split("\n") for piece in line.split("\t")]
    return [piece for piece in pieces if piece]


def _check_renderers(task: str, content: str, role: str) -> None:
    import pyarrow as pa

    from tracelake.core.ui import printable
    from tracelake.explore.show import render
    from tracelake.explore.sql import write_result

    safe = printable(content)
    assert not CONTROL.findall(safe) and printable(safe) == safe  # visible, and escaping it again changes nothing
    out = _rendered(lambda console: render(_row(task, content, role), console, full=True))
    assert not unsafe(out), (task, content)
    plain = SGR.sub("", out)
    if "\t" not in task:  # (a tab's width depends on its column)
        assert f"{printable(task)} / {printable(task)}" in plain  # markup of the data is never interpreted
    for piece in _visible_pieces(content):
        assert piece in plain, (piece, content)
    table = pa.table({task or "x": [content, task]})
    out = _rendered(lambda console: write_result(table, "table", None, console))
    assert not unsafe(out) and "\x1b]8" not in out


def _fuzz(examples: int) -> None:
    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(task=TEXT, content=TEXT, role=st.one_of(st.sampled_from(["user", "tool", "assistant"]), TEXT))
    def run(task, content, role):
        _check_renderers(task, content, role)

    run()


def test_fuzz_terminal_output():
    _fuzz(FUZZ_EXAMPLES)


@pytest.mark.long
def test_fuzz_terminal_output_long():
    _fuzz(3000)
