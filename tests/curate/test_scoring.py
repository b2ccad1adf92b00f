"""Task scores (tracelake.curate.scoring.runs): the response-length proxy, the score cache, imported scores,
and the score stage's check on import paths. Real DuckDB over real Parquet in a tmp lake."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tracelake.core.duckdb_views import connect
from tracelake.core.errors import BadInput
from tracelake.core.hashing import sha256_bytes
from tracelake.core.ids import task_id_for
from tracelake.core.lake import Lake
from tracelake.core.outputs import read_manifest
from tracelake.core.tables import read_table
from tracelake.curate.score_params import ImportParams
from tracelake.curate.scoring.runs import ScoreCache, import_scores, known_tasks_of, run_scorer
from tracelake.curate.scoring.scorers import ResponseLengthProxy, Scorer, ScoreRequest
from tracelake.ingest.tasks import ingest_tasks
from tracelake.ingest.traces import ingest_traces

from ..helpers import run_stage

PROXY = "response_length_proxy_v1"


# --- building a lake -------------------------------------------------------------------------


def msgs(*assistant: str, prefix: str = "") -> list[dict]:
    """A conversation with the given assistant replies (and non-assistant turns that never count)."""
    out = [{"role": "system", "content": "You are an agent. " * 5}]
    for i, a in enumerate(assistant):
        out += [
            {"role": "user", "content": f"{prefix} step {i} " + "x" * 40},
            {"role": "assistant", "content": a},
            {"role": "tool", "content": "output " * 9},
        ]
    return out


def trow(task: str, trial: str, conversation: list[dict], trace_source: str = "main") -> dict:
    return {
        "task": task,
        "trial_name": trial,
        "run_id": "run-1",
        "episode": "episode-0",
        "trace_source": trace_source,
        "conversations": conversation,
    }


def ingest_source(root: Path, lake: Path, source: str, rows: list[dict]) -> None:
    f = root / "in" / f"{source}.jsonl"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    res = ingest_traces([f], source=source, out_dir=Lake(lake).table("trajectories", source))
    assert (res.rows, res.rejects) == (len(rows), 0)


def build_lake(root: Path, sources: dict[str, list[dict]]) -> Path:
    lake = root / "lake"
    for source, rows in sources.items():
        ingest_source(root, lake, source, rows)
    return lake


def con_of(lake: Path, sources) -> object:
    return connect(lake, list(sources), tables=("trajectories",))


def corpus() -> dict[str, list[dict]]:
    return {
        "alpha": [
            trow("calc_copy0001", "calc_copy0001__a", msgs("short", "a somewhat longer answer", "")),
            trow("calc_copy0002", "calc_copy0002__b", msgs("x" * 101)),  # upsampled copy: the same task
            # a subagent row of the task: huge replies that must not count
            trow(
                "calc_copy0001",
                "calc_copy0001__a",
                msgs("S" * 5000, "S" * 7000),
                trace_source="summarization-1-summary",
            ),
            trow("unicode", "unicode__1", msgs("café 🚀✅ e\u0301", "日本語 → ←", "naïve Straße")),
            trow("only-subagent", "only__1", msgs("y" * 50), trace_source="summarization-1-questions"),
            trow("three", "three__1", msgs("a" * 3, "b" * 4, "c" * 5, "d" * 7)),
        ],
        "beta": [  # the same task name in another source is another task
            trow("calc", "calc__z", msgs("z" * 10, "z" * 13)),
            trow("calc", "calc__y", msgs("w" * 1)),
        ],
    }


def expected_proxy(sources: dict[str, list[dict]]) -> dict[str, float]:
    """Plain Python: total assistant characters / total assistant turns over main rows, per task."""
    chars: dict[str, int] = {}
    turns: dict[str, int] = {}
    for source, rows in sources.items():
        for row in rows:
            if row["trace_source"] != "main":
                continue
            tid = task_id_for(source, row["task"])
            replies = [m["content"] for m in row["conversations"] if m["role"] == "assistant"]
            chars[tid] = chars.get(tid, 0) + sum(len(r) for r in replies)
            turns[tid] = turns.get(tid, 0) + len(replies)
    return {tid: chars[tid] / turns[tid] for tid in chars}


class CountingProxy(ResponseLengthProxy):
    """The built-in proxy, recording every score_batch call (the tasks it was asked about)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[str]] = []

    def score_batch(self, requests):
        self.calls.append([r.task_id for r in requests])
        return super().score_batch(requests)


