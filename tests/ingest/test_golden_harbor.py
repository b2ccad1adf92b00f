"""Ingest Harbor's own golden runs and compare with Harbor's own exports (*.traces.json).

Harbor's golden trajectories are normalised by Harbor's test suite differently from its golden
traces in one respect: bare shell-prompt lines (`root@CONTAINER_ID:/app#`) and the blank padding of
the terminal screen are absent from the ATIF files. Messages are compared byte for byte; where they
differ, they must be equal once that padding is removed from both sides, and the test counts how
many needed it (only user messages that carry a terminal screen may).
"""

from __future__ import annotations

import json
import re

import pytest

from tracelake.core.tables import read_table
from tracelake.ingest.harbor import ingest_harbor

from ..helpers import GOLDEN, make_golden_trials, need

_PROMPT_LINE = re.compile(r"^root@CONTAINER_ID:/app#$\n?", re.MULTILINE)


def without_screen_padding(text: str) -> str:
    return re.sub(r"\n{2,}", "\n\n", _PROMPT_LINE.sub("", text))


def golden_last_episode(name: str) -> list[dict]:
    rows = json.loads((need(GOLDEN) / name).read_text())
    last = max(rows, key=lambda r: int(r["episode"].split("-")[1]))
    return last["conversations"]


def assert_same_conversation(ours: list[dict], gold: list[dict]) -> int:
    """Message-by-message equality; returns how many needed the screen-padding normalisation."""
    assert [m["role"] for m in ours] == [m["role"] for m in gold]
    padded = 0
    for i, (a, b) in enumerate(zip(ours, gold)):
        if a["content"] == b["content"]:
            continue
        assert a["role"] == "user" and "root@CONTAINER_ID:/app#" in b["content"], f"message {i} differs"
        assert without_screen_padding(a["content"]) == without_screen_padding(b["content"]), f"message {i}"
        padded += 1
    return padded


@pytest.fixture(scope="module")
def golden_lake(tmp_path_factory) -> dict[tuple[str, str], dict]:
    """The golden runs laid out as one Harbor job and ingested; rows keyed by (trial, trace_source)."""
    jobs = tmp_path_factory.mktemp("golden") / "jobs"
    make_golden_trials(jobs, "linear__1", "summ__1", "invalid__1", "timeout__1")
    out = jobs.parent / "lake"
    result = ingest_harbor(jobs, source="golden", out_dir=out)
    assert result.rejects == 0
    rows = read_table(out, "trajectories").to_pylist()
    return {(r["trial_name"], r["trace_source"]): r for r in rows}


def test_main_trajectory_with_continuation_matches_harbor_export(golden_lake):
    row = golden_lake[("linear__1", "main")]
    gold = golden_last_episode("hello-world-context-summarization.traces.json")
    padded = assert_same_conversation(row["messages"], gold)
    assert len(gold) == 11 and padded <= 5
    assert row["episode"] == "episode-6" and row["n_episodes"] == 7  # Harbor's episode numbering
    assert [p["path"].rsplit("/", 1)[-1] for p in row["provenance"]] == [
        "result.json",
        "trajectory.json",
        "trajectory.cont-1.json",
    ]


def test_terminus_json_replies_recovered_from_atif(golden_lake):
    """ATIF holds 'Analysis/Plan' + tool calls; the export holds the JSON the model wrote."""
    row = golden_lake[("invalid__1", "main")]
    gold = golden_last_episode("hello-world-invalid-json.traces.json")
    assert_same_conversation(row["messages"], gold)
    assistants = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
    assert all(a.startswith("<think>") for a in assistants)
    assert assistants == [m["content"] for m in gold if m["role"] == "assistant"]  # byte for byte


@pytest.mark.parametrize("kind", ["summary", "questions", "answers"])
def test_subagents_are_their_own_rows(golden_lake, kind):
    row = golden_lake[("summ__1", f"summarization-1-{kind}")]
    assert row["is_subagent"] and row["episode"] == "episode-0"
    gold = golden_last_episode(f"hello-world-context-summarization.summarization-1-{kind}.traces.json")
    assert_same_conversation(row["messages"], gold)


def test_timeout_and_derived_columns(golden_lake):
    row = golden_lake[("timeout__1", "main")]
    assert row["timed_out"] and row["exception_type"] == "AgentTimeoutError" and row["result"] == "AgentTimeoutError"
    assert row["reward"] is None
    for r in golden_lake.values():
        assert r["n_messages"] == len(r["messages"])
        assert r["n_assistant_turns"] == sum(m["role"] == "assistant" for m in r["messages"])
        assert r["n_chars"] == sum(len(m["content"]) for m in r["messages"])
    main = [r for r in golden_lake.values() if not r["is_subagent"]]
    assert all(r["messages"][-1]["role"] == "assistant" for r in main)


def test_padding_normalisation_is_needed_only_for_screens(golden_lake):
    """Guard the test itself: without normalisation, exactly the terminal-screen messages differ."""
    row = golden_lake[("linear__1", "main")]
    gold = golden_last_episode("hello-world-context-summarization.traces.json")
    differing = [i for i, (a, b) in enumerate(zip(row["messages"], gold)) if a["content"] != b["content"]]
    assert differing and all("root@CONTAINER_ID:/app#" in gold[i]["content"] for i in differing)
    assert all(row["messages"][i]["role"] == "user" for i in differing)
