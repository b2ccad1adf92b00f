"""Hostile inputs to `ingest harbor` and `ingest traces`: wrongly typed ATIF fields, JSON nested past
any parser's limit, unreadable directories, names that are not UTF-8, non-finite rewards, objects where
names belong, symlinks out of the input root and directory loops.

The rule every test checks: each input ends as a row or a reject with a snake_case reason, nothing
aborts the source, `inputs = rows + rejects`, and nothing outside the input root reaches the lake.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tracelake.core.executor import Executor
from tracelake.core.tables import read_table
from tracelake.ingest.harbor import ingest_harbor
from tracelake.ingest.traces import ingest_traces

from ..helpers import make_trial, result_json, run_tracelake, simple_trajectory

SECRET = b"TOP-SECRET-0xdeadbeef-never-in-the-lake"


def harbor(jobs: Path, **kw):
    out = jobs.parent / "lake"
    result = ingest_harbor(jobs, source="src", out_dir=out, executor=Executor("processes", 1), **kw)
    assert result.inputs == result.rows + result.rejects
    return result, read_table(out, "trajectories").to_pylist(), read_table(out, "rejects").to_pylist()


def traces(paths: list[Path], out: Path):
    result = ingest_traces(paths, source="src", out_dir=out, executor=Executor("processes", 1))
    assert result.inputs == result.rows + result.rejects
    return result, read_table(out, "trajectories").to_pylist(), read_table(out, "rejects").to_pylist()


def reasons(rejects: list[dict]) -> dict[str, str]:
    return {r["path"]: r["reason"] for r in rejects}


def nothing_leaks(*places: Path) -> None:
    """The secret's bytes are in no file under any of the places."""
    for place in places:
        files = [place] if place.is_file() else [p for p in place.rglob("*") if p.is_file()]
        for f in files:
            assert SECRET not in f.read_bytes(), f"{f} holds the secret"


def deep(n: int) -> bytes:
    return b"[" * n + b"]" * n


def row(task: str = "t", text: str = "hello") -> dict:
    return {
        "conversations": [{"role": "user", "content": "q"}, {"role": "assistant", "content": text}],
        "task": task,
        "trace_source": "main",
        "result": "1.0",
    }


# --- ATIF fields of the wrong type -------------------------------------------------------------


def _mutate(path: str, value):
    """A trajectory whose field at `path` (keys and indices from the document root) is `value`."""
    doc = simple_trajectory()
    *parents, last = path
    node = doc
    for k in parents:
        node = node[k]
    node[last] = value
    return doc


WRONG_TYPES = {
    "tool_calls_string": (("steps", 1, "tool_calls"), "bash_command"),
    "tool_calls_strings": (("steps", 1, "tool_calls"), ["bash_command", "x"]),
    "observation_list": (("steps", 1, "observation"), [{"content": "hi"}]),
    "observation_results_string": (("steps", 1, "observation", "results"), "hi"),
    "observation_result_item": (("steps", 1, "observation", "results"), ["hi", 3]),
    "observation_content_number": (("steps", 1, "observation", "results", 0, "content"), 5),
    "agent_string": (("agent",), "terminus-2"),
    "agent_extra_string": (("agent", "extra"), "json"),
    "agent_name_object": (("agent", "name"), {"name": "terminus-2"}),
    "agent_model_list": (("agent", "model_name"), ["gpt"]),
    "message_object": (("steps", 1, "message"), {"text": "hi"}),
    "message_number": (("steps", 0, "message"), 42),
    "reasoning_content_list": (("steps", 1, "reasoning_content"), ["think"]),
    "reasoning_content_number": (("steps", 1, "reasoning_content"), 1.5),
    "function_name_number": (("steps", 1, "tool_calls", 0, "function_name"), 7),
    "arguments_list": (("steps", 1, "tool_calls", 0, "arguments"), ["echo hi"]),
    "is_copied_context_string": (("steps", 1, "is_copied_context"), "false"),
    "step_id_object": (("steps", 1, "step_id"), {"id": 2}),
    "step_source_list": (("steps", 1, "source"), ["agent"]),
}


@pytest.mark.parametrize("case", sorted(WRONG_TYPES))
def test_atif_field_of_wrong_type_is_rejected(tmp_path, case):
    path, value = WRONG_TYPES[case]
    make_trial(tmp_path / "jobs", "t__1", files={"trajectory.json": _mutate(path, value)})
    make_trial(tmp_path / "jobs", "t__2")
    result, rows, rejects = harbor(tmp_path / "jobs")
    assert len(rows) == 1 and rows[0]["trial_name"] == "t__2"
    assert reasons(rejects) == {"job-1/t__1/agent/trajectory.json": "invalid_field"}


