"""Benchmarks for decontamination: a directory of Harbor tasks or a Parquet / JSONL / JSON column of
instructions; n-gram containment (not a single shared boilerplate 13-gram); one-line errors."""

from __future__ import annotations

import json
import os
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tracelake.core.duckdb_views import connect
from tracelake.core.errors import BadInput
from tracelake.core.outputs import read_manifest
from tracelake.core.tables import read_table
from tracelake.curate.dedup.decontaminate import (
    SKIP_REASONS,
    load_benchmark,
    ngram_matches,
    read_benchmark,
    task_turn_texts,
)
from tracelake.curate.dedup.shingles import WordHasher, words
from tracelake.curate.filter import attach_dedup, run_filters
from tracelake.curate.filter_params import FilterParams
from tracelake.curate.params import DecontaminateParams
from tracelake.tokens.rendering import Rendering
from tracelake.tokens.templates import TEMPLATES

from ..agent_traces import (
    OPENHANDS_SYSTEM_PROMPT,
    derived_lake,
    openhands_conversation,
    terminus_golden_row,
    trace_row,
)
from ..helpers import FIXTURES, need, run_stage

QWEN3 = TEMPLATES["qwen3"].markup()
RENDERING = Rendering()  # what LLaMA-Factory encodes: train.sft's defaults (qwen3, mode default, thinking keep)

ITEM = (
    "Write a script that reads every CSV file under /data/raw, drops the rows whose amount is "
    "negative, and writes the totals per customer to /data/out/totals.json sorted by customer id."
)
BOILERPLATE = "Please make sure all the tests pass and do not modify the tests themselves in any way at all"


def test_every_benchmark_format_loads_the_same_items(tmp_path):
    (tmp_path / "dir" / "task-a").mkdir(parents=True)
    (tmp_path / "dir" / "task-a" / "instruction.md").write_text(ITEM)
    pq.write_table(pa.table({"id": ["x1"], "prompt": [ITEM]}), tmp_path / "b.parquet")
    (tmp_path / "b.jsonl").write_text(json.dumps({"instruction": ITEM}) + "\n")
    (tmp_path / "b.json").write_text(json.dumps([{"instruction": ITEM}]))
    assert [(i.item, i.text) for i in load_benchmark("d", tmp_path / "dir")] == [("task-a", ITEM)]
    assert [(i.item, i.text) for i in load_benchmark("p", tmp_path / "b.parquet", "prompt", "id")] == [("x1", ITEM)]
    assert [(i.item, i.text) for i in load_benchmark("j", tmp_path / "b.jsonl")] == [("0", ITEM)]
    assert [(i.item, i.text) for i in load_benchmark("k", tmp_path / "b.json")] == [("0", ITEM)]


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda p: p / "missing", "does not exist"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "holds no task directory"),
        (lambda p: (p / "x.csv").write_text("a") and p / "x.csv", "a benchmark is a directory of tasks"),
        (lambda p: (p / "x.jsonl").write_text('{"text": "a"}\n') and p / "x.jsonl", "has no column 'instruction'"),
        (lambda p: (p / "x.jsonl").write_text("{not json\n") and p / "x.jsonl", r"line 1 not read \(unparsable_json\)"),
    ],
)
def test_bad_benchmarks_are_one_line(tmp_path, setup, message):
    with pytest.raises(BadInput, match=message) as err:
        load_benchmark("b", setup(tmp_path))
    assert "\n" not in str(err.value) and str(err.value).startswith("decontaminate.benchmarks.b: ")


def test_a_copy_matches_and_shared_boilerplate_does_not(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "instruction.md").write_text(f"{ITEM} {BOILERPLATE}")
    items = load_benchmark("b", tmp_path)
    tasks = [
        f"Hello! {ITEM.upper()} Thanks.",  # the item inside a longer task
        f"Rename the module core.py to util.py everywhere. {BOILERPLATE}",  # boilerplate only
        "short task",
    ]
    found = ngram_matches([words(t) for t in tasks], items, 13, 0.8, WordHasher())
    assert set(found) == {0} and found[0].method == "ngram" and found[0].similarity >= 0.8
    assert found[0].evidence == " ".join(words(ITEM)[:13])
    anything = ngram_matches([words(t) for t in tasks], items, 13, 0.0, WordHasher())
    assert set(anything) == {0, 1}  # ngram_min_share 0: any shared 13-gram, boilerplate included


