"""Tests for benchmarks/openthoughts.py (the benchmarks' corpus): determinism, realistic sizes and shares, ingestible
output (trace rows and task directories with 0 rejects), the refusal of a non-empty directory."""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from pathlib import Path

import orjson
import pytest

from benchmarks.openthoughts import PREAMBLE, openthoughts_rows, synthesize_openthoughts
from tracelake.core.errors import BadInput, BadParams
from tracelake.ingest.tasks import ingest_tasks
from tracelake.ingest.traces import ingest_traces

DIST_ROWS = 2000


def _rows(out: Path) -> list[dict]:
    return [
        orjson.loads(line)
        for f in sorted((out / "traces").glob("part-*.jsonl"))
        for line in f.read_bytes().splitlines()
    ]


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("ot") / "small"
    return out, synthesize_openthoughts(out, rows=60, seed=3, rows_per_file=25)


@pytest.fixture(scope="module")
def dist() -> list[dict]:
    """2000 rows as synthesize_openthoughts would write them, their text dropped once measured."""
    shapes = []
    for row in openthoughts_rows(rows=DIST_ROWS, seed=0):
        convo = row.pop("conversations")
        row["n_messages"] = len(convo)
        row["chars"] = sum(len(m["content"]) for m in convo)
        row["roles"] = "".join(m["role"][0] for m in convo)
        row["n_assistant"] = row["roles"].count("a")
        shapes.append(row)
    return shapes


# --- layout and determinism ------------------------------------------------------------------


def test_layout_and_manifest(small: tuple[Path, dict]) -> None:
    out, manifest = small
    parts = sorted(p.name for p in (out / "traces").iterdir())
    assert parts == ["part-00000.jsonl", "part-00001.jsonl", "part-00002.jsonl"]
    assert [f["rows"] for f in manifest["files"]] == [25, 25, 10]
    assert manifest == json.loads((out / "synth_manifest.json").read_text())
    assert manifest["rows"] == 60 and manifest["tasks"] == 10  # rows / 6 by default
    assert manifest["total_bytes"] == sum(p.stat().st_size for p in (out / "traces").iterdir())
    assert len(list((out / "tasks").iterdir())) == 10
    rows = _rows(out)
    assert len(rows) == 60
    n_messages = [len(r["conversations"]) for r in rows]
    chars = [sum(len(m["content"]) for m in r["conversations"]) for r in rows]
    stats = manifest["stats"]
    assert stats["messages_per_row"]["median"] == statistics.median(n_messages)
    assert stats["messages_per_row"]["max"] == max(n_messages)
    assert stats["chars_per_row"]["max"] == max(chars)
    assert stats["bytes_per_row"]["min"] == min(len(orjson.dumps(r)) + 1 for r in rows)
    assert sum(v for k, v in manifest["counts"].items() if k.startswith("result=")) == 60
    assert list(rows[0]) == [
        "conversations",
        "agent",
        "model",
        "model_provider",
        "date",
        "task",
        "episode",
        "run_id",
        "trial_name",
        "trace_source",
        "result",
    ]
    base = {re.sub(r"_copy\d{4}$", "", r["task"]) for r in rows}
    assert base == {p.name for p in (out / "tasks").iterdir()}
    for r in rows:
        assert re.fullmatch(r"[a-z0-9-]+-\d{5}_copy\d{4}", r["task"])
        assert re.fullmatch(re.escape(r["task"]) + r"__[A-Za-z0-9]{7}", r["trial_name"])
        assert r["agent"] == "terminus-2" and r["model"] == "hosted_vllm/glm"
        first = r["conversations"][0]["content"]
        assert first.startswith(PREAMBLE + "Task Description:\n")
        assert "\n\nCurrent terminal state:\nCurrent Terminal Screen:\n" in first
        instruction = first[len(PREAMBLE) + len("Task Description:\n") :].split("\n\nCurrent terminal state:")[0]
        name = re.sub(r"_copy\d{4}$", "", r["task"])
        assert (out / "tasks" / name / "instruction.md").read_text() == instruction + "\n"
        second = r["conversations"][1]["content"]
        assert second.startswith("<think>")
        answer = json.loads(second.split("</think>", 1)[1])
        assert set(answer) == {"analysis", "plan", "commands", "task_complete"}
        assert all(set(c) == {"keystrokes", "duration"} for c in answer["commands"])