def test_continuation_ref_of_wrong_type_is_a_broken_continuation(tmp_path):
    make_trial(tmp_path / "jobs", "t__1", files={"trajectory.json": _mutate(("continued_trajectory_ref",), {"f": 1})})
    _, rows, rejects = harbor(tmp_path / "jobs")
    assert not rows and reasons(rejects) == {"job-1/t__1/agent/trajectory.json": "broken_continuation"}


def test_subagent_with_wrong_types_is_rejected_alone(tmp_path):
    sub = _mutate(("steps", 1, "tool_calls"), "x")
    make_trial(
        tmp_path / "jobs",
        "t__1",
        files={"trajectory.json": simple_trajectory(), "trajectory.summarization-1-summary.json": sub},
    )
    _, rows, rejects = harbor(tmp_path / "jobs")
    assert [r["trace_source"] for r in rows] == ["main"]
    assert reasons(rejects) == {"job-1/t__1/agent/trajectory.summarization-1-summary.json": "invalid_field"}


# --- result.json fields ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field,value",
    [
        ("exception_info", {"exception_type": {"name": "AgentTimeoutError"}}),
        ("exception_info", {"exception_type": ["AgentTimeoutError"]}),
        ("started_at", {"iso": "2026-01-01"}),
        ("started_at", 1767225600),
        ("agent_info", {"name": {"n": "terminus-2"}}),
        ("agent_info", {"name": "terminus-2", "model_info": {"name": ["gpt"], "provider": "openai"}}),
        ("agent_info", {"name": "terminus-2", "model_info": {"name": "gpt", "provider": {"p": 1}}}),
        ("trial_name", ["t__1"]),
        ("config", {"job_id": {"id": "job-1"}}),
    ],
)
def test_result_field_of_wrong_type_is_rejected(tmp_path, field, value):
    doc = result_json("hello", "t__1")
    doc[field] = value
    make_trial(tmp_path / "jobs", "t__1", result=doc)
    _, rows, rejects = harbor(tmp_path / "jobs")
    assert not rows and reasons(rejects) == {"job-1/t__1/agent/trajectory.json": "invalid_field"}


@pytest.mark.parametrize("reward", ["nan", "NaN", "inf", "-Infinity", "1e999"])
def test_non_finite_reward_is_rejected_as_in_traces(tmp_path, reward):
    doc = result_json("hello", "t__1")
    doc["verifier_result"]["rewards"]["reward"] = reward
    make_trial(tmp_path / "jobs", "t__1", result=doc)
    _, rows, rejects = harbor(tmp_path / "jobs")
    assert not rows and reasons(rejects) == {"job-1/t__1/agent/trajectory.json": "invalid_field"}
    table = tmp_path / "t.jsonl"  # the same value in a trace table: the same reason
    table.write_text(json.dumps({**row(), "result": reward}) + "\n")
    _, trows, trejects = traces([table], tmp_path / "tlake")
    assert not trows and [r["reason"] for r in trejects] == ["invalid_field"]


@pytest.mark.parametrize("token", [b"NaN", b"-Infinity", b"Infinity"])
def test_non_finite_reward_token_is_not_json(tmp_path, token):
    trial = make_trial(tmp_path / "jobs", "t__1")
    text = json.dumps(result_json("hello", "t__1")).encode().replace(b'"reward": 1.0', b'"reward": ' + token)
    (trial / "result.json").write_bytes(text)
    _, rows, rejects = harbor(tmp_path / "jobs")
    assert not rows and reasons(rejects) == {"job-1/t__1/agent/trajectory.json": "unparsable_json"}


# --- JSON nested too deep ----------------------------------------------------------------------