def test_benchmark_paths_must_be_under_the_root(tmp_path):
    with pytest.raises(ValueError, match="is not under decontaminate.root"):
        DecontaminateParams(root=str(tmp_path / "benchmarks"), benchmarks={"b": str(tmp_path / "elsewhere")})


# --- one reader for every benchmark file: ingest's walker, a size cap, depth-limited JSON ------------


def skips(read) -> list[tuple[str, str]]:
    return [(s.path, s.reason) for s in read.skipped]


def test_a_benchmark_directory_is_read_by_ingests_rules(tmp_path):
    """Links inside the root are followed, out of it never; only regular files; each file not read
    is reported with its reason, never dropped."""
    root, outside = tmp_path / "benchmarks", tmp_path / "outside.md"
    outside.write_text("SECRET")
    bench = root / "b"
    for task in ("good", "inside", "out", "fifo", "dir", "big", "dangling", "linkdir-target"):
        (bench / task).mkdir(parents=True)
    (bench / "good" / "instruction.md").write_text(ITEM)
    (bench / "linkdir-target" / "instruction.md").write_text("target")
    (bench / "inside" / "instruction.md").symlink_to(bench / "good" / "instruction.md")
    (bench / "out" / "instruction.md").symlink_to(outside)
    os.mkfifo(bench / "fifo" / "instruction.md")
    (bench / "dir" / "instruction.md").mkdir()
    (bench / "big" / "instruction.md").write_bytes(b"x " * 2000)
    (bench / "dangling" / "instruction.md").symlink_to(bench / "missing")
    (bench / "latest").symlink_to(bench / "linkdir-target")
    read = read_benchmark("b", bench, root=root, max_file_bytes=3000)
    assert [(i.item, i.text) for i in read.items] == [("good", ITEM), ("inside", ITEM), ("linkdir-target", "target")]
    assert sorted(skips(read)) == [
        ("big/instruction.md", "file_too_large"),
        ("dangling/instruction.md", "unreadable_file"),
        ("dir/instruction.md", "unsupported_file"),
        ("fifo/instruction.md", "unsupported_file"),
        ("latest", "linked_directory"),
        ("out/instruction.md", "symlink_outside_input"),
    ]
    assert all(s.reason in SKIP_REASONS and "\n" not in s.line() for s in read.skipped)


def test_a_link_to_another_benchmark_under_the_root_is_followed(tmp_path):
    root = tmp_path / "benchmarks"
    (root / "a" / "t").mkdir(parents=True)
    (root / "b" / "t").mkdir(parents=True)
    (root / "a" / "t" / "instruction.md").write_text(ITEM)
    (root / "b" / "t" / "instruction.md").symlink_to(root / "a" / "t" / "instruction.md")
    assert [i.text for i in read_benchmark("b", root / "b", root=root).items] == [ITEM]
    assert skips(read_benchmark("b", root / "b")) == [("t/instruction.md", "symlink_outside_input")]


def test_jsonl_lines_are_read_one_by_one_and_each_bad_line_reported(tmp_path):
    lines = [
        json.dumps({"instruction": "first", "id": "a"}).encode(),
        b"",
        b"[" * 2000 + b"]" * 2000,  # nested past the parser's limit (1024), under the cap
        json.dumps({"instruction": "x" * 5000}).encode(),  # over the cap
        b"[1, 2]",
        json.dumps({"instruction": 3}).encode(),
        b"{not json",
        b'{"instruction": "bad \xff byte"}',
        json.dumps({"instruction": "last", "id": "z"}).encode(),
    ]
    path = tmp_path / "b.jsonl"
    path.write_bytes(b"\n".join(lines))
    read = read_benchmark("b", path, id_column="id", max_file_bytes=4096)
    assert [(i.item, i.text) for i in read.items] == [("a", "first"), ("z", "last")]
    assert skips(read) == [
        ("b.jsonl line 3", "json_too_deep"),
        ("b.jsonl line 4", "file_too_large"),
        ("b.jsonl line 5", "invalid_field"),
        ("b.jsonl line 6", "invalid_field"),
        ("b.jsonl line 7", "unparsable_json"),
        ("b.jsonl line 8", "invalid_utf8"),
    ]


