"""Trace tables (Parquet / JSONL / JSON) -> trajectories: real rows, every reject reason, determinism."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tracelake.core.errors import BadInput, RejectedInput
from tracelake.core.executor import Executor
from tracelake.core.hashing import sha256_file
from tracelake.core.ids import task_id_for
from tracelake.core.tables import read_table
from tracelake.ingest import tables, traces
from tracelake.ingest.traces import ingest_traces

from ..helpers import FIXTURES, killed_after, need, tree_bytes

SAMPLE = FIXTURES / "otagent" / "sample_raw.json"
SOURCE = "swesmith"


def ingest(tmp_path: Path, *files: Path, out: str = "out", **kw):
    result = ingest_traces(list(files), source=SOURCE, out_dir=tmp_path / out, **kw)
    rows = read_table(tmp_path / out, "trajectories").to_pylist()
    rejects = read_table(tmp_path / out, "rejects").to_pylist()
    assert result.inputs == result.rows + result.rejects == len(rows) + len(rejects)
    return result, rows, rejects


def row(i: int = 0, **over) -> dict:
    base = {
        "task": f"task-{i}",
        "trial_name": f"task-{i}__abc",
        "run_id": "run-1",
        "episode": "episode-0",
        "conversations": [{"role": "user", "content": f"do {i}"}, {"role": "assistant", "content": f"done {i}"}],
    }
    return {**base, **over}


def jsonl(path: Path, *lines: bytes | dict) -> Path:
    path.write_bytes(b"".join((orjson.dumps(x) if isinstance(x, dict) else x) + b"\n" for x in lines))
    return path


def sample_rows() -> list[dict]:
    return json.loads(need(SAMPLE).read_text())


# --- real rows -------------------------------------------------------------------------------


def test_real_sample_rows(tmp_path):
    result, rows, _ = ingest(tmp_path, need(SAMPLE))
    assert (result.inputs, result.rows, result.rejects) == (4, 4, 0)
    raw = sample_rows()
    assert [r["row_index"] for r in rows] == [0, 1, 2, 3]
    assert [r["task"] for r in rows] == [r["task"] for r in raw]
    assert rows[0]["task_id"] == task_id_for(SOURCE, "swesmith-31327")
    assert [r["is_subagent"] for r in rows] == [False, False, False, True]
    assert rows[3]["trace_source"] == "summarization-1-summary"
    for got, want in zip(rows, raw):
        assert got["messages"] == [{"role": m["role"], "content": m["content"]} for m in want["conversations"]]
        assert got["n_messages"] == len(want["conversations"])
        assert (got["result"], got["reward"], got["exception_type"], got["timed_out"]) == (None, None, None, False)
        assert (got["episode"], got["run_id"], got["trial_name"]) == (
            want["episode"],
            want["run_id"],
            want["trial_name"],
        )
        assert got["n_episodes"] is None
        assert got["renderer"] == "trace-table-v1"
        assert got["provenance"] == [{"path": "sample_raw.json", "sha256": sha256_file(SAMPLE)}]


def test_same_rows_as_json_jsonl_and_parquet_give_the_same_ids(tmp_path):
    raw = sample_rows()
    as_jsonl = jsonl(tmp_path / "rows.jsonl", *raw)
    as_parquet = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(raw), as_parquet, row_group_size=3)
    ids = {}
    for name, f in [("json", SAMPLE), ("jsonl", as_jsonl), ("parquet", as_parquet)]:
        _, rows, rejects = ingest(tmp_path, f, out=name)
        assert rejects == []
        ids[name] = [r["trajectory_id"] for r in rows]
        assert rows[3]["is_subagent"]
    assert ids["json"] == ids["jsonl"] == ids["parquet"]
    assert len(set(ids["json"])) == 4


def test_reingest_gives_identical_bytes(tmp_path):
    bad = jsonl(tmp_path / "bad.jsonl", b"{oops", row(1))
    a, _, _ = ingest(tmp_path, need(SAMPLE), bad, out="a")
    b, _, _ = ingest(tmp_path, SAMPLE, bad, out="b")
    assert tree_bytes(tmp_path / "a") == tree_bytes(tmp_path / "b")
    assert a.manifest["version_id"] == b.manifest["version_id"]
    assert (a.rows, a.rejects) == (5, 1)


# --- row fields ------------------------------------------------------------------------------


def test_sharegpt_speakers_are_mapped(tmp_path):
    conv = [
        {"from": "system", "value": "s"},
        {"from": "human", "value": "q"},
        {"from": "gpt", "value": "a"},
        {"from": "observation", "value": "o"},
        {"from": "function", "value": "f"},
        {"from": "gpt", "value": "b"},
    ]
    f = jsonl(tmp_path / "t.jsonl", {"task": "x", "conversations": conv})
    _, rows, _ = ingest(tmp_path, f)
    assert [m["role"] for m in rows[0]["messages"]] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert rows[0]["trace_source"] == "main" and not rows[0]["is_subagent"]


@pytest.mark.parametrize(
    "result, want",
    [
        ("1.0", ("1.0", 1.0, None, False)),
        (0, ("0.0", 0.0, None, False)),
        ("AgentTimeoutError", ("AgentTimeoutError", None, "AgentTimeoutError", True)),
        ("NonZeroAgentExitCodeError", ("NonZeroAgentExitCodeError", None, "NonZeroAgentExitCodeError", False)),
        (None, (None, None, None, False)),
    ],
)
def test_result_is_a_reward_or_an_exception(tmp_path, result, want):
    f = jsonl(tmp_path / "t.jsonl", row(result=result))
    _, rows, _ = ingest(tmp_path, f)
    r = rows[0]
    assert (r["result"], r["reward"], r["exception_type"], r["timed_out"]) == want


def test_non_string_scalars_become_strings(tmp_path):
    f = jsonl(tmp_path / "t.jsonl", row(run_id=7, episode=None, agent=True))
    _, rows, _ = ingest(tmp_path, f)
    assert (rows[0]["run_id"], rows[0]["episode"], rows[0]["agent"]) == ("7", None, "True")


def test_json_rows_wrapper_and_datasets_server_items(tmp_path):
    f = tmp_path / "t.json"
    f.write_bytes(orjson.dumps({"rows": [{"row_idx": 0, "row": row(0)}, row(1)]}))
    _, rows, rejects = ingest(tmp_path, f)
    assert [r["task"] for r in rows] == ["task-0", "task-1"] and rejects == []


# --- rejects ---------------------------------------------------------------------------------

GOOD = orjson.dumps(row(0))
CASES = {
    "invalid_utf8": b'{"task": "caf\xe9", "conversations": []}',
    "lone_surrogate": orjson.dumps(row(1))[:-1] + b',"x":"\\ud800"}',
    "unparsable_json": b'{"task": "t", "conversations": [',
    "invalid_field": b"[1, 2, 3]",
    "missing_required_field": orjson.dumps({"conversations": row()["conversations"]}),
    "empty_conversation": orjson.dumps(row(2, conversations=[])),
    "unknown_role": orjson.dumps(
        row(3, conversations=[{"role": "narrator", "content": "x"}, {"role": "assistant", "content": "y"}])
    ),
    "duplicate_trial": GOOD,
}


@pytest.mark.parametrize("reason", sorted(CASES))
def test_each_bad_line_is_one_reject(tmp_path, reason):
    # line 0 good, line 1 blank (skipped, not a unit), line 2 bad
    f = tmp_path / "rows.jsonl"
    f.write_bytes(GOOD + b"\n\n" + CASES[reason] + b"\n")
    result, rows, rejects = ingest(tmp_path, f)
    assert (result.inputs, len(rows)) == (2, 1)
    [rej] = rejects
    assert (rej["reason"], rej["path"], rej["row_index"], rej["input_kind"]) == (reason, "rows.jsonl", 2, "traces")
    assert result.by_reason == {reason: 1}
    if reason == "duplicate_trial":
        assert "rows.jsonl row 0" in rej["detail"]


@pytest.mark.parametrize(
    "bad_row, reason",
    [
        (row(content=1), None),  # unknown keys are ignored: a good row
        (row(conversations=[{"role": "user", "content": 1}, {"role": "assistant", "content": "a"}]), "invalid_field"),
        (row(conversations="hi"), "invalid_field"),
        (row(conversations=None), "missing_required_field"),
        (row(task=""), "missing_required_field"),
        (row(task=5), "invalid_field"),
        (row(result=[1]), "invalid_field"),
        (row(result="nan"), "invalid_field"),
        (row(model={"name": "x"}), "invalid_field"),
        (row(conversations=[{"role": "assistant"}]), "invalid_field"),
        (row(conversations=[{"role": "user", "content": "only a question"}]), "empty_conversation"),
    ],
)
def test_field_checks(tmp_path, bad_row, reason):
    f = jsonl(tmp_path / "t.jsonl", bad_row)
    _, _, rejects = ingest(tmp_path, f)
    assert [r["reason"] for r in rejects] == ([reason] if reason else [])


def test_subagent_reject_names_its_trace_source(tmp_path):
    f = jsonl(tmp_path / "t.jsonl", row(trace_source="summarization-1-summary", conversations=[]))
    _, _, [rej] = ingest(tmp_path, f)
    assert (rej["reason"], rej["trace_source"]) == ("empty_conversation", "summarization-1-summary")


def test_unsupported_file_is_one_reject(tmp_path):
    (tmp_path / "rows.csv").write_text("task,conversations\n")
    good = jsonl(tmp_path / "good.jsonl", row(0))
    result, rows, [rej] = ingest(tmp_path, good, tmp_path / "rows.csv")
    assert (result.inputs, len(rows)) == (2, 1)
    assert (rej["reason"], rej["path"], rej["row_index"]) == ("unsupported_file", "rows.csv", None)


@pytest.mark.parametrize(
    "data, reason",
    [
        (b'[{"task": "t", ', "unparsable_json"),
        (b'{"task": "t"}', "invalid_field"),
        (b"\xff[]", "invalid_utf8"),
    ],
)
def test_json_file_that_fails_as_a_whole_is_one_reject(tmp_path, data, reason):
    f = tmp_path / "t.json"
    f.write_bytes(data)
    result, _, [rej] = ingest(tmp_path, f)
    assert result.inputs == 1
    assert (rej["reason"], rej["path"], rej["row_index"]) == (reason, "t.json", None)


def test_lone_surrogate_in_a_json_file_rejects_only_its_row(tmp_path):
    f = tmp_path / "t.json"
    f.write_bytes(b"[" + orjson.dumps(row(0)) + b"," + orjson.dumps(row(1))[:-1] + b',"task":"\\udc00"}]')
    _, rows, [rej] = ingest(tmp_path, f)
    assert len(rows) == 1
    assert (rej["reason"], rej["path"], rej["row_index"]) == ("lone_surrogate", "t.json", 1)


def test_parquet_row_with_invalid_utf8_is_rejected_alone(tmp_path):
    tasks = pa.array([b"task-0", b"caf\xe9"], type=pa.binary()).view(pa.string())
    conv = [row()["conversations"]] * 2
    f = tmp_path / "t.parquet"
    pq.write_table(pa.table({"task": tasks, "conversations": conv}), f)
    _, rows, [rej] = ingest(tmp_path, f)
    assert len(rows) == 1
    assert (rej["reason"], rej["path"], rej["row_index"]) == ("invalid_utf8", "t.parquet", 1)


def test_corrupt_parquet_is_one_reject(tmp_path):
    f = tmp_path / "t.parquet"
    f.write_bytes(b"PAR1 this is not parquet")
    result, _, [rej] = ingest(tmp_path, f)
    assert result.inputs == 1 and (rej["reason"], rej["row_index"]) == ("unreadable_file", None)


def test_accounting_over_many_files_and_batches(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    jsonl(d / "a.jsonl", *[row(i) for i in range(2500)], b"", b"not json")
    pq.write_table(pa.Table.from_pylist([row(i + 5000) for i in range(1200)] + [row(0)]), d / "b.parquet")
    (d / "notes.txt").write_text("ignored: not a table file")
    result, rows, rejects = ingest(tmp_path, d)
    assert (result.inputs, result.rows, result.rejects) == (3702, 3700, 2)
    assert sorted((r["path"], r["row_index"], r["reason"]) for r in rejects) == [
        ("a.jsonl", 2501, "unparsable_json"),
        ("b.parquet", 1200, "duplicate_trial"),
    ]
    assert result.manifest["inputs"]["paths"] == ["a.jsonl", "b.parquet"]
    assert [r["row_index"] for r in rows[:3]] == [0, 1, 2]


@pytest.mark.parametrize("workers", [3])
def test_worker_processes_and_block_size_change_no_byte(tmp_path, monkeypatch, workers):
    """Parsing in worker processes gives the bytes of an in-process run; JSONL blocks cut anywhere
    (lines are completed) change only how the table is cut into parts, never its rows."""
    d = tmp_path / "in"
    d.mkdir()
    lines = [
        row(i, conversations=[{"role": "user", "content": "x" * (i % 97)}, {"role": "assistant", "content": "y"}])
        for i in range(1500)
    ]
    jsonl(d / "a.jsonl", *lines[:700], b"  ", b"{broken", lines[3], *lines[700:], b"\xff\xfe not utf-8")
    pq.write_table(pa.Table.from_pylist([row(i + 5000) for i in range(1100)]), d / "b.parquet", row_group_size=300)
    whole, whole_rows, _ = ingest(tmp_path, d, out="whole", executor=Executor("local"))  # no pool at all
    monkeypatch.setattr(tables, "JSONL_BLOCK_BYTES", 777)
    base, base_rows, _ = ingest(tmp_path, d, out="in-process", executor=Executor("local"))
    other, _, rejects = ingest(tmp_path, d, out="pool", executor=Executor("processes", workers))
    assert tree_bytes(tmp_path / "in-process") == tree_bytes(tmp_path / "pool")
    assert base_rows == whole_rows and base.manifest["version_id"] == whole.manifest["version_id"]
    assert len(list((tmp_path / "pool" / "trajectories").iterdir())) > 100  # one part per block
    assert sorted((r["row_index"], r["reason"]) for r in rejects if r["path"] == "a.jsonl") == [
        (701, "unparsable_json"),
        (702, "duplicate_trial"),
        (1503, "invalid_utf8"),
    ]
    assert (other.rows, other.rejects) == (base.rows, base.rejects) == (2600, 3)


# --- whole-command errors, --strict, progress ------------------------------------------------


def test_paths_are_relative_to_the_common_parent(tmp_path):
    for d in ("x", "y"):
        (tmp_path / d).mkdir()
    a, b = jsonl(tmp_path / "x" / "t.jsonl", row(0)), jsonl(tmp_path / "y" / "t.jsonl", row(1))
    _, rows, _ = ingest(tmp_path, a, b)
    assert [r["provenance"][0]["path"] for r in rows] == ["x/t.jsonl", "y/t.jsonl"]


def test_missing_and_repeated_files_are_errors(tmp_path):
    f = jsonl(tmp_path / "t.jsonl", row(0))
    with pytest.raises(BadInput, match="does not exist"):
        ingest_traces([tmp_path / "nope.jsonl"], source=SOURCE, out_dir=tmp_path / "o")
    with pytest.raises(BadInput, match="named twice"):
        ingest_traces([f, tmp_path], source=SOURCE, out_dir=tmp_path / "o")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadInput, match="no .parquet"):
        ingest_traces([tmp_path / "empty"], source=SOURCE, out_dir=tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_strict_raises_naming_the_file(tmp_path):
    f = jsonl(tmp_path / "t.jsonl", row(0), b"{broken")
    with pytest.raises(RejectedInput, match=r"t\.jsonl row 1: unparsable_json"):
        ingest_traces([f], source=SOURCE, out_dir=tmp_path / "o", strict=True)
    assert not (tmp_path / "o").exists()


def test_progress_and_metrics(tmp_path):
    a, b = jsonl(tmp_path / "a.jsonl", row(0)), jsonl(tmp_path / "b.jsonl", row(1), b"[]")
    events: list = []
    result = ingest_traces(
        [a, b],
        source=SOURCE,
        out_dir=tmp_path / "o",
        metrics_path=tmp_path / "m" / "metrics.json",
        on_start=lambda n: events.append(("start", n)),
        on_progress=lambda n: events.append(("step", n)),
    )
    assert events == [("start", 2), ("step", 1), ("step", 1)]
    metrics = json.loads((tmp_path / "m" / "metrics.json").read_text())
    assert metrics["inputs"] == 3 and metrics["rejects_by_reason"] == {"invalid_field": 1}
    assert metrics["version_id"] == result.manifest["version_id"]


# --- incremental ingest: the file cache --------------------------------------------------------


def test_appended_file_is_the_only_one_parsed_and_bytes_match_a_full_rebuild(tmp_path):
    d, cache = tmp_path / "in", tmp_path / "cache"
    d.mkdir()
    jsonl(d / "a.jsonl", *[row(i) for i in range(1500)], b"{broken")
    pq.write_table(pa.Table.from_pylist([row(i + 5000) for i in range(300)]), d / "b.parquet")
    first, _, _ = ingest(tmp_path, d, out="first", cache=cache)
    assert first.files_from_cache == 0
    jsonl(d / "c.jsonl", row(9000), row(4), row(9001))  # new file; row(4) repeats a.jsonl's line 4
    again, _, rejects = ingest(tmp_path, d, out="again", cache=cache)
    full, _, _ = ingest(tmp_path, d, out="full")  # no cache at all
    assert again.files_from_cache == 2
    assert tree_bytes(tmp_path / "again") == tree_bytes(tmp_path / "full")
    assert {(r["path"], r["row_index"], r["reason"]) for r in rejects} == {
        ("a.jsonl", 1500, "unparsable_json"),
        ("c.jsonl", 1, "duplicate_trial"),
    }
    # a changed file is parsed again; the others still come from the cache
    jsonl(d / "a.jsonl", *[row(i) for i in range(1499)])
    changed, _, _ = ingest(tmp_path, d, out="changed", cache=cache)
    assert changed.files_from_cache == 2 and changed.rows == 1499 + 300 + 2


def test_an_unchanged_file_is_not_read_again_and_any_rewrite_is_seen(tmp_path, monkeypatch):
    """The cache remembers each file's sha256 by its stat (path, inode, size, mtime, ctime): a rerun
    neither reads nor hashes an unchanged file. A rewrite of the same size with its mtime put back
    still changes the ctime, so the file is read, hashed and parsed again."""
    d, cache = tmp_path / "in", tmp_path / "cache"
    d.mkdir()
    jsonl(d / "a.jsonl", *[row(i) for i in range(40)])
    jsonl(d / "b.jsonl", row(100), row(101))
    first, rows, _ = ingest(tmp_path, d, out="first", cache=cache)
    assert len(list((cache / "stat").rglob("*"))) > 2  # two files remembered (and their directories)
    read: list[str] = []
    real = traces.raw_batches
    monkeypatch.setattr(traces, "raw_batches", lambda path, rel, **kw: read.append(rel) or real(path, rel, **kw))
    jsonl(d / "c.jsonl", row(200))
    again, _, _ = ingest(tmp_path, d, out="again", cache=cache)
    assert read == ["c.jsonl"] and again.files_from_cache == 2
    assert again.manifest["inputs"] == ingest(tmp_path, d, out="full")[0].manifest["inputs"]  # same sha256s
    assert tree_bytes(tmp_path / "again") == tree_bytes(tmp_path / "full")

    st = (d / "b.jsonl").stat()
    time.sleep(0.05)
    jsonl(d / "b.jsonl", row(102), row(103))  # same length, other rows
    assert (d / "b.jsonl").stat().st_size == st.st_size
    os.utime(d / "b.jsonl", ns=(st.st_atime_ns, st.st_mtime_ns))
    read.clear()
    changed, rows, _ = ingest(tmp_path, d, out="changed", cache=cache)
    assert read == ["b.jsonl"] and changed.files_from_cache == 2
    assert {r["task"] for r in rows} >= {row(102)["task"], row(103)["task"]}
    assert row(100)["task"] not in {r["task"] for r in rows}


def test_a_cached_part_that_loses_a_duplicate_is_rewritten_and_the_cache_kept(tmp_path):
    """A new file sorted before a cached one repeats one of its rows: the cached file's part loses
    that row in the output (as in a full rebuild), while its cache entry stays whole."""
    d, cache = tmp_path / "in", tmp_path / "cache"
    d.mkdir()
    jsonl(d / "b.jsonl", *[row(i) for i in range(30)])
    ingest(tmp_path, d, out="first", cache=cache)
    entry = {p: p.read_bytes() for p in cache.rglob("*") if p.is_file()}
    jsonl(d / "a.jsonl", row(7))
    again, _, rejects = ingest(tmp_path, d, out="again", cache=cache)
    ingest(tmp_path, d, out="full")
    assert again.files_from_cache == 1 and again.rows == 30
    assert [(r["path"], r["row_index"], r["reason"]) for r in rejects] == [("b.jsonl", 7, "duplicate_trial")]
    assert tree_bytes(tmp_path / "again") == tree_bytes(tmp_path / "full")
    assert all(p.read_bytes() == b for p, b in entry.items())


def test_damaged_cache_entry_is_a_miss_or_a_clear_error(tmp_path):
    d, cache = tmp_path / "in", tmp_path / "cache"
    d.mkdir()
    jsonl(d / "a.jsonl", *[row(i) for i in range(20)])
    ingest(tmp_path, d, out="first", cache=cache)
    meta = next(cache.rglob("*.json"))
    meta.write_bytes(b"{not json")
    again, _, _ = ingest(tmp_path, d, out="again", cache=cache)  # unreadable index: parsed again
    assert again.files_from_cache == 0
    assert tree_bytes(tmp_path / "again") == tree_bytes(tmp_path / "first")
    part = next(cache.rglob("*.parquet"))
    part.write_bytes(part.read_bytes()[:-50])  # rows cut short
    with pytest.raises(BadInput, match="ingest cache entry .* is damaged"):
        ingest_traces([d], source=SOURCE, out_dir=tmp_path / "third", cache=cache)
    assert tree_bytes(tmp_path / "again") == tree_bytes(tmp_path / "first")  # a lake file is never a cache file
    assert not (tmp_path / "third").exists() and not list(tmp_path.glob(".third*"))


def test_a_killed_ingest_parses_only_the_files_never_finished(tmp_path, monkeypatch):
    """Each input file's parse is kept in the ingest cache when the file's last batch is done (its
    index written last, the completion marker): a run killed mid-way is resumed by a rerun that maps
    only the batches of the files never finished, on any executor, and writes the same bytes."""
    d, cache, log = tmp_path / "in", tmp_path / "cache", tmp_path / "shards.log"
    d.mkdir()
    for k in range(4):  # 4 files of 3 batches each
        pq.write_table(pa.Table.from_pylist([row(1000 * k + i) for i in range(30)]), d / f"{k}.parquet")
    monkeypatch.setattr(traces, "BATCH_ROWS", 10)
    ingest(tmp_path, d, out="clean", executor=Executor("local"))
    real = traces.parse_batch
    monkeypatch.setattr(traces, "parse_batch", killed_after(real, 7, []))  # two files done, the third one batch in
    with pytest.raises(KeyboardInterrupt):
        ingest(tmp_path, d, out="killed", cache=cache, executor=Executor("local"))
    monkeypatch.setattr(traces, "parse_batch", real)
    monkeypatch.setenv("TRACELAKE_SHARD_LOG", str(log))
    rerun = Executor("processes", 2)
    result, _, _ = ingest(tmp_path, d, out="rerun", cache=cache, executor=rerun)
    assert result.files_from_cache == 2
    assert rerun.shards == 6  # the two unfinished files' batches, each parsed once
    assert sum('"start"' in line for line in log.read_text().splitlines()) == 6
    assert tree_bytes(tmp_path / "rerun") == tree_bytes(tmp_path / "clean")