@pytest.mark.parametrize("depth", [1100, 5000])
@pytest.mark.parametrize("where", ["trajectory", "result", "subagent", "continuation"])
def test_json_too_deep_is_rejected_naming_the_file(tmp_path, where, depth):
    body = b'{"steps": ' + deep(depth) + b"}"
    files = {"trajectory.json": simple_trajectory()}
    if where == "trajectory":
        files["trajectory.json"] = body
    elif where == "subagent":
        files["trajectory.summarization-1-summary.json"] = body
    elif where == "continuation":
        files["trajectory.json"] = {**simple_trajectory(), "continued_trajectory_ref": "trajectory.cont-1.json"}
        files["trajectory.cont-1.json"] = body
    trial = make_trial(tmp_path / "jobs", "t__1", files=files)
    if where == "result":
        (trial / "result.json").write_bytes(b'{"task_name": "x", "extra": ' + deep(depth) + b"}")
    make_trial(tmp_path / "jobs", "t__2")
    _, rows, rejects = harbor(tmp_path / "jobs")
    assert "t__2" in {r["trial_name"] for r in rows}
    bad = [r for r in rejects if r["reason"] == "json_too_deep"]
    assert len(bad) == 1, rejects
    named = {
        "trajectory": "agent/trajectory.json",
        "result": "result.json",
        "subagent": "agent/trajectory.summarization-1-summary.json",
        "continuation": "agent/trajectory.cont-1.json",
    }[where]
    assert named in bad[0]["detail"]


def test_deep_arguments_within_the_parser_limit_are_rejected_deterministically(tmp_path):
    """Nesting that orjson accepts (< 1024) but a recursive serializer would not is json_too_deep too,
    whatever the caller's stack depth."""
    doc = simple_trajectory()
    doc["steps"][1]["tool_calls"][0]["arguments"] = "DEEP"
    doc["steps"][2]["tool_calls"][0]["function_name"] = "other"  # no terminus JSON: arguments are dumped
    body = json.dumps(doc).encode().replace(b'"DEEP"', b"{" + b'"a": [' * 999 + b"]" * 999 + b"}")
    make_trial(tmp_path / "jobs", "t__1", files={"trajectory.json": body})
    _, rows, rejects = harbor(tmp_path / "jobs")
    assert not rows and [r["reason"] for r in rejects] == ["json_too_deep"]


def test_deep_trace_rows_are_rejected(tmp_path):
    table = tmp_path / "t.jsonl"
    good = json.dumps(row()).encode()
    bad = b'{"task": "x", "conversations": ' + deep(1100) + b"}"
    lone = b'{"task": "x", "note": "\\ud800", "conversations": ' + deep(990) + b"}"
    table.write_bytes(good + b"\n" + bad + b"\n" + lone + b"\n")
    _, rows, rejects = traces([table], tmp_path / "lake")
    assert len(rows) == 1
    assert [(r["row_index"], r["reason"]) for r in rejects] == [(1, "json_too_deep"), (2, "json_too_deep")]


@pytest.mark.parametrize("body", [b"[" + deep(1100) + b"]", b'[{"x": "\\ud800", "y": ' + deep(990) + b"}]"])
def test_deep_json_table_is_one_reject(tmp_path, body):
    table = tmp_path / "t.json"
    table.write_bytes(body)
    _, rows, rejects = traces([table], tmp_path / "lake")
    assert not rows and [(r["path"], r["reason"]) for r in rejects] == [("t.json", "json_too_deep")]


# --- unreadable directories and names that are not UTF-8 ---------------------------------------


@pytest.fixture
def unreadable(monkeypatch):
    """Make listing the given directories fail as it does without permission (tests run as root)."""
    blocked: set[str] = set()
    real_scandir, real_listdir = os.scandir, os.listdir

    def check(path):
        if isinstance(path, (str, bytes, os.PathLike)) and os.path.abspath(os.fsdecode(path)) in blocked:
            raise PermissionError(13, "Permission denied", os.fsdecode(path))

    def scandir(path="."):
        check(path)
        return real_scandir(path)

    def listdir(path="."):
        check(path)
        return real_listdir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "listdir", listdir)
    return lambda p: blocked.add(os.path.abspath(p))


def test_unreadable_job_directory_is_one_reject(tmp_path, unreadable):
    jobs = tmp_path / "jobs"
    make_trial(jobs, "t__1", job="job-1")
    make_trial(jobs, "t__2", job="job-2")
    unreadable(jobs / "job-2")
    _, rows, rejects = harbor(jobs)
    assert [r["trial_name"] for r in rows] == ["t__1"]
    assert reasons(rejects) == {"job-2": "unreadable_file"}


def test_unreadable_trace_directory_is_one_reject(tmp_path, unreadable):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x.jsonl").write_text(json.dumps(row()) + "\n")
    unreadable(tmp_path / "b")
    _, rows, rejects = traces([tmp_path / "a", tmp_path / "b"], tmp_path / "lake")
    assert len(rows) == 1 and reasons(rejects) == {"b": "unreadable_file"}