def test_a_json_file_over_the_cap_is_not_read_and_a_parquet_value_over_it_is_skipped(tmp_path):
    (tmp_path / "b.json").write_text(json.dumps([{"instruction": "x" * 5000}]))
    assert skips(read_benchmark("j", tmp_path / "b.json", max_file_bytes=4096)) == [("b.json", "file_too_large")]
    pq.write_table(pa.table({"instruction": ["ok", "y" * 5000, None]}), tmp_path / "b.parquet")
    read = read_benchmark("p", tmp_path / "b.parquet", max_file_bytes=4096)
    assert [(i.item, i.text) for i in read.items] == [("0", "ok")]
    assert skips(read) == [("b.parquet row 1", "file_too_large"), ("b.parquet row 2", "invalid_field")]


def test_a_benchmark_file_that_is_a_fifo_or_links_out_is_reported(tmp_path):
    root = tmp_path / "benchmarks"
    root.mkdir()
    os.mkfifo(root / "f.jsonl")
    (tmp_path / "secret.jsonl").write_text(json.dumps({"instruction": "SECRET"}) + "\n")
    (root / "l.jsonl").symlink_to(tmp_path / "secret.jsonl")
    assert skips(read_benchmark("f", root / "f.jsonl", root=root)) == [("f.jsonl", "unsupported_file")]
    with pytest.raises(BadInput, match="leads outside decontaminate.root"):
        read_benchmark("l", root / "l.jsonl", root=root)


def test_every_skip_reason_is_in_the_data_contract():
    from tracelake.core.schema import schemas_dir

    text = (schemas_dir() / "README.md").read_text()
    body = text.split("## Benchmark files not read\n", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"^\| `([a-z0-9_]+)` \|", body, re.MULTILINE)) == set(SKIP_REASONS)


# --- what the model trains on: each rollout's opening turns (task_turns_v1), end to end -----------------


def test_turn_texts_are_each_opening_turn_and_terminus_task():
    prompt = "You are an AI assistant.\n\nTask Description:\nDo X now.\n\nCurrent terminal state:\n$ "
    assert task_turn_texts(["sys", prompt]) == ["sys", prompt, "Do X now."]
    assert task_turn_texts(["a", "b"]) == ["a", "b"]


