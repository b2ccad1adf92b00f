"""Tests for tracelake.sample.synth: determinism, counts vs disk, faults, realism, validation."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tracelake.core.errors import BadInput
from tracelake.sample.synth import (
    DEFAULT_SOURCES,
    HARBOR_FAULTS,
    TRACE_FAULTS,
    SourceSpec,
    SynthSummary,
    synthesize,
)

TRIALS, TASKS = 2000, 300


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SynthSummary, dict]:
    out = tmp_path_factory.mktemp("synth") / "corpus"
    summary = synthesize(out, seed=0, trials=TRIALS, tasks=TASKS)
    manifest = json.loads((out / "synth_manifest.json").read_text())
    return out, summary, manifest


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _trial_dirs(out: Path, source: str) -> list[Path]:
    return sorted(p for p in (out / source / "jobs").glob("*/*") if p.is_dir())


def _harbor(manifest: dict) -> list[str]:
    return [s["name"] for s in manifest["params"]["sources"] if s["format"] == "harbor"]


def _fault_paths(manifest: dict) -> set[str]:
    return {f["path"] for f in manifest["faults"]}


def _valid_trajectories(out: Path, manifest: dict) -> list[tuple[Path, dict]]:
    bad = _fault_paths(manifest)
    found = []
    for source in _harbor(manifest):
        for path in sorted((out / source / "jobs").glob("*/*/agent/trajectory*.json")):
            if path.relative_to(out).as_posix() not in bad:
                found.append((path, json.loads(path.read_bytes())))
    return found


def _main_trajectories(out: Path, manifest: dict) -> list[tuple[Path, dict]]:
    return [(p, t) for p, t in _valid_trajectories(out, manifest) if p.name == "trajectory.json"]


def _agent_turns(path: Path, traj: dict) -> int:
    """Agent steps of a trial, counting its continuation file when there is one."""
    steps = list(traj["steps"])
    if traj.get("continued_trajectory_ref"):
        steps += json.loads((path.parent / traj["continued_trajectory_ref"]).read_bytes())["steps"]
    return sum(s["source"] == "agent" and not s.get("is_copied_context") for s in steps)


# --------------------------------------------------------------------------- determinism
def test_same_params_give_byte_identical_trees(tmp_path: Path) -> None:
    a = synthesize(tmp_path / "a", seed=7, trials=300, tasks=60)
    b = synthesize(tmp_path / "b", seed=7, trials=300, tasks=60)
    c = synthesize(tmp_path / "c", seed=8, trials=300, tasks=60)
    tree_a, tree_b, tree_c = (_tree(tmp_path / x) for x in "abc")
    assert a == b
    assert tree_a == tree_b
    assert tree_a != tree_c
    assert a.trials == c.trials  # same allocation, different content


def test_progress_called_once_per_trial(tmp_path: Path) -> None:
    calls: list[int] = []
    synthesize(tmp_path / "out", trials=120, tasks=30, progress=calls.append)
    assert calls == [1] * 120


def test_tiny_and_sparse_runs(tmp_path: Path) -> None:
    one = synthesize(tmp_path / "one", trials=1, tasks=1)
    assert sum(one.trials.values()) == 1 and sum(one.tasks.values()) == 1
    sparse = synthesize(tmp_path / "sparse", trials=10, tasks=40)
    assert sum(sparse.trials.values()) == 10 and sum(sparse.tasks.values()) == 40
    assert (tmp_path / "sparse" / "synth_manifest.json").is_file()


# --------------------------------------------------------------------------- counts
def test_summary_and_manifest_match_disk(corpus: tuple[Path, SynthSummary, dict]) -> None:
    out, summary, manifest = corpus
    assert sum(summary.trials.values()) == TRIALS
    assert sum(summary.tasks.values()) == TASKS
    for spec in DEFAULT_SOURCES:
        tasks = [p for p in (out / spec.name / "tasks").iterdir() if p.is_dir()]
        assert len(tasks) == summary.tasks[spec.name]
        if spec.format == "harbor":
            assert len(_trial_dirs(out, spec.name)) == summary.trials[spec.name]
        else:
            lines = (out / spec.name / "traces.jsonl").read_bytes().splitlines()
            assert len(lines) == summary.trials[spec.name] + sum(summary.extras[spec.name].values())
        counts = manifest["counts"][spec.name]
        assert counts == {
            "trials": summary.trials[spec.name],
            "tasks": summary.tasks[spec.name],
            "faults": summary.faults[spec.name],
            "extras": summary.extras[spec.name],
        }
        listed = Counter(f["fault"] for f in manifest["faults"] if f["source"] == spec.name)
        assert dict(listed) == summary.faults[spec.name]
    assert manifest["faults"] == sorted(manifest["faults"], key=lambda f: (f["path"], f["line"] or 0))


def test_fault_coverage_and_rate(corpus: tuple[Path, SynthSummary, dict]) -> None:
    _, summary, _ = corpus
    for spec in DEFAULT_SOURCES:
        expected = HARBOR_FAULTS if spec.format == "harbor" else TRACE_FAULTS
        assert set(summary.faults[spec.name]) == set(expected)
    total = sum(sum(f.values()) for f in summary.faults.values())
    assert 0.01 * TRIALS <= total <= 0.02 * TRIALS


def test_task_directories_complete(corpus: tuple[Path, SynthSummary, dict]) -> None:
    out, _, _ = corpus
    for task in sorted((out / "tezos" / "tasks").iterdir())[:10]:
        for rel in ("instruction.md", "task.toml", "environment/Dockerfile", "solution/solve.sh", "tests/test.sh"):
            assert (task / rel).is_file(), task / rel
    lines = [p.read_text().count("\n") for p in out.glob("*/tasks/*/instruction.md")]
    assert min(lines) == 1 and max(lines) >= 30


def test_every_task_has_a_trial_and_rollouts_are_uneven(corpus: tuple[Path, SynthSummary, dict]) -> None:
    out, _, _ = corpus
    for source in ("swesmith", "superuser", "tezos"):
        tasks = {p.name for p in (out / source / "tasks").iterdir()}
        per_task = Counter(p.name.split("__")[0] for p in _trial_dirs(out, source))
        assert set(per_task) == tasks
        assert min(per_task.values()) == 1 and max(per_task.values()) >= 10
    rows = (out / "nl2bash" / "traces.jsonl").read_text().splitlines()
    names = {json.loads(r)["trial_name"].split("__")[0] for r in rows if r.endswith("}")}
    assert names == {p.name for p in (out / "nl2bash" / "tasks").iterdir()}


# --------------------------------------------------------------------------- faults
def _check_harbor_fault(out: Path, fault: str, path: Path) -> None:
    if fault == "unparsable_json":
        with pytest.raises(ValueError):
            json.loads(path.read_bytes())
    elif fault == "invalid_utf8":
        with pytest.raises(UnicodeDecodeError):
            path.read_bytes().decode("utf-8")
    elif fault == "lone_surrogate":
        assert b"\\ud800" in path.read_bytes()
        assert any("\ud800" in s["message"] for s in json.loads(path.read_bytes())["steps"])
    elif fault == "empty_conversation":
        steps = json.loads(path.read_bytes())["steps"]
        assert [s["source"] for s in steps] == ["user"]
    elif fault == "unknown_role":
        steps = json.loads(path.read_bytes())["steps"]
        assert sum(s["source"] == "environment" for s in steps) == 1
    elif fault == "missing_required_field":
        result = json.loads(path.read_bytes())
        assert "task_name" not in result and "trial_name" in result
    elif fault == "missing_result_json":
        assert (path / "agent" / "trajectory.json").is_file()
        assert not (path / "result.json").exists()
    elif fault == "duplicate_trial":
        twins = [p for p in path.parent.parent.glob(f"*/{path.name}") if p != path]
        assert len(twins) == 1 and _tree(twins[0]) == _tree(path)
    else:
        raise AssertionError(f"unexpected fault {fault}")


def _check_trace_fault(line: bytes, fault: str) -> None:
    if fault == "unparsable_json":
        with pytest.raises(ValueError):
            json.loads(line)
        return
    row = json.loads(line)
    if fault == "empty_conversation":
        assert row["conversations"] == []
    elif fault == "unknown_role":
        assert [m["role"] for m in row["conversations"]].count("narrator") == 1
    elif fault == "missing_required_field":
        assert "task" not in row and "trial_name" in row
    else:
        raise AssertionError(f"unexpected fault {fault}")


def test_listed_faults_are_really_present(corpus: tuple[Path, SynthSummary, dict]) -> None:
    out, _, manifest = corpus
    for f in manifest["faults"]:
        path = out / f["path"]
        assert path.exists(), f
        if f["line"] is None:
            _check_harbor_fault(out, f["fault"], path)
        else:
            _check_trace_fault(path.read_bytes().splitlines()[f["line"] - 1], f["fault"])


def test_clean_trials_have_no_fault_markers(corpus: tuple[Path, SynthSummary, dict]) -> None:
    out, _, manifest = corpus
    for _, traj in _valid_trajectories(out, manifest):
        assert {s["source"] for s in traj["steps"]} <= {"user", "agent", "system"}
    bad_dirs = {f["path"].split("/agent/")[0].removesuffix("/result.json") for f in manifest["faults"]}
    for source in _harbor(manifest):
        for trial in _trial_dirs(out, source):
            if trial.relative_to(out).as_posix() not in bad_dirs:
                result = json.loads((trial / "result.json").read_bytes())
                assert result["task_name"] == trial.name.split("__")[0]
                assert result["trial_name"] == trial.name


# --------------------------------------------------------------------------- realism
def test_step_ids_are_contiguous(corpus: tuple[Path, SynthSummary, dict]) -> None:
    out, _, manifest = corpus
    trajectories = _valid_trajectories(out, manifest)
    assert len(trajectories) > 1500
    for path, traj in trajectories:
        assert traj["schema_version"] == "ATIF-v1.5"
        assert [s["step_id"] for s in traj["steps"]] == list(range(1, len(traj["steps"]) + 1)), path
        assert traj["steps"][0]["source"] == "user"


def test_turn_counts_and_outcomes(corpus: tuple[Path, SynthSummary, dict]) -> None:
    out, _, manifest = corpus
    turns = sorted(_agent_turns(p, t) for p, t in _main_trajectories(out, manifest) if len(t["steps"]) > 1)
    assert turns[0] <= 4 and turns[-1] >= 30 and turns[-1] <= 80
    assert 9 <= turns[len(turns) // 2] <= 15
    assert sum(t <= 4 for t in turns) / len(turns) >= 0.03
    outcomes: Counter[str] = Counter()
    for source in _harbor(manifest):
        for result_path in (out / source / "jobs").glob("*/*/result.json"):
            try:
                result = json.loads(result_path.read_bytes())
            except ValueError:
                continue
            exc = result["exception_info"]
            reward = (result["verifier_result"] or {}).get("rewards", {}).get("reward")
            outcomes[exc["exception_type"] if exc else f"reward={reward}"] += 1
            assert result["started_at"].startswith("2026-")
    n = sum(outcomes.values())
    assert 0.05 <= outcomes["AgentTimeoutError"] / n <= 0.15
    assert 0.3 <= outcomes["reward=1.0"] / (outcomes["reward=1.0"] + outcomes["reward=0.0"]) <= 0.55


def test_subagents_and_continuations(corpus: tuple[Path, SynthSummary, dict]) -> None:
    out, _, manifest = corpus
    mains = _main_trajectories(out, manifest)
    handoffs = conts = 0
    for path, traj in mains:
        refs = [
            r
            for s in traj["steps"]
            if s["source"] == "system"
            for res in s["observation"]["results"]
            for r in res["subagent_trajectory_ref"]
        ]
        if refs:
            handoffs += 1
            for ref in refs:
                sub = json.loads((path.parent / ref["trajectory_path"]).read_bytes())
                assert sub["session_id"] == ref["session_id"]
                assert sub["steps"][-1]["source"] == "agent"
        if "continued_trajectory_ref" in traj:
            conts += 1
            assert traj["steps"][-1]["source"] == "system"
            cont = json.loads((path.parent / traj["continued_trajectory_ref"]).read_bytes())
            assert cont["steps"][0]["is_copied_context"] is True
            assert "is_copied_context" not in cont["steps"][-1]
    assert 0.05 <= handoffs / len(mains) <= 0.15
    assert 0.02 <= conts / len(mains) <= 0.08


def test_agent_steps_look_like_terminus2(corpus: tuple[Path, SynthSummary, dict]) -> None:
    out, _, manifest = corpus
    agent = reasoning = 0
    for _, traj in _main_trajectories(out, manifest)[:300]:
        assert traj["agent"]["name"] == "terminus-2"
        for step in traj["steps"]:
            if step["source"] != "agent":
                continue
            agent += 1
            reasoning += "reasoning_content" in step
            assert step["message"].startswith("Analysis: ") and "\nPlan: " in step["message"]
            for call in step["tool_calls"]:
                if call["function_name"] == "bash_command":
                    assert call["arguments"]["keystrokes"].endswith("\n")
                    assert call["arguments"]["keystrokes"] in step["observation"]["results"][0]["content"]
                else:
                    assert call == {
                        "tool_call_id": call["tool_call_id"],
                        "function_name": "mark_task_complete",
                        "arguments": {},
                    }
    assert 0.2 <= reasoning / agent <= 0.4


def test_trace_rows_have_published_shape(corpus: tuple[Path, SynthSummary, dict]) -> None:
    out, _, manifest = corpus
    faulty = {f["line"] for f in manifest["faults"] if f["source"] == "nl2bash"}
    sources: Counter[str] = Counter()
    lines = (out / "nl2bash" / "traces.jsonl").read_bytes().splitlines()
    for number, line in enumerate(lines, 1):
        if number in faulty:
            continue
        row = json.loads(line)
        assert set(row) == {
            "agent",
            "conversations",
            "date",
            "episode",
            "model",
            "model_provider",
            "result",
            "run_id",
            "task",
            "trace_source",
            "trial_name",
        }
        roles = [m["role"] for m in row["conversations"]]
        assert roles == ["user", "assistant"] * (len(roles) // 2)
        for m in row["conversations"][1::2]:
            think, _, body = m["content"].partition("</think>")
            assert think.startswith("<think>")
            if row["trace_source"] == "main":
                assert set(json.loads(body)) == {"analysis", "plan", "commands", "task_complete"}
        assert row["result"] in (None, "1.0", "0.0", "AgentTimeoutError")
        assert row["episode"].startswith("episode-")
        sources[row["trace_source"]] += 1
    assert sources["main"] > sources["summarization-1-summary"] > 0


# --------------------------------------------------------------------------- validation
BAD_ARGS = [
    ({"trials": 0}, "trials"),
    ({"tasks": 0}, "tasks"),
    ({"sources": (SourceSpec("a", "swesmith", "harbor", 0.5),)}, "sum to 1"),
    ({"sources": (SourceSpec("a", "swesmith", "harbor", 0.5), SourceSpec("a", "tezos", "harbor", 0.5))}, "duplicate"),
    ({"sources": (SourceSpec("a", "cooking", "harbor", 1.0),)}, "cooking"),
    ({"sources": (SourceSpec("a", "tezos", "parquet", 1.0),)}, "parquet"),
    ({"sources": (SourceSpec("a", "tezos", "harbor", 1.5), SourceSpec("b", "tezos", "harbor", -0.5))}, "share"),
    ({"sources": ()}, "sources"),
]


@pytest.mark.parametrize(("kwargs", "needle"), BAD_ARGS)
def test_bad_arguments_raise_value_error(tmp_path: Path, kwargs: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle) as info:
        synthesize(tmp_path / "out", **kwargs)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()


def test_refuses_non_empty_output(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("x")
    with pytest.raises(BadInput, match="is not empty: synth writes a new corpus") as info:
        synthesize(tmp_path / "out", trials=5, tasks=2)
    assert "\n" not in str(info.value)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]  # nothing written
    (tmp_path / "file").write_text("x")
    with pytest.raises(BadInput, match="not a directory"):
        synthesize(tmp_path / "file", trials=5, tasks=2)
    synthesize(tmp_path / "empty", trials=5, tasks=2)  # absent directory is fine
    (tmp_path / "empty2").mkdir()
    synthesize(tmp_path / "empty2", trials=5, tasks=2)  # empty directory is fine


def test_cli_refuses_non_empty_output_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("x")
    proc = subprocess.run(
        [sys.executable, "-m", "tracelake", "synth", "--out", str(tmp_path / "out"), "--trials", "5", "--tasks", "2"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracelake: ") and "is not empty" in lines[0]
    assert "Traceback" not in proc.stderr
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]