class PromptLength(Scorer):
    """A custom model-style scorer: one request per task (its base name), score = len(prompt)."""

    name = "prompt_length_v1"

    def __init__(self, model: str = "judge-1", reverse: bool = False, value=None):
        self.model, self.reverse, self.value = model, reverse, value
        self.calls: list[list[str]] = []

    def requests(self, con):
        rows = con.execute(
            "SELECT DISTINCT task_id, regexp_replace(task, '_copy[0-9]+$', '') FROM trajectories ORDER BY 1"
        ).fetchall()
        out = [ScoreRequest(tid, f"Rate the task {name}") for tid, name in rows]
        return out[::-1] if self.reverse else out

    def score_batch(self, requests):
        self.calls.append([r.task_id for r in requests])
        return [float(len(r.prompt)) if self.value is None else self.value for r in requests]


def parts(cache: Path, scorer: str) -> list[str]:
    return sorted(p.name for p in (cache / scorer).glob("part-*.parquet"))


# --- the proxy -------------------------------------------------------------------------------


def test_proxy_equals_plain_python(tmp_path):
    sources = corpus()
    lake = build_lake(tmp_path, sources)
    con = con_of(lake, sources)
    got = run_scorer(ResponseLengthProxy(), con, ScoreCache(tmp_path / "cache"))
    scores = {r["task_id"]: r["score"] for r in got.rows}
    want = expected_proxy(sources)
    assert scores == want  # exact: both are one correctly rounded int / int division
    assert len(want) == 4 and task_id_for("alpha", "only-subagent") not in scores  # subagent rows only: no score
    assert scores[task_id_for("alpha", "calc")] == (5 + 24 + 0 + 101) / 4  # the subagent's 12,000 chars do not count
    assert scores[task_id_for("alpha", "unicode")] == (10 + 7 + 12) / 3  # code points, as len()
    assert scores[task_id_for("beta", "calc")] == 24 / 3
    # the request is the task's main trajectory ids, sorted
    for tid, ids in con.execute(
        "SELECT task_id, list(trajectory_id ORDER BY trajectory_id) FROM trajectories WHERE NOT is_subagent GROUP BY 1"
    ).fetchall():
        row = next(r for r in got.rows if r["task_id"] == tid)
        assert row["prompt_sha256"] == sha256_bytes("\n".join(ids).encode())
        assert (row["scorer"], row["model"]) == (PROXY, None)
    m = got.metrics()
    assert (m["tasks"], m["min"], m["max"]) == (4, min(want.values()), max(want.values()))


# --- the cache -------------------------------------------------------------------------------


def test_cache_rescores_exactly_the_changed_task(tmp_path):
    sources = corpus()
    lake, cache_dir = build_lake(tmp_path, sources), tmp_path / "cache"
    cache = ScoreCache(cache_dir)
    all_tasks = sorted(expected_proxy(sources))

    first = CountingProxy()
    run1 = run_scorer(first, con_of(lake, sources), cache)
    assert (run1.computed, run1.cached) == (4, 0)
    assert first.calls == [all_tasks]
    assert len(parts(cache_dir, PROXY)) == 1

    second = CountingProxy()
    run2 = run_scorer(second, con_of(lake, sources), cache)
    assert (run2.computed, run2.cached) == (0, 4) and second.calls == []
    assert sorted(run2.rows, key=lambda r: r["task_id"]) == sorted(run1.rows, key=lambda r: r["task_id"])
    assert len(parts(cache_dir, PROXY)) == 1  # nothing new: no new part

    # one more rollout of `unicode`: its request (the sorted ids) changes, nothing else does
    sources["alpha"].append(trow("unicode", "unicode__2", msgs("q" * 99)))
    ingest_source(tmp_path, lake, "alpha", sources["alpha"])
    before = set(parts(cache_dir, PROXY))
    third = CountingProxy()
    run3 = run_scorer(third, con_of(lake, sources), cache)
    changed = task_id_for("alpha", "unicode")
    assert third.calls == [[changed]]
    assert (run3.computed, run3.cached) == (1, 3)
    assert {r["task_id"]: r["score"] for r in run3.rows} == expected_proxy(sources)
    old = next(r for r in run1.rows if r["task_id"] == changed)
    new = next(r for r in run3.rows if r["task_id"] == changed)
    assert new["prompt_sha256"] != old["prompt_sha256"] and new["score_id"] != old["score_id"]
    (new_part,) = set(parts(cache_dir, PROXY)) - before
    assert pq.read_table(cache_dir / PROXY / new_part).column("task_id").to_pylist() == [changed]
    assert len(ScoreCache(cache_dir).load(PROXY)) == 5  # append-only: the old key of `unicode` stays


