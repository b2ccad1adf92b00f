"""Harbor ingest: every reject reason, the accounting identity, --strict, determinism."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tracelake.core.errors import BadInput, RejectedInput
from tracelake.core.executor import Executor
from tracelake.core.outputs import read_manifest
from tracelake.core.tables import read_table
from tracelake.ingest.harbor import discover, ingest_harbor

from ..helpers import make_trial, result_json, simple_trajectory, tree_bytes


def run(jobs: Path, **kw):
    out = jobs.parent / "lake"
    result = ingest_harbor(jobs, source="src", out_dir=out, **kw)
    return result, read_table(out, "trajectories").to_pylist(), read_table(out, "rejects").to_pylist()


def only_reject(jobs: Path) -> dict:
    result, rows, rejects = run(jobs)
    assert result.inputs == result.rows + result.rejects
    assert len(rejects) == 1, rejects
    return rejects[0]


def test_good_trial_becomes_one_row(tmp_path):
    make_trial(tmp_path / "jobs", "hello__a")
    result, rows, rejects = run(tmp_path / "jobs")
    assert (result.inputs, result.rows, result.rejects) == (1, 1, 0)
    row = rows[0]
    assert row["task"] == "hello" and row["trial_name"] == "hello__a" and row["run_id"] == "job-1"
    assert row["n_assistant_turns"] == 3 and row["n_messages"] == 6 and row["reward"] == 1.0
    assert row["messages"][1]["content"].startswith('{\n  "analysis": "step 0"')  # terminus JSON recovered
    assert not row["timed_out"] and not row["is_subagent"] and row["episode"] == "episode-2"


BAD_TRAJECTORIES = {
    "unparsable_json": b'{"steps": [',
    "invalid_utf8": b'{"steps": [{"step_id": 1, "source": "user", "message": "caf\xff"}]}',
    "lone_surrogate": b'{"steps": [{"step_id": 1, "source": "user", "message": "x\\ud800y"}]}',
    "empty_conversation": json.dumps({"steps": [{"step_id": 1, "source": "user", "message": "hi"}]}).encode(),
    "unknown_role": json.dumps({"steps": [{"step_id": 1, "source": "environment", "message": "hi"}]}).encode(),
    "missing_required_field": json.dumps({"agent": {"name": "terminus-2"}}).encode(),
    "multimodal_content": json.dumps(
        {
            "steps": [
                {"step_id": 1, "source": "user", "message": [{"type": "image", "source": {"path": "x.png"}}]},
                {"step_id": 2, "source": "agent", "message": "ok"},
            ]
        }
    ).encode(),
}


@pytest.mark.parametrize("reason", sorted(BAD_TRAJECTORIES))
def test_bad_trajectory_is_rejected_with_reason(tmp_path, reason):
    make_trial(tmp_path / "jobs", "t__1", files={"trajectory.json": BAD_TRAJECTORIES[reason]})
    rej = only_reject(tmp_path / "jobs")
    assert rej["reason"] == reason
    assert rej["path"] == "job-1/t__1/agent/trajectory.json" and rej["trace_source"] == "main"
    assert rej["detail"] and rej["input_kind"] == "harbor"


def test_missing_result_json_rejects_every_trace_of_the_trial(tmp_path):
    make_trial(
        tmp_path / "jobs",
        "t__1",
        result=None,
        files={"trajectory.json": simple_trajectory(), "trajectory.summarization-1-summary.json": simple_trajectory(1)},
    )
    result, rows, rejects = run(tmp_path / "jobs")
    assert (result.inputs, result.rows) == (2, 0)
    assert {(r["reason"], r["trace_source"]) for r in rejects} == {
        ("missing_result_json", "main"),
        ("missing_result_json", "summarization-1-summary"),
    }


def test_result_json_problems(tmp_path):
    jobs = tmp_path / "jobs"
    no_task = result_json("x", "a__1")
    del no_task["task_name"]
    make_trial(jobs, "a__1", result=no_task)
    make_trial(jobs, "b__1", result=result_json("x", "b__1", reward="lots"))
    (make_trial(jobs, "c__1") / "result.json").write_bytes(b"{not json")
    result, rows, rejects = run(jobs)
    assert [(r["path"].split("/")[1], r["reason"]) for r in rejects] == [
        ("a__1", "missing_required_field"),
        ("b__1", "invalid_field"),
        ("c__1", "unparsable_json"),
    ]


def test_trial_without_trajectory(tmp_path):
    jobs = tmp_path / "jobs"
    make_trial(jobs, "t__1", files={})
    assert only_reject(jobs)["reason"] == "missing_trajectory"
    # a trial whose agent never started: result.json only, no agent/ directory
    shutil.rmtree(jobs / "job-1" / "t__1" / "agent")
    assert discover(jobs)[0] == [jobs / "job-1" / "t__1"]
    assert only_reject(jobs)["reason"] == "missing_trajectory"


def test_duplicate_trial_keeps_the_first(tmp_path):
    jobs = tmp_path / "jobs"
    make_trial(jobs, "t__1", job="job-1")
    make_trial(jobs, "t__1", job="job-2", result=result_json("hello", "t__1", job="job-1"))
    result, rows, rejects = run(jobs)
    assert len(rows) == 1 and rows[0]["provenance"][0]["path"].startswith("job-1/")
    assert rejects[0]["reason"] == "duplicate_trial" and rejects[0]["path"].startswith("job-2/")
    assert "job-1/t__1" in rejects[0]["detail"]


def test_a_rejected_copy_claims_no_identity(tmp_path):
    """The same trial in two directories, the first with a corrupt trajectory: the first is rejected
    for its own reason and the good copy is ingested (only an ingested row claims a trial)."""
    jobs = tmp_path / "jobs"
    make_trial(jobs, "t__1", job="a", files={"trajectory.json": b"{not json"})
    make_trial(jobs, "t__1", job="a-retry", result=result_json("hello", "t__1", job="a"))
    result, rows, rejects = run(jobs)
    assert [r["provenance"][0]["path"].split("/")[0] for r in rows] == ["a-retry"]
    assert [(r["path"].split("/")[0], r["reason"]) for r in rejects] == [("a", "unparsable_json")]


@pytest.mark.parametrize("workers", [0, 2])
def test_when_both_copies_are_good_the_first_path_wins_every_time(tmp_path, workers):
    """Two good copies of one trial: the copy whose trial directory sorts first is ingested, the
    other rejected as its duplicate, on every run and with any worker count."""
    jobs = tmp_path / "jobs"
    make_trial(jobs, "t__1", job="b", result=result_json("hello", "t__1", job="b"))
    make_trial(jobs, "t__1", job="a", result=result_json("hello", "t__1", job="b"))
    for attempt in range(2):
        result = ingest_harbor(
            jobs, source="src", out_dir=tmp_path / f"out-{attempt}", executor=Executor("processes", workers)
        )
        rows = read_table(tmp_path / f"out-{attempt}", "trajectories").to_pylist()
        rejects = read_table(tmp_path / f"out-{attempt}", "rejects").to_pylist()
        assert (result.rows, result.rejects) == (1, 1)
        assert rows[0]["provenance"][0]["path"].startswith("a/")
        assert rejects[0]["reason"] == "duplicate_trial" and rejects[0]["path"].startswith("b/")
    assert tree_bytes(tmp_path / "out-0") == tree_bytes(tmp_path / "out-1")


def test_same_bytes_whatever_the_worker_count_and_batch(tmp_path, monkeypatch):
    """Trials are read in worker processes, TRIAL_BATCH at a time, each batch a part: any worker
    count gives the same bytes; any batch size the same rows, rejects and manifest (duplicates
    across batches included: the part that loses one is written again)."""
    import tracelake.ingest.harbor as harbor

    jobs = tmp_path / "jobs"
    for i in range(23):
        make_trial(jobs, f"t__{i}", job="job-1", task=f"task{i % 4}")
    for i in (2, 9, 20):  # the same trials again, in a later job: rejected, whole
        make_trial(
            jobs,
            f"t__{i}",
            job="job-2",
            task=f"task{i % 4}",
            result=result_json(f"task{i % 4}", f"t__{i}", job="job-1"),
        )
    make_trial(jobs, "t__bad", job="job-2", files={"trajectory.json": b"{"})
    outs, tables = {}, {}
    for workers, batch in ((1, 4), (2, 4), (3, 4), (2, 7), (2, 64)):
        monkeypatch.setattr(harbor, "TRIAL_BATCH", batch)
        out = tmp_path / f"lake-{workers}-{batch}"
        result = ingest_harbor(jobs, source="src", out_dir=out, executor=Executor("processes", workers))
        assert (result.rows, result.rejects) == (23, 4)
        outs[workers, batch] = tree_bytes(out)
        tables[batch] = (read_table(out, "trajectories"), read_table(out, "rejects"), read_manifest(out)["version_id"])
    assert outs[1, 4] == outs[2, 4] == outs[3, 4]
    first = tables[4]
    assert all(t[0].equals(first[0]) and t[1].equals(first[1]) and t[2] == first[2] for t in tables.values())
    assert sorted(r["reason"] for r in first[1].to_pylist()) == ["duplicate_trial"] * 3 + ["unparsable_json"]


def test_continuations_join_and_broken_ones_are_rejected(tmp_path):
    jobs = tmp_path / "jobs"
    first = simple_trajectory(2)
    first["continued_trajectory_ref"] = "trajectory.cont-1.json"
    cont = simple_trajectory(4)
    cont["steps"][1]["is_copied_context"] = True
    make_trial(jobs, "ok__1", files={"trajectory.json": first, "trajectory.cont-1.json": cont})
    make_trial(jobs, "bad__1", files={"trajectory.json": first})
    loop = dict(first, continued_trajectory_ref="trajectory.json")
    make_trial(jobs, "loop__1", files={"trajectory.json": loop})
    result, rows, rejects = run(jobs)
    assert len(rows) == 1 and rows[0]["trial_name"] == "ok__1"
    # 2 episodes in the first file, 3 in the continuation (its copied agent step starts none)
    assert rows[0]["n_episodes"] == 5 and rows[0]["episode"] == "episode-4"
    assert rows[0]["n_assistant_turns"] == 4 and not rows[0]["is_subagent"]
    assert sorted(r["reason"] for r in rejects) == ["broken_continuation", "broken_continuation"]


def test_subagent_rows_and_timeouts(tmp_path):
    jobs = tmp_path / "jobs"
    make_trial(
        jobs,
        "t__1",
        result=result_json("hello", "t__1", exception="AgentTimeoutError", reward=None),
        files={
            "trajectory.json": simple_trajectory(5),
            "trajectory.summarization-1-summary.json": simple_trajectory(1),
        },
    )
    _, rows, _ = run(jobs)
    by_source = {r["trace_source"]: r for r in rows}
    assert set(by_source) == {"main", "summarization-1-summary"}
    assert by_source["summarization-1-summary"]["is_subagent"]
    assert all(r["timed_out"] and r["result"] == "AgentTimeoutError" for r in rows)
    assert by_source["main"]["task_id"] == by_source["summarization-1-summary"]["task_id"]


def test_strict_stops_at_first_reject_and_writes_nothing(tmp_path):
    jobs = tmp_path / "jobs"
    make_trial(jobs, "t__1", files={"trajectory.json": b"{"})
    with pytest.raises(RejectedInput, match=r"job-1/t__1/agent/trajectory.json: unparsable_json"):
        ingest_harbor(jobs, source="src", out_dir=tmp_path / "lake", strict=True)
    assert not (tmp_path / "lake").exists() and not list(tmp_path.glob(".lake*"))


def test_not_a_directory(tmp_path):
    with pytest.raises(BadInput, match="not a directory"):
        ingest_harbor(tmp_path / "nope", source="src", out_dir=tmp_path / "lake")


def test_reingest_is_byte_identical_and_ids_stable(tmp_path):
    jobs = tmp_path / "jobs"
    for i in range(5):
        make_trial(jobs, f"t__{i}", files={"trajectory.json": simple_trajectory(i + 1)})
    make_trial(jobs, "bad__1", files={"trajectory.json": b"nope"})
    a, b = tmp_path / "a", tmp_path / "b"
    ingest_harbor(jobs, source="src", out_dir=a)
    moved = tmp_path / "elsewhere" / "jobs"  # same content at another place: same ids and bytes
    shutil.copytree(jobs, moved)
    ingest_harbor(moved, source="src", out_dir=b)
    assert tree_bytes(a / "trajectories") == tree_bytes(b / "trajectories")
    assert (a / "rejects.parquet").read_bytes() == (b / "rejects.parquet").read_bytes()
    ma, mb = read_manifest(a), read_manifest(b)
    assert ma["tables"] == mb["tables"] and ma["version_id"] == mb["version_id"]
    assert ma["counts"] == {
        "source": "src",
        "inputs": 6,
        "rows": 5,
        "rejects": 1,
        "rejects_by_reason": {"unparsable_json": 1},
    }
