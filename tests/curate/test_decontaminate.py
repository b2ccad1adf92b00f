"""Benchmarks for decontamination: a directory of Harbor tasks or a Parquet / JSONL / JSON column of
instructions; n-gram containment (not a single shared boilerplate 13-gram); one-line errors."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tracelake.core.errors import BadInput
from tracelake.curate.dedup.decontaminate import load_benchmark, ngram_matches
from tracelake.curate.dedup.shingles import WordHasher, words
from tracelake.curate.params import DecontaminateParams

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
        (lambda p: (p / "x.jsonl").write_text("{not json\n") and p / "x.jsonl", "is not valid JSON"),
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