def test_custom_scorer_never_recomputes_known_keys(tmp_path):
    sources = corpus()
    lake, cache_dir = build_lake(tmp_path, sources), tmp_path / "cache"
    cache = ScoreCache(cache_dir)
    tasks = sorted(t for (t,) in con_of(lake, sources).execute("SELECT DISTINCT task_id FROM trajectories").fetchall())
    assert len(tasks) == 5

    s1 = PromptLength()
    r1 = run_scorer(s1, con_of(lake, sources), cache, batch_size=2)
    assert s1.calls == [tasks[0:2], tasks[2:4], tasks[4:5]]  # every key once, in batches
    assert r1.computed == 5 and all(r["model"] == "judge-1" for r in r1.rows)

    s2 = PromptLength()
    r2 = run_scorer(s2, con_of(lake, sources), cache, batch_size=2)
    assert s2.calls == [] and (r2.computed, r2.cached) == (0, 5)

    # another model is another key: everything is scored again, into its own part
    s3 = PromptLength(model="judge-2")
    r3 = run_scorer(s3, con_of(lake, sources), cache)
    assert s3.calls == [tasks] and r3.computed == 5
    assert len(parts(cache_dir, PromptLength.name)) == 2
    # and both models stay known
    for model in ("judge-1", "judge-2"):
        s = PromptLength(model=model)
        assert run_scorer(s, con_of(lake, sources), cache).computed == 0 and s.calls == []
    assert len(parts(cache_dir, PromptLength.name)) == 2


def test_cache_parts_are_content_named(tmp_path):
    sources = corpus()
    lake = build_lake(tmp_path, sources)
    names, data = [], []
    for i, reverse in enumerate((False, False, True)):  # the third asks in the opposite order
        cache_dir = tmp_path / f"cache{i}"
        run_scorer(PromptLength(reverse=reverse), con_of(lake, sources), ScoreCache(cache_dir))
        (part,) = parts(cache_dir, PromptLength.name)
        names.append(part)
        data.append((cache_dir / PromptLength.name / part).read_bytes())
        assert not [p for p in (cache_dir / PromptLength.name).iterdir() if p.name.startswith(".")]  # no tmp left
    assert names[0] == names[1] == names[2] and data[0] == data[1] == data[2]
    other = tmp_path / "cache-other"
    run_scorer(PromptLength(model="judge-2"), con_of(lake, sources), ScoreCache(other))
    assert parts(other, PromptLength.name) != [names[0]]  # other content, other name


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_computed_score_is_refused_and_not_cached(tmp_path, value):
    sources = corpus()
    lake, cache_dir = build_lake(tmp_path, sources), tmp_path / "cache"
    with pytest.raises(BadInput, match=r"scorer prompt_length_v1: task [0-9a-f]{16} got a non-finite score"):
        run_scorer(PromptLength(value=value), con_of(lake, sources), ScoreCache(cache_dir))
    assert parts(cache_dir, PromptLength.name) == []


# --- imported scores -------------------------------------------------------------------------


@pytest.fixture
def known(tmp_path):
    lake = build_lake(
        tmp_path,
        {
            "alpha": [trow("fix-bug_copy0000", "fb__1", msgs("a")), trow("other", "o__1", msgs("b"))],
            "beta": [trow("fix-bug", "fb__2", msgs("c"))],
        },
    )
    return known_tasks_of(con_of(lake, ["alpha", "beta"]))