def test_trial_name_not_utf8_is_rejected_with_an_escaped_path(tmp_path):
    jobs = tmp_path / "jobs"
    make_trial(jobs, "t__1")
    src = jobs / "job-1" / "t__1"
    bad = os.path.join(os.fsencode(jobs / "job-1"), b"trial-\xff")
    os.mkdir(bad)
    for name in ("result.json", "agent"):
        os.rename(os.path.join(os.fsencode(src), name.encode()), os.path.join(bad, name.encode()))
    os.rmdir(src)
    make_trial(jobs, "t__2")
    _, rows, rejects = harbor(jobs)
    assert [r["trial_name"] for r in rows] == ["t__2"]
    assert reasons(rejects) == {"job-1/trial-\\xff": "invalid_path"}


def test_subagent_file_name_not_utf8_is_rejected_alone(tmp_path):
    trial = make_trial(tmp_path / "jobs", "t__1")
    with open(os.path.join(os.fsencode(trial / "agent"), b"trajectory.summ\xfe.json"), "wb") as f:
        f.write(json.dumps(simple_trajectory()).encode())
    _, rows, rejects = harbor(tmp_path / "jobs")
    assert [r["trace_source"] for r in rows] == ["main"]
    assert reasons(rejects) == {"job-1/t__1/agent/trajectory.summ\\xfe.json": "invalid_path"}


