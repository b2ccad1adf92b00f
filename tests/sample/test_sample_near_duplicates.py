"""Planted near-duplicates and benchmark copies in the embedded sample: the recorded truth must be
deterministic and must hold on disk, or a dedup/decontamination stage cannot be measured by it."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tracelake.sample.common import SourceSpec
from tracelake.sample.near_duplicates import (
    BENCHMARK_DIR,
    BENCHMARK_TASKS,
    COPY_KINDS,
    KINDS,
    exact,
    near_exact,
    normalize,
    paraphrase,
)
from tracelake.sample.synth import DEFAULT_SOURCES, SynthSummary, synthesize
from tracelake.sample.tasks import make_task, with_instruction

TEXT = (
    "ValueError raised by `format` in click/core.py\n\n"
    "Steps to reproduce:\n```python\nfrom click.core import format\n```\n\n"
    'Actual behavior:\n  File "/testbed/click/core.py", line 248, in format\n\n'
    "Notes:\n- Existing tests in tests/test_core.py still pass, so coverage is missing."
)


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SynthSummary, dict]:
    """The default sample (seed 0, 2000 trials, 300 tasks): a few seconds."""
    out = tmp_path_factory.mktemp("planted") / "sample"
    summary = synthesize(out, seed=0, trials=2000, tasks=300)
    return out, summary, json.loads((out / "synth_manifest.json").read_text())


def _instruction(out: Path, source: str, task: str) -> str:
    return (out / source / "tasks" / task / "instruction.md").read_text()


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- variants
def test_variants_keep_their_promises() -> None:
    title = TEXT.split("\n")[0]
    for i in range(200):
        assert exact(random.Random(i), TEXT) == TEXT
        near = near_exact(random.Random(i), TEXT)
        assert near != TEXT and normalize(near) == normalize(TEXT)
        para = paraphrase(random.Random(i), TEXT)
        assert para.split("\n")[0] == title
        assert normalize(para) != normalize(TEXT)
        assert sorted(normalize(para).split()) != sorted(normalize(TEXT).split())  # renamed


def test_paraphrase_needs_paragraphs_to_reorder() -> None:
    with pytest.raises(ValueError, match="two paragraphs"):
        paraphrase(random.Random(0), "Title only\n\nOne paragraph.")


def test_lines_and_difficulty_follow_the_instruction() -> None:
    task = make_task(0, DEFAULT_SOURCES[0], 3)
    assert task.lines == task.instruction.count("\n") + 1
    assert task.difficulty == (task.lines - 1) / 39
    short = with_instruction(task, "one\ntwo")
    assert (short.name, short.lines, short.ctx) == (task.name, 2, task.ctx)
    assert short.difficulty == 1 / 39
    assert with_instruction(task, "\n" * 45).difficulty == 1.0


# --------------------------------------------------------------------------- the sample
def test_planted_truth_is_deterministic(tmp_path: Path) -> None:
    a = synthesize(tmp_path / "a", seed=3, trials=400, tasks=120)
    b = synthesize(tmp_path / "b", seed=3, trials=400, tasks=120)
    planted = [json.loads((tmp_path / x / "synth_manifest.json").read_text())["planted"] for x in "ab"]
    assert a.planted == b.planted and planted[0] == planted[1]
    assert planted[0]["near_duplicates"]
    assert _tree(tmp_path / "a" / BENCHMARK_DIR) == _tree(tmp_path / "b" / BENCHMARK_DIR)
    assert len(_tree(tmp_path / "a" / BENCHMARK_DIR)) == BENCHMARK_TASKS


def test_near_duplicates_hold_on_disk(sample: tuple[Path, SynthSummary, dict]) -> None:
    out, _, manifest = sample
    rows = manifest["planted"]["near_duplicates"]
    copies = {(r["source"], r["task"]) for r in rows + manifest["planted"]["benchmark_copies"]}
    assert {r["kind"] for r in rows} == set(KINDS)
    for row in rows:
        assert (row["source"], row["of"]) not in copies  # copied from an original only
        assert row["of"] < row["task"] and row["of"].startswith(row["source"] + "-")
        original = _instruction(out, row["source"], row["of"])
        copy = _instruction(out, row["source"], row["task"])
        if row["kind"] == "exact":
            assert copy == original
        elif row["kind"] == "near_exact":
            assert copy != original and normalize(copy) == normalize(original)
        else:
            assert normalize(copy) != normalize(original)
            assert copy.split("\n")[0] == original.split("\n")[0]


def test_benchmark_copies_hold_on_disk(sample: tuple[Path, SynthSummary, dict]) -> None:
    out, summary, manifest = sample
    planted = manifest["planted"]
    assert planted["benchmark_dir"] == BENCHMARK_DIR
    benchmark = sorted(p.name for p in (out / BENCHMARK_DIR).iterdir())
    assert benchmark == [f"benchmark-{i:03d}" for i in range(BENCHMARK_TASKS)]
    rows = planted["benchmark_copies"]
    assert len(rows) >= 5
    assert len(set(benchmark) - {r["benchmark"] for r in rows}) >= 2  # negatives
    assert {r["kind"] for r in rows} <= set(COPY_KINDS)
    for row in rows:
        source = (out / BENCHMARK_DIR / row["benchmark"] / "instruction.md").read_text()
        copy = _instruction(out, row["source"], row["task"])
        assert normalize(copy) == normalize(source)
        assert (copy == source) == (row["kind"] == "exact")
    assert summary.planted == {
        "near_duplicates": {k: sum(r["kind"] == k for r in planted["near_duplicates"]) for k in KINDS},
        "benchmark_copies": {k: sum(r["kind"] == k for r in rows) for k in COPY_KINDS},
    }
    for name in ("near_duplicates", "benchmark_copies"):
        assert planted[name] == sorted(planted[name], key=lambda r: (r["source"], r["task"]))


def test_trials_carry_the_planted_instruction(sample: tuple[Path, SynthSummary, dict]) -> None:
    """Trajectories and trace rows of a planted task show its copied text, not the one it had."""
    out, _, manifest = sample
    planted = manifest["planted"]["near_duplicates"] + manifest["planted"]["benchmark_copies"]
    harbor = {s.name for s in DEFAULT_SOURCES if s.format == "harbor"}
    checked = 0
    for row in planted:
        text = _instruction(out, row["source"], row["task"]).removesuffix("\n")
        if row["source"] in harbor:
            for path in sorted((out / row["source"] / "jobs").glob(f"*/{row['task']}__*/agent/trajectory.json"))[:1]:
                try:
                    first = json.loads(path.read_bytes())["steps"][0]["message"]
                except (ValueError, KeyError, IndexError):
                    continue  # an injected fault
                assert text in first
                checked += 1
        else:
            for first in _trace_openings(out / row["source"] / "traces.jsonl", row["task"])[:1]:
                assert text in first
                checked += 1
    assert checked >= len(planted) // 2


def _trace_openings(table: Path, task: str) -> list[str]:
    """The first message of each well-formed trace row of `task`."""
    found = []
    for line in table.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # an injected fault
        if row.get("trial_name", "").startswith(f"{task}__") and row.get("conversations"):
            found.append(row["conversations"][0]["content"])
    return found


def test_planting_can_be_turned_off(tmp_path: Path) -> None:
    summary = synthesize(tmp_path / "out", seed=0, trials=400, tasks=120, near_duplicates=0, benchmark_tasks=0)
    manifest = json.loads((tmp_path / "out" / "synth_manifest.json").read_text())
    assert manifest["planted"] == {"near_duplicates": [], "benchmark_copies": [], "benchmark_dir": BENCHMARK_DIR}
    assert sum(sum(c.values()) for c in summary.planted.values()) == 0
    assert not (tmp_path / "out" / BENCHMARK_DIR).exists()
    for spec, n in summary.tasks.items():
        source = next(s for s in DEFAULT_SOURCES if s.name == spec)
        for k in range(n):
            task = make_task(0, source, k)
            assert _instruction(tmp_path / "out", spec, task.name) == task.instruction + "\n"


BAD_ARGS = [
    ({"near_duplicates": -0.1}, "near_duplicates"),
    ({"near_duplicates": 1.5}, "near_duplicates"),
    ({"near_duplicates": float("nan")}, "near_duplicates"),
    ({"near_duplicates": "0.1"}, "near_duplicates"),
    ({"benchmark_tasks": -1}, "benchmark_tasks"),
    ({"benchmark_tasks": 2.0}, "benchmark_tasks"),
    ({"benchmark_tasks": True}, "benchmark_tasks"),
    ({"sources": (SourceSpec("benchmark", "tezos", "harbor", 1.0),)}, "taken by the benchmark"),
]


@pytest.mark.parametrize(("kwargs", "needle"), BAD_ARGS)
def test_bad_planting_arguments_raise_value_error(tmp_path: Path, kwargs: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle) as info:
        synthesize(tmp_path / "out", trials=20, tasks=10, **kwargs)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()


def test_a_source_may_be_named_benchmark_without_a_benchmark(tmp_path: Path) -> None:
    summary = synthesize(
        tmp_path / "out",
        trials=20,
        tasks=10,
        benchmark_tasks=0,
        sources=(SourceSpec("benchmark", "tezos", "harbor", 1.0),),
    )
    assert summary.tasks == {"benchmark": 10}
    assert (tmp_path / "out" / "benchmark" / "tasks").is_dir()