def user_file(tmp_path: Path, columns: dict[str, list]) -> Path:
    path = tmp_path / "imports" / "scores.parquet"
    path.parent.mkdir(exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


def by_task(run) -> dict[str, float]:
    return {r["task_id"]: r["score"] for r in run.rows}


A_FIX, B_FIX, A_OTHER = task_id_for("alpha", "fix-bug"), task_id_for("beta", "fix-bug"), task_id_for("alpha", "other")


def test_known_tasks(known):
    assert sorted(known) == sorted(
        [(A_FIX, "alpha", "fix-bug"), (A_OTHER, "alpha", "other"), (B_FIX, "beta", "fix-bug")]
    )


def test_import_by_task_name(tmp_path, known):
    path = user_file(
        tmp_path,
        {"task_name": ["fix-bug_copy0002", "other", "nope", "other_copy0007"], "difficulty": [0.7, 3, 1.0, 3.0]},
    )
    run = import_scores(
        "difficulty_v1", ImportParams(path=str(path), task="task_name", score="difficulty", model="judge-x"), known
    )
    # without a source column a name matches in every source
    assert by_task(run) == {A_FIX: 0.7, B_FIX: 0.7, A_OTHER: 3.0}
    assert run.unmatched == 1 and run.computed == 3 and run.scorer == "difficulty_v1"
    assert all(
        r["scorer"] == "difficulty_v1" and r["model"] == "judge-x" and r["prompt_sha256"] is None for r in run.rows
    )
    assert all(isinstance(r["score"], float) for r in run.rows)


def test_import_with_source_column(tmp_path, known):
    path = user_file(
        tmp_path,
        {
            "name": ["fix-bug_copy0002", "fix-bug", "fix-bug", "other"],
            "src": ["beta", "alpha", "gamma", "beta"],
            "s": [0.2, 0.9, 5.0, 1.0],
        },
    )
    run = import_scores("d_v1", ImportParams(path=str(path), task="name", source="src", score="s"), known)
    assert by_task(run) == {B_FIX: 0.2, A_FIX: 0.9}
    assert run.unmatched == 2  # no source gamma; no task other in beta


def test_import_by_task_id(tmp_path, known):
    path = user_file(tmp_path, {"tid": [A_OTHER, "0123456789abcdef", B_FIX], "s": [1.5, 2.0, -4]})
    run = import_scores("d_v1", ImportParams(path=str(path), task_id="tid", score="s"), known)
    assert by_task(run) == {A_OTHER: 1.5, B_FIX: -4.0} and run.unmatched == 1


def test_import_conflicting_scores_name_the_task(tmp_path, known):
    path = user_file(
        tmp_path, {"name": ["fix-bug_copy0001", "fix-bug_copy0002"], "src": ["alpha", "alpha"], "s": [0.1, 0.2]}
    )
    with pytest.raises(
        BadInput, match=rf"row 1 gives task 'fix-bug_copy0002' \({A_FIX}\) a second, different score \(0.1 and 0.2\)"
    ):
        import_scores("d_v1", ImportParams(path=str(path), task="name", source="src", score="s"), known)
    # the same score twice is no conflict
    path = user_file(tmp_path, {"name": ["fix-bug_copy0001", "fix-bug_copy0002"], "s": [0.1, 0.1]})
    assert by_task(import_scores("d_v1", ImportParams(path=str(path), task="name", score="s"), known)) == {
        A_FIX: 0.1,
        B_FIX: 0.1,
    }


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, None])
def test_import_non_finite_score(tmp_path, known, bad):
    path = user_file(tmp_path, {"name": ["other", "fix-bug"], "s": pa.array([1.0, bad], pa.float64())})
    with pytest.raises(
        BadInput, match=r"score\.imports\.d_v1: .*scores\.parquet row 1: score .* is not a finite number"
    ):
        import_scores("d_v1", ImportParams(path=str(path), task="name", score="s"), known)


@pytest.mark.parametrize("values", [["0.5"], [True]])
def test_import_non_numeric_score(tmp_path, known, values):
    path = user_file(tmp_path, {"name": ["other"], "s": values})
    with pytest.raises(BadInput, match="row 0: score .* is not a finite number"):
        import_scores("d_v1", ImportParams(path=str(path), task="name", score="s"), known)


def test_import_missing_column_lists_the_columns(tmp_path, known):
    path = user_file(tmp_path, {"task_name": ["other"], "diff": [1.0]})
    with pytest.raises(BadInput, match=r"has no column 'difficulty' \(columns: task_name, diff\)"):
        import_scores("d_v1", ImportParams(path=str(path), task="task_name", score="difficulty"), known)
    with pytest.raises(BadInput, match=r"has no column 'src' \(columns: task_name, diff\)"):
        import_scores("d_v1", ImportParams(path=str(path), task="task_name", score="diff", source="src"), known)