def test_trace_file_name_not_utf8_is_rejected(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.jsonl").write_text(json.dumps(row()) + "\n")
    with open(os.path.join(os.fsencode(d), b"b\xff.jsonl"), "wb") as f:
        f.write((json.dumps(row("u")) + "\n").encode())
    _, rows, rejects = traces([d], tmp_path / "lake")
    assert len(rows) == 1 and reasons(rejects) == {"b\\xff.jsonl": "invalid_path"}


# --- symlinks ----------------------------------------------------------------------------------


@pytest.fixture
def secret(tmp_path) -> Path:
    """A directory outside every input root, holding files whose bytes must never reach the lake."""
    d = tmp_path / "outside"
    d.mkdir()
    doc = simple_trajectory()
    doc["steps"][0]["message"] = SECRET.decode()
    (d / "trajectory.json").write_text(json.dumps(doc))
    (d / "result.json").write_text(json.dumps({**result_json(SECRET.decode(), "t__9"), "x": SECRET.decode()}))
    (d / "table.jsonl").write_text(json.dumps(row(SECRET.decode(), SECRET.decode())) + "\n")
    trial = d / "trial"
    (trial / "agent").mkdir(parents=True)
    (trial / "result.json").write_text((d / "result.json").read_text())
    (trial / "agent" / "trajectory.json").write_text((d / "trajectory.json").read_text())
    return d


LINKS = {  # where the link is (under jobs/job-1) -> what it points to (under the secret dir)
    "trajectory": ("t__1/agent/trajectory.json", "trajectory.json"),
    "result": ("t__1/result.json", "result.json"),
    "continuation": ("t__1/agent/trajectory.cont-1.json", "trajectory.json"),
    "subagent": ("t__1/agent/trajectory.summarization-1-summary.json", "trajectory.json"),
    "agent_dir": ("t__1/agent", "trial/agent"),
    "trial_dir": ("t__1", "trial"),
}


@pytest.mark.parametrize("case", sorted(LINKS))
def test_symlink_out_of_the_jobs_root_is_never_followed(tmp_path, secret, case):
    jobs = tmp_path / "jobs"
    link, target = LINKS[case]
    trajectory = simple_trajectory()
    if case == "continuation":
        trajectory["continued_trajectory_ref"] = "trajectory.cont-1.json"
    make_trial(jobs, "t__1", files={"trajectory.json": trajectory})
    make_trial(jobs, "t__2")
    path = jobs / "job-1" / link
    if path.is_dir():
        import shutil

        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    path.symlink_to(secret / target)
    metrics = tmp_path / "metrics.json"
    result, rows, rejects = harbor(jobs, metrics_path=metrics)
    assert "t__2" in {r["trial_name"] for r in rows}
    outside = [r for r in rejects if r["reason"] == "symlink_outside_input"]
    assert outside and all(f"job-1/{link}" in r["path"] + " " + r["detail"] for r in outside), rejects
    nothing_leaks(tmp_path / "lake", metrics)


def test_symlink_out_of_the_root_via_the_cli_leaks_nowhere(tmp_path, secret):
    jobs = tmp_path / "jobs"
    trial = make_trial(jobs, "t__1")
    (trial / "agent" / "trajectory.json").unlink()
    (trial / "agent" / "trajectory.json").symlink_to(secret / "trajectory.json")
    (jobs / "job-1" / "t__2").symlink_to(secret / "trial")
    args = ["ingest", "harbor", str(jobs), "--source", "s", "--out", str(tmp_path / "lake")]
    proc = run_tracelake(None, *args, "--metrics", str(tmp_path / "m.json"), "--workers", "1", columns=None, text=False)
    assert proc.returncode == 0, proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    assert b"symlink_outside_input 2" in proc.stdout
    nothing_leaks(tmp_path / "lake", tmp_path / "m.json")


def test_symlinks_inside_the_root_are_followed(tmp_path):
    jobs = tmp_path / "jobs"
    trial = make_trial(jobs, "t__1")
    (trial / "agent" / "shared.json").write_text(json.dumps(simple_trajectory()))
    (trial / "agent" / "trajectory.json").unlink()
    (trial / "agent" / "trajectory.json").symlink_to("shared.json")
    _, rows, rejects = harbor(jobs)
    assert len(rows) == 1 and not rejects


def test_directory_loop_is_walked_once(tmp_path):
    jobs = tmp_path / "jobs"
    for i in range(3):
        make_trial(jobs, f"t__{i}")
    (jobs / "job-1" / "loop").symlink_to(".")
    (jobs / "up").symlink_to("..")  # out of the root: rejected, not walked
    result, rows, rejects = harbor(jobs)
    assert len(rows) == 3
    assert reasons(rejects) == {"job-1/loop": "linked_directory", "up": "symlink_outside_input"}


def test_directory_link_inside_the_root_is_not_walked_twice(tmp_path):
    """`latest -> job-2` sorts before job-2: its trials are ingested once, from where they lie."""
    jobs = tmp_path / "jobs"
    make_trial(jobs, "t__1", job="job-2")
    (jobs / "a-latest").symlink_to("job-2")
    _, rows, rejects = harbor(jobs)
    assert [p["path"] for r in rows for p in r["provenance"]] == [
        "job-2/t__1/result.json",
        "job-2/t__1/agent/trajectory.json",
    ]
    assert reasons(rejects) == {"a-latest": "linked_directory"}


def test_trace_table_symlink_out_of_the_directory_is_rejected(tmp_path, secret):
    d = tmp_path / "tables"
    d.mkdir()
    (d / "a.jsonl").write_text(json.dumps(row()) + "\n")
    (d / "b.jsonl").symlink_to(secret / "table.jsonl")
    (d / "c.jsonl").symlink_to("a.jsonl")  # inside: followed (the identical row is a duplicate)
    metrics = tmp_path / "m.json"
    result = ingest_traces(
        [d], source="s", out_dir=tmp_path / "lake", executor=Executor("processes", 1), metrics_path=metrics
    )
    rejects = read_table(tmp_path / "lake", "rejects").to_pylist()
    assert result.rows == 1 and reasons(rejects) == {"b.jsonl": "symlink_outside_input", "c.jsonl": "duplicate_trial"}
    nothing_leaks(tmp_path / "lake", metrics)


# --- trace rows of the wrong shape (role as a list escaped as a TypeError: found by the fuzz) -------


@pytest.mark.parametrize(
    "change",
    [
        {"conversations": [{"role": ["user"], "content": "q"}, {"role": "assistant", "content": "a"}]},
        {"conversations": [{"role": {"r": 1}, "content": "q"}, {"role": "assistant", "content": "a"}]},
        {"conversations": [{"role": "user", "content": ["q"]}, {"role": "assistant", "content": "a"}]},
        {"conversations": "user: q"},
        {"task": ["t"]},
        {"trace_source": {"name": "main"}},
        {"date": ["2026"]},
        {"result": {"reward": 1}},
        {"result": "-Infinity"},
    ],
)
def test_trace_row_of_wrong_shape_is_rejected(tmp_path, change):
    table = tmp_path / "t.jsonl"
    table.write_text(json.dumps(row("a")) + "\n" + json.dumps({**row("b"), **change}) + "\n")
    _, rows, rejects = traces([table], tmp_path / "lake")
    assert [r["task"] for r in rows] == ["a"]
    assert [(r["row_index"], r["reason"]) for r in rejects] == [(1, "invalid_field")]
