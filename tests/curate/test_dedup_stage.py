"""The dedup stage through `dvc repro` on the sample (planted near-duplicates and benchmark copies),
in a temporary git repository: its tables, its LanceDB table, the filter rules it feeds, the
embedding cache across runs, and determinism whatever the thread count, on the exact search and on
the IVF index."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from tracelake.core.outputs import read_manifest
from tracelake.core.tables import read_table

from ..helpers import copy_project, run_ok, run_stage, run_tracelake

pytestmark = pytest.mark.e2e
SINGLE_THREAD = {
    "OMP_NUM_THREADS": "1",
    "LANCE_CPU_THREADS": "1",
    "RAYON_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = copy_project(tmp_path_factory.mktemp("dedup"), trials=300, tasks=300)
    run_ok(["dvc", "repro", "filter"], repo)
    return repo


def set_params(repo: Path, **sections) -> None:
    params = yaml.safe_load((repo / "params.yaml").read_text())
    for section, values in sections.items():  # sources are replaced, other sections updated
        params[section] = values if section == "sources" else {**params[section], **values}
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def dedup_stage(repo: Path, env: dict[str, str] | None = None) -> str:
    proc = run_stage(repo, "dedup", env=env or {})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def outputs(repo: Path) -> dict[str, str]:
    """The dedup outputs by content: every file of lake/dedup and the metrics."""
    got = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((repo / "lake" / "dedup").iterdir())}
    got["metrics"] = hashlib.sha256((repo / "metrics/dedup.json").read_bytes()).hexdigest()
    return got


def test_clusters_contamination_and_the_filter_rules(repo):
    lake = repo / "lake"
    planted = json.loads((repo / "data/sample/synth_manifest.json").read_text())["planted"]
    clusters = read_table(lake / "dedup", "task_clusters").to_pylist()
    assert len(clusters) == sum(read_manifest(d)["counts"]["rows"] for d in (lake / "tasks").iterdir())
    by_task = {(r["source"], r["task"]): r for r in clusters}
    for d in planted["near_duplicates"]:
        if d["kind"] in ("exact", "near_exact"):
            a, b = by_task[(d["source"], d["task"])], by_task[(d["source"], d["of"])]
            assert a["cluster_id"] == b["cluster_id"], (a, b)
    for r in clusters:  # a dropped task names a kept representative of its own cluster
        assert r["dropped"] == (r["method"] not in ("representative", "unique"))
    contamination = read_table(lake / "dedup", "contamination").to_pylist()
    assert {(d["source"], d["task"]) for d in planted["benchmark_copies"]} <= {
        (c["source"], c["task"]) for c in contamination
    }

    dropped = read_table(lake / "pool", "dropped").to_pylist()
    rules = {d["rule"] for d in dropped}
    assert {"contaminated_v1", "near_duplicate_v1"} <= rules
    contaminated_ids = {c["task_id"] for c in contamination}
    dropped_tasks = {r["task_id"] for r in clusters if r["dropped"]}
    for d in dropped:
        if d["rule"] == "contaminated_v1":
            assert d["task_id"] in contaminated_ids and d["detail"].startswith("benchmark planted item ")
        if d["rule"] == "near_duplicate_v1":
            assert d["task_id"] in dropped_tasks and d["detail"].startswith("near duplicate of ")
    pool = read_table(lake / "pool", "pool").column("task_id").to_pylist()
    assert not (set(pool) & (dropped_tasks | contaminated_ids))
    embedding = json.loads((repo / "metrics/dedup.json").read_text())["embedding"]
    assert embedding["index"] == "flat" and embedding["texts"] > 0
    # the LanceDB search table is a scratch index, not an output: nothing of it is left anywhere
    assert not (lake / "embeddings").exists()
    assert not list((repo / ".tracelake/cache/embeddings").glob(".lance-*"))


def test_keep_all_drops_nothing_and_clusters_share_a_quota(repo, tmp_path):
    shutil.copytree(repo / "lake" / "pool", tmp_path / "pool-keep-one")
    set_params(repo, dedup={"keep": "all"})
    try:
        run_ok(["dvc", "repro", "select@1k"], repo)
        diff = run_tracelake(repo, "diff", str(tmp_path / "pool-keep-one"), "pool", "--json")
        assert diff.returncode == 0, diff.stderr
        explained = json.loads(diff.stdout)["explained"]
        back = [e for e in explained if e["rule"] == "near_duplicate_v1"]
        assert back and all(e["status"] == "added" and e["stage"] == "filter" for e in back)
        clusters = read_table(repo / "lake" / "dedup", "task_clusters").to_pylist()
        assert not any(r["dropped"] for r in clusters) and any(r["cluster_size"] > 1 for r in clusters)
        assert "near_duplicate_v1" not in {d["rule"] for d in read_table(repo / "lake" / "pool", "dropped").to_pylist()}
        shared = json.loads((repo / "metrics/select/1k.json").read_text())["shared_quotas"]
        assert shared["clusters"] > 0 and shared["tasks"] > shared["clusters"]
    finally:
        set_params(repo, dedup={"keep": "one"})
        run_ok(["dvc", "repro", "select@1k"], repo)
    assert json.loads((repo / "metrics/select/1k.json").read_text())["shared_quotas"]["clusters"] == 0


@pytest.mark.parametrize("search", ["flat", "ivf_flat"])
def test_same_outputs_whatever_the_thread_count(repo, search):
    if search == "ivf_flat":  # the index path on the sample: an index above 50 texts
        set_params(
            repo,
            dedup={
                "embedding": {
                    **yaml.safe_load((repo / "params.yaml").read_text())["dedup"]["embedding"],
                    "exact_below": 50,
                    "nprobes": 4,
                }
            },
        )
    try:
        first = dedup_stage(repo)
        one = outputs(repo)
        dedup_stage(repo, SINGLE_THREAD)
        assert outputs(repo) == one
        assert json.loads((repo / "metrics/dedup.json").read_text())["embedding"]["index"] == search
        assert " 0 embedded" in first  # the cache answered every text
    finally:
        if search == "ivf_flat":
            set_params(
                repo,
                dedup={
                    "embedding": {
                        **yaml.safe_load((repo / "params.yaml").read_text())["dedup"]["embedding"],
                        "exact_below": 20000,
                        "nprobes": 16,
                    }
                },
            )


def test_a_new_source_embeds_only_its_own_texts(repo, tmp_path):
    params = yaml.safe_load((repo / "params.yaml").read_text())
    sources = params["sources"]
    last = sorted(sources)[-1]
    fresh_cache = str(tmp_path / "cache")
    set_params(repo, sources={k: v for k, v in sources.items() if k != last}, dedup={"cache": fresh_cache})
    try:
        out = dedup_stage(repo)
        found = re.search(r"(\d+) embedded, 0 cached", out)
        assert found, out
        before = int(found.group(1))
        set_params(repo, sources=sources)
        out = dedup_stage(repo)
        embedded, cached = map(int, re.search(r"(\d+) embedded, (\d+) cached", out).groups())
        texts = json.loads((repo / "metrics/dedup.json").read_text())["embedding"]["texts"]
        new_tasks = read_manifest(repo / "lake" / "tasks" / last)["counts"]["rows"]
        # every text seen before comes from the cache (and benchmark items, embedded by the first run)
        assert embedded + cached == texts and cached >= before and 0 < embedded <= new_tasks
    finally:
        (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        dedup_stage(repo)


def test_explain_a_planted_copy_and_query_the_views(repo):
    planted = json.loads((repo / "data/sample/synth_manifest.json").read_text())["planted"]
    copy = next(d for d in planted["near_duplicates"] if d["kind"] == "exact")
    proc = run_tracelake(repo, "dedup", "--explain", f"{copy['source']}/{copy['task']}")
    assert proc.returncode == 0, proc.stderr
    assert "represented by" in proc.stdout and copy["task"] in proc.stdout and copy["of"] in proc.stdout
    rows = json.loads(run_tracelake(repo, "dedup", "--explain", f"{copy['source']}/{copy['task']}", "--json").stdout)
    assert rows[0]["representative"] and {r["task"] for r in rows} >= {copy["task"], copy["of"]}
    bench = planted["benchmark_copies"][0]
    shown = run_tracelake(repo, "dedup", "--explain", f"{bench['source']}/{bench['task']}").stdout
    assert f"planted {bench['benchmark']}" in shown and "contaminated_v1" in shown

    missing = run_tracelake(repo, "dedup", "--explain", "no-such-task")
    assert missing.returncode != 0 and missing.stderr.strip().count("\n") == 0 and "no task matches" in missing.stderr
    summary = run_tracelake(repo, "dedup")
    assert (
        summary.returncode == 0
        and "clusters of near-duplicates" in summary.stdout
        and "benchmark planted" in summary.stdout
    )

    proc = run_tracelake(
        repo,
        "sql",
        "--format",
        "json",
        "SELECT (SELECT count(*) FROM task_clusters) AS tasks, "
        "(SELECT count(*) FROM contamination) AS contaminated, "
        "(SELECT sum(dropped)::BIGINT FROM funnel WHERE rule = 'near_duplicate_v1') AS near_dup_rows",
    )
    got = json.loads(proc.stdout)
    metrics = json.loads((repo / "metrics/dedup.json").read_text())
    assert got["tasks"] == metrics["tasks"] and got["contaminated"] == metrics["contamination"]["tasks"] > 0
    assert got["near_dup_rows"] > 0