def test_a_benchmark_task_in_rollouts_opening_turns_is_found_and_its_rollouts_dropped(tmp_path):
    """The dedup stage (a subprocess) with a real benchmark tree (Harbor's hello-world, csv-filter and
    word-count tasks in ../shared/fixtures), over trace tables of two agents' shapes:

    - hello-world: an OpenHands trace as Harbor exports it (a 21,633-character system prompt as a
      user message, then the task) and Harbor's own terminus-2 export (the task inside its first
      prompt): found, both rollouts dropped by contaminated_v1;
    - word-count: an OpenHands trace whose only user turn is its system prompt with the task
      appended: no task is derived from it (task_not_found), so only the rollout's opening turns show
      the benchmark; it is found there (found_in turns) and its rollout dropped;
    - csv-filter: an OpenHands trace whose task is in its third opening user turn (the derived
      instruction, its second, says to read the next message): found in the turns, dropped;
    - a task of neither benchmark, in the same shapes: kept."""
    harbor = need(FIXTURES / "harbor")
    hello = (harbor / "examples/tasks/hello-world/instruction.md").read_text()
    word_count = (harbor / "harbor_tasks/word-count/instruction.md").read_text()
    csv_filter = (harbor / "harbor_tasks/csv-filter/instruction.md").read_text()
    terminus = terminus_golden_row()
    assert hello.strip() in terminus["conversations"][0]["content"]
    rows = [
        trace_row("hello-world", openhands_conversation(hello), agent="openhands", run_id="oh", trial="t1"),
        {**terminus, "result": "1.0"},
        trace_row(
            "word-count-7",
            [
                {"role": "user", "content": f"{OPENHANDS_SYSTEM_PROMPT}\n\n{word_count}"},
                *openhands_conversation("")[2:],
            ],
            agent="openhands",
            run_id="oh",
            trial="t2",
        ),
        trace_row(
            "csv-filter-3",
            [
                *openhands_conversation("Read the task in the next message, then solve it.")[:2],
                {"role": "user", "content": csv_filter},
                *openhands_conversation("")[2:],
            ],
            agent="openhands",
            run_id="oh",
            trial="t4",
        ),
        trace_row(
            "tidy-up",
            openhands_conversation("Remove the build directory and every *.o file under src/."),
            agent="openhands",
            run_id="oh",
            trial="t3",
        ),
    ]
    lake, derived = derived_lake(tmp_path, rows, "mixed")
    assert (derived.rows, derived.rejects) == (3, 1)  # word-count-7: task_not_found
    params = {
        "lake": "lake",
        "sources": {"mixed": {"format": "traces", "path": "in/mixed.jsonl", "tasks": "in/mixed.jsonl"}},
        "dedup": {"embedding": {"enabled": False}},
        "decontaminate": {
            "root": str(harbor),
            "benchmarks": {"examples": str(harbor / "examples/tasks"), "harbor_tasks": str(harbor / "harbor_tasks")},
            "embedding_threshold": None,
        },
    }
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    proc = run_stage(tmp_path, "dedup", "--params", "params.yaml")
    assert proc.returncode == 0, proc.stderr
    assert "3 contaminated (2 found only in rollouts' opening turns)" in proc.stdout, proc.stdout

    ids = {
        r["task"]: r
        for r in read_table(lake.table("trajectories", "mixed"), "trajectories")
        .select(["trajectory_id", "task_id", "task", "agent"])
        .to_pylist()
        if r["agent"] == "openhands"
    }
    found = {r["task"]: r for r in read_table(lake.dedup, "contamination").to_pylist()}
    assert set(found) == {"hello-world", "word-count-7", "csv-filter-3"}
    assert (found["hello-world"]["benchmark"], found["hello-world"]["benchmark_item"]) == ("examples", "hello-world")
    assert found["hello-world"]["found_in"] == "instruction"
    wc = found["word-count-7"]
    assert (wc["benchmark"], wc["benchmark_item"], wc["found_in"]) == ("harbor_tasks", "word-count", "turns")
    assert wc["trajectory_id"] == ids["word-count-7"]["trajectory_id"] and wc["similarity"] >= 0.8
    csv = found["csv-filter-3"]
    assert (csv["benchmark_item"], csv["found_in"], csv["trajectory_id"]) == (
        "csv-filter",
        "turns",
        ids["csv-filter-3"]["trajectory_id"],
    )
    metrics = json.loads((tmp_path / "metrics" / "dedup.json").read_text())["contamination"]
    assert metrics["by_turns"] == 2 and metrics["tasks"] == 3
    assert read_manifest(lake.dedup)["formulas"]["decontaminate_turns"] == "task_turns_v1"

    con = connect(lake.root, ["mixed"], tables=("trajectories",))
    attach_dedup(con, lake)
    run_filters(
        con,
        FilterParams(tokenizer=str(need(FIXTURES / "qwen3-tokenizer")), count_tokens=False, max_tokens=None),
        rendering=RENDERING,
    )
    dropped = dict(
        con.execute("""SELECT t.task || ' ' || t.agent, d.detail FROM dropped d JOIN trajectories t USING (trajectory_id)
                       WHERE d.rule = 'contaminated_v1'""").fetchall()
    )
    assert set(dropped) == {
        "hello-world openhands",
        "hello-world terminus-2",
        "word-count-7 openhands",
        "csv-filter-3 openhands",
    }
    assert dropped["word-count-7 openhands"].endswith(f"(in the opening turns of rollout {wc['trajectory_id']})")
    kept = {t for (t,) in con.execute("SELECT task FROM pool").fetchall()}
    assert kept == {"tidy-up"}