def test_import_unreadable_files(tmp_path, known):
    with pytest.raises(BadInput, match=r"score\.imports\.d_v1: .*missing\.parquet does not exist"):
        import_scores("d_v1", ImportParams(path=str(tmp_path / "missing.parquet"), task="t", score="s"), known)
    junk = tmp_path / "junk.parquet"
    junk.write_text("task,score\nother,1\n")
    with pytest.raises(BadInput, match="is not a readable Parquet file"):
        import_scores("d_v1", ImportParams(path=str(junk), task="t", score="s"), known)


# --- the DVC stage ---------------------------------------------------------------------------


def stage(cwd: Path, params: dict) -> subprocess.CompletedProcess:
    (cwd / "params.yaml").write_text(yaml.safe_dump(params))
    return run_stage(cwd, "score", "--params", "params.yaml")


def stage_params(import_path: str) -> dict:
    return {
        "lake": "lake",
        "sources": {"alpha": {"format": "traces", "path": "in/alpha.jsonl", "tasks": "tasks"}},
        "score": {
            "cache": "cache",
            "imports": {"difficulty_v1": {"path": import_path, "task": "task_name", "score": "difficulty"}},
        },
    }


@pytest.mark.parametrize("where", ["elsewhere/d.parquet", "imports/../elsewhere/d.parquet", "imports"])
def test_score_stage_refuses_imports_outside_imports_dir(tmp_path, where):
    (tmp_path / "imports").mkdir()
    (tmp_path / "elsewhere").mkdir()
    pq.write_table(pa.table({"task_name": ["x"], "difficulty": [1.0]}), tmp_path / "elsewhere" / "d.parquet")
    proc = stage(tmp_path, stage_params(where))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith("tracelake: params.yaml: score.imports.difficulty_v1.path must be under imports/")
    assert where in err
    assert not (tmp_path / "lake").exists() and not (tmp_path / "metrics").exists()


@pytest.mark.e2e  # runs the pipeline's stages in a project: not the fast loop
def test_score_stage_end_to_end_with_an_import(tmp_path):
    sources = {"alpha": corpus()["alpha"]}
    lake = build_lake(tmp_path, sources)
    for name in ("calc", "unicode", "three", "only-subagent"):
        d = tmp_path / "tasks" / name
        d.mkdir(parents=True)
        (d / "instruction.md").write_text(f"Do {name}.\n")
        (d / "task.toml").write_text('version = "1.0"\n')
    ingest_tasks(tmp_path / "tasks", source="alpha", out_dir=Lake(lake).table("tasks", "alpha"))
    (tmp_path / "imports").mkdir()
    pq.write_table(
        pa.table({"task_name": ["calc_copy0003", "three", "ghost"], "difficulty": [2.0, 1.0, 9.0]}),
        tmp_path / "imports" / "d.parquet",
    )
    proc = stage(tmp_path, stage_params("imports/d.parquet"))
    assert proc.returncode == 0, proc.stderr
    metrics = orjson.loads((tmp_path / "metrics" / "score.json").read_bytes())
    assert metrics["difficulty_v1"]["tasks"] == 2 and metrics["difficulty_v1"]["unmatched"] == 1
    assert metrics[PROXY]["tasks"] == 3
    rows = read_table(lake / "scores", "scores").to_pylist()
    want = expected_proxy(sources)
    assert {r["task_id"]: r["score"] for r in rows if r["scorer"] == PROXY} == want
    assert {r["task_id"]: r["score"] for r in rows if r["scorer"] == "difficulty_v1"} == {
        task_id_for("alpha", "calc"): 2.0,
        task_id_for("alpha", "three"): 1.0,
    }
    assert read_manifest(lake / "scores")["counts"]["rows"] == 5
    assert "3 computed" in proc.stdout and "1 unmatched import rows" in proc.stdout
    # a second run reads the proxy from the cache and writes the same table
    before = (lake / "scores" / "scores.parquet").read_bytes()
    again = stage(tmp_path, stage_params("imports/d.parquet"))
    assert again.returncode == 0 and "3 cached, 0 computed" in again.stdout
    assert (lake / "scores" / "scores.parquet").read_bytes() == before
    assert len(parts(tmp_path / "cache", PROXY)) == 1