def test_same_args_same_bytes_and_rows_per_file_only_splits(tmp_path: Path, small: tuple[Path, dict]) -> None:
    out, manifest = small
    again = synthesize_openthoughts(tmp_path / "again", rows=60, seed=3, rows_per_file=25)
    assert again == manifest
    assert _tree(tmp_path / "again") == _tree(out)
    one_file = synthesize_openthoughts(tmp_path / "one", rows=60, seed=3, rows_per_file=1000)
    assert len(one_file["files"]) == 1
    joined = b"".join(p.read_bytes() for p in sorted((out / "traces").iterdir()))
    assert (tmp_path / "one" / "traces" / "part-00000.jsonl").read_bytes() == joined
    assert _tree(tmp_path / "one" / "tasks") == _tree(out / "tasks")
    streamed = b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in openthoughts_rows(rows=60, seed=3))
    assert streamed == joined
    other = synthesize_openthoughts(tmp_path / "seed4", rows=60, seed=4, rows_per_file=1000)
    assert other["total_bytes"] != one_file["total_bytes"]


def test_refuses_a_non_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "keep.txt").write_text("mine")
    with pytest.raises(BadInput, match="not empty"):
        synthesize_openthoughts(tmp_path / "x", rows=5)
    assert [p.name for p in (tmp_path / "x").iterdir()] == ["keep.txt"]
    with pytest.raises(BadParams, match="rows must be an integer >= 1"):
        synthesize_openthoughts(tmp_path / "y", rows=0)


# --- realism ---------------------------------------------------------------------------------


def test_sizes_match_published_rows(dist: list[dict]) -> None:
    shapes = dist
    n_messages = [s["n_messages"] for s in shapes]
    chars = [s["chars"] for s in shapes]
    assert len(shapes) == DIST_ROWS
    assert 25 <= statistics.median(n_messages) <= 40
    assert 40_000 <= statistics.median(chars) <= 90_000
    assert min(n_messages) >= 10
    assert max(n_messages) >= 200
    assert max(n_messages) <= 460
    even = sum(n % 2 == 0 for n in n_messages) / len(n_messages)
    assert 0.75 <= even < 1.0  # mostly even, a few rows stop on a user message


def test_shares_of_subagents_timeouts_rewards(dist: list[dict]) -> None:
    shapes = dist
    n = len(shapes)
    sources = Counter(s["trace_source"] for s in shapes)
    assert set(sources) == {"main", "summarization-1-summary"}
    assert 0.03 <= sources["summarization-1-summary"] / n <= 0.07
    results = Counter(s["result"] for s in shapes)
    assert set(results) == {None, "1.0", "0.0", "AgentTimeoutError"}
    assert 0.07 <= results["AgentTimeoutError"] / n <= 0.13
    assert 0.15 <= (results["1.0"] + results["0.0"]) / n <= 0.25
    for s in shapes:
        if s["trace_source"] == "main":
            assert s["episode"] == f"episode-{s['n_assistant'] - 1}"
            assert "uu" not in s["roles"]
        else:  # a summary subagent: ..., observation, hand-off request, summary
            assert s["episode"] == "episode-0" and s["roles"].endswith("uua")
    tasks = Counter(re.sub(r"_copy\d{4}$", "", s["task"]) for s in shapes)
    assert len(tasks) == round(DIST_ROWS / 6)
    assert len({s["task"] for s in shapes}) == DIST_ROWS  # each rollout its own copy
    assert len({s["run_id"] for s in shapes}) == DIST_ROWS


def test_text_is_not_repeated_across_rows(small: tuple[Path, dict]) -> None:
    """Apart from the preamble and the first message that copies of a task share, messages do not
    repeat between rows; observations hold varied terminal output, not a few fixed strings."""
    out, _ = small
    rows = _rows(out)
    owner: dict[str, int] = {}
    for i, r in enumerate(rows):
        for m in r["conversations"][1:]:  # a hand-off request quotes the task's instruction
            if len(m["content"]) > 400 and not m["content"].startswith("You are about to hand"):
                assert owner.setdefault(m["content"], i) == i
    firsts = Counter(r["conversations"][0]["content"] for r in rows)
    by_task = Counter(re.sub(r"_copy\d{4}$", "", r["task"]) for r in rows)
    assert sorted(firsts.values()) == sorted(by_task.values())
    lines = Counter(
        line
        for r in rows
        for m in r["conversations"][1:]
        if m["role"] == "user"
        for line in m["content"].split("\n")
        if len(line) > 30
    )
    assert len(lines) / sum(lines.values()) > 0.7  # boilerplate (warnings, prompts) aside


# --- the lake takes it -----------------------------------------------------------------------


def test_ingest_traces_takes_every_row(tmp_path: Path, small: tuple[Path, dict]) -> None:
    out, manifest = small
    result = ingest_traces([out / "traces"], source="ot", out_dir=tmp_path / "trajectories")
    assert (result.rows, result.rejects) == (manifest["rows"], 0)


def test_ingest_tasks_takes_every_task(tmp_path: Path, small: tuple[Path, dict]) -> None:
    out, manifest = small
    result = ingest_tasks(out / "tasks", source="ot", out_dir=tmp_path / "tasks")
    assert (result.rows, result.rejects) == (manifest["tasks"], 0)
