"""Dedup and decontamination measured on the sample's planted truth (sample/near_duplicates.py):
precision and recall per method, printed (docs/dedup.md, "Quality on the sample's planted truth",
quotes them).

The sample plants, per source, exact copies, near-exact copies (whitespace and case) and paraphrases
(reordered clauses, renamed files and numbers) of earlier tasks, and copies a few tasks of a small
planted benchmark into the sources. A predicted pair is two tasks in one cluster; it is true when
the truth puts them in one group (an original and its variants), or when their normalised texts
are equal (the sample's templates also repeat a short instruction by chance). The sample's other
templated tasks are often near-duplicates of each other by construction (one word apart, Jaccard up
to 0.85), and they count as false positives here: precision on planted truth is a floor.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pyarrow as pa
import pytest

from tracelake.curate.dedup.run import run_dedup
from tracelake.curate.dedup.shingles import words
from tracelake.curate.params import DecontaminateParams, DedupParams
from tracelake.sample.synth import synthesize

METHODS = {  # method -> the dedup params that use it alone (exact matching always runs)
    "exact": {"minhash": {"enabled": False}, "embedding": {"enabled": False}},
    "minhash": {"embedding": {"enabled": False}},
    "embed.95": {"minhash": {"enabled": False}},
    "embed.90": {"minhash": {"enabled": False}, "embedding": {"threshold": 0.9}},
    "all": {},  # the defaults: exact + minhash + embedding at 0.95
}


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dedup-quality") / "sample"
    synthesize(out, seed=0, trials=300, tasks=300)
    return out


def tasks_of(sample: Path) -> pa.Table:
    rows = [
        {
            "task_id": f"{p.parent.parent.parent.name}/{p.parent.name}",
            "source": p.parent.parent.parent.name,
            "task": p.parent.name,
            "instruction": p.read_text(),
            "n_trajectories": 1,
        }
        for p in sorted(sample.glob("*/tasks/*/instruction.md"))
    ]
    return pa.Table.from_pylist(rows)


def truth_groups(planted: dict, tasks: pa.Table) -> dict[str, str]:
    """task_id -> its truth group: planted variants join their original, benchmark copies their
    item, and tasks with equal normalised texts join each other."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    def union(a: str, b: str) -> None:
        parent[find(a)] = find(b)

    for d in planted["near_duplicates"]:
        union(f"{d['source']}/{d['task']}", f"{d['source']}/{d['of']}")
    for d in planted["benchmark_copies"]:
        union(f"{d['source']}/{d['task']}", f"benchmark/{d['benchmark']}")
    for task_id, text in zip(tasks.column("task_id").to_pylist(), tasks.column("instruction").to_pylist()):
        union(task_id, "text/" + " ".join(words(text)))
    return {t: find(t) for t in tasks.column("task_id").to_pylist()}


def same_cluster_pairs(clusters: pa.Table) -> set[tuple[str, str]]:
    members: dict[str, list[str]] = {}
    for task_id, cluster_id in zip(clusters.column("task_id").to_pylist(), clusters.column("cluster_id").to_pylist()):
        members.setdefault(cluster_id, []).append(task_id)
    return {pair for group in members.values() for pair in itertools.combinations(sorted(group), 2)}


def measure(sample: Path, tmp_path: Path, overrides: dict) -> tuple[dict, pa.Table, pa.Table]:
    planted = json.loads((sample / "synth_manifest.json").read_text())["planted"]
    tasks = tasks_of(sample)
    decon = DecontaminateParams(root=str(sample / "benchmark"), benchmarks={"planted": str(sample / "benchmark")})
    result = run_dedup(
        tasks, DedupParams.model_validate(overrides), decon, lance_dir=tmp_path / "lance", cache_root=None
    )
    group = truth_groups(planted, tasks)
    truth = {pair for pair in itertools.combinations(sorted(group), 2) if group[pair[0]] == group[pair[1]]}
    predicted = same_cluster_pairs(result.task_clusters)
    cluster_of = dict(
        zip(result.task_clusters.column("task_id").to_pylist(), result.task_clusters.column("cluster_id").to_pylist())
    )
    recall_by_kind: dict[str, list[bool]] = {}
    for d in planted["near_duplicates"]:
        a, b = f"{d['source']}/{d['task']}", f"{d['source']}/{d['of']}"
        recall_by_kind.setdefault(d["kind"], []).append(cluster_of[a] == cluster_of[b])
    tp = len(predicted & truth)
    stats = {
        "precision": tp / len(predicted) if predicted else 1.0,
        "recall": tp / len(truth) if truth else 1.0,
        "predicted": len(predicted),
        "truth": len(truth),
        "recall_by_kind": {k: sum(v) / len(v) for k, v in sorted(recall_by_kind.items())},
        "n_by_kind": {k: len(v) for k, v in sorted(recall_by_kind.items())},
    }
    return stats, result.task_clusters, result.contamination


def test_precision_and_recall_per_method(sample, tmp_path):
    lines = []
    measured = {}
    for name, overrides in METHODS.items():
        stats, _, _ = measure(sample, tmp_path / name, overrides)
        measured[name] = stats
        kinds = ", ".join(f"{k} {v:.2f} (n={stats['n_by_kind'][k]})" for k, v in stats["recall_by_kind"].items())
        lines.append(
            f"{name:9s} precision {stats['precision']:.3f} ({stats['predicted']} pairs) "
            f"recall {stats['recall']:.3f} ({stats['truth']} pairs); by kind: {kinds}"
        )
    print("\n" + "\n".join(lines))
    for name in METHODS:  # exact and near-exact copies: found by every method (normalised text)
        for kind in ("exact", "near_exact"):
            assert measured[name]["recall_by_kind"][kind] >= 0.95, (name, kind, measured[name])
    assert measured["embed.90"]["recall_by_kind"]["paraphrase"] >= 0.8, measured["embed.90"]
    assert measured["exact"]["precision"] == 1.0  # equal normalised texts are duplicates by definition


def test_planted_benchmark_copies_are_found(sample, tmp_path):
    planted = json.loads((sample / "synth_manifest.json").read_text())["planted"]
    _, _, contamination = measure(sample, tmp_path, {})
    truth = {f"{d['source']}/{d['task']}": d["benchmark"] for d in planted["benchmark_copies"]}
    found = dict(zip(contamination.column("task_id").to_pylist(), contamination.column("benchmark_item").to_pylist()))
    hits = sum(1 for t, item in truth.items() if found.get(t) == item)
    precision = sum(1 for t in found if t in truth) / len(found) if found else 1.0
    print(
        f"\ndecontamination: recall {hits / len(truth):.3f} ({hits}/{len(truth)} planted copies), "
        f"precision {precision:.3f} ({len(found)} flagged)"
    )
    assert len(truth) >= 5 and hits / len(truth) >= 0.95


def test_the_same_tables_from_one_chunk_or_many_read_a_few_at_a_time(sample, tmp_path, monkeypatch):
    """Instructions are read from their Arrow column a batch at a time, chunk by chunk (never all
    as Python strings): a column in many chunks, read five at a time, gives the same tables as one
    chunk read whole. One instruction is null (read as an empty text)."""
    from tracelake.curate.dedup import run

    tasks = tasks_of(sample)
    text = tasks.column("instruction").to_pylist()
    text[3] = None
    tasks = tasks.set_column(tasks.schema.get_field_index("instruction"), "instruction", pa.array(text, pa.string()))
    decon = DecontaminateParams(root=str(sample / "benchmark"), benchmarks={"planted": str(sample / "benchmark")})

    def dedup(table: pa.Table, name: str):
        return run_dedup(table, DedupParams(), decon, lance_dir=tmp_path / name, cache_root=None)

    whole = dedup(tasks.combine_chunks(), "whole")
    chunked = pa.Table.from_batches(tasks.to_batches(max_chunksize=7))
    assert chunked.column("instruction").num_chunks > 10
    monkeypatch.setattr(run, "_BATCH", 5)
    parts = dedup(chunked, "parts")
    assert parts.task_clusters.equals(whole.task_clusters)
    assert parts.contamination.equals(whole.contamination)
    assert parts.counts == whole.counts
    assert whole.counts["minhash"]["verified"] > 0 and whole.contamination.num_rows > 0  # every step had work
