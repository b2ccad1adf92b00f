"""core/ids and core/layout: the id formulas and the lake's paths, on tiny directories."""

from __future__ import annotations

import json

import pytest

from tracelake.core.datasets import KINDS, building_stage, dataset_id, dataset_kind, pick_dataset, versions
from tracelake.core.errors import BadInput, Bug
from tracelake.core.ids import (
    base_task_name,
    copy_name,
    dataset_label,
    matches_id_prefix,
    task_id_for,
)
from tracelake.core.lake import Lake, is_built


@pytest.mark.parametrize(
    ("n", "label"), [(316, "316"), (999, "999"), (1000, "1k"), (3160, "3.16k"), (31600, "31.6k"), (100000, "100k")]
)
def test_dataset_labels(n, label):
    assert dataset_label(n) == label
    assert dataset_id("sft", n, "9b6b602e9f63") == f"sft-{label}-9b6b602e9f63"


def test_dataset_kind_is_checked():
    with pytest.raises(ValueError):
        dataset_id("pool", 10, "abc")


def test_dataset_kinds_are_declared_once_and_an_unknown_one_is_an_error():
    """core/datasets.py KINDS: the stage that builds each kind (freshness asks it), never a fallback."""
    assert [k.name for k in KINDS] == ["pool", "selection", "export_sft", "export_rl"]
    assert building_stage("pool") == "filter" and building_stage("export_rl") == "export_rl"
    assert building_stage("selection", "1k") == "select@1k" and building_stage("export_sft", "3k") == "export_sft@3k"
    with pytest.raises(Bug, match="no dataset kind 'export_trl'"):
        building_stage("export_trl")  # it was answered with export_rl's stage
    with pytest.raises(Bug):
        building_stage("selection")  # a kind built per scale needs its scale
    assert dataset_kind("export_sft").view.format(scale="1k") == "sft_1k"


def test_copies_are_the_same_task():
    assert base_task_name(copy_name("count-words", 2)) == "count-words"
    assert copy_name("t", 12) == "t_copy0012"
    assert task_id_for("src", "t_copy0003") == task_id_for("src", "t") != task_id_for("other", "t")


@pytest.mark.parametrize(
    ("ref", "ok"),
    [
        ("9b6b60", True),
        ("9b6b", False),
        ("sft-3.16k-9b6b60", True),
        ("sft-1k-9b6b60", False),
        ("9b6b602e9f63", True),
        ("9b6b61", False),
    ],
)
def test_prefixes_need_six_hex_digits(ref, ok):
    assert matches_id_prefix(ref, "sft-3.16k-9b6b602e9f63") is ok


def _built(directory, dataset_id=None):
    directory.mkdir(parents=True)
    (directory / "manifest.json").write_text(json.dumps({"dataset_id": dataset_id}))


def test_lake_lists_only_built_outputs(tmp_path):
    lake = Lake(tmp_path / "lake")
    _built(lake.pool)
    _built(lake.selection("1k"))
    (lake.selection("3k")).mkdir(parents=True)  # no manifest: a crashed build, not a dataset
    _built(lake.sft_export("1k"))
    _built(lake.table("trajectories", "a"))
    assert is_built(lake.pool) and not is_built(lake.selection("3k"))
    assert list(lake.built_selections()) == ["1k"]
    assert list(versions(lake)) == ["pool", "1k", "sft-1k"]
    assert [(t, s) for t, s, _ in lake.ingested()] == [("trajectories", "a")]
    with pytest.raises(BadInput, match="is not built"):
        lake.table_files("trajectories", ["a", "b"])


def test_pick_dataset_by_name_id_or_unique_prefix():
    named = {"1k": "sel-1k-abcdef111111", "3k": "sel-3.16k-abcdef222222", "pool": ""}
    assert pick_dataset("1k", named) == "1k"
    assert pick_dataset("sel-3.16k-abcdef222222", named) == "3k"
    assert pick_dataset("abcdef2", named) == "3k"
    with pytest.raises(BadInput, match="'abcdef' is ambiguous: sel-1k-abcdef111111, sel-3.16k-abcdef222222"):
        pick_dataset("abcdef", named)
    with pytest.raises(BadInput, match=r"no dataset 'abcde' \(known: 1k \(sel-1k-abcdef111111\)"):
        pick_dataset("abcde", named)


def test_hidden_directories_are_never_built_outputs(tmp_path):
    """A killed build leaves `.<name>.tmp-<pid>` (or `.old-`, `.parts-`) beside its output, maybe
    with a manifest: no listing (status, sql, diff) takes it for a source or a scale."""
    lake = Lake(tmp_path / "lake")
    _built(lake.table("trajectories", "s"))
    for hidden in (".s.tmp-123", ".s.old-123", ".s.parts-123-abc"):
        _built(lake.table("trajectories", hidden))
        _built(lake.table("tasks", hidden))
    _built(lake.selection(".1k.tmp-9"))
    _built(lake.sft_export(".1k.old-9"))
    (lake.root / "tasks" / "stray-file").write_text("")
    assert [(t, s) for t, s, _ in lake.ingested()] == [("trajectories", "s")]
    assert lake.built_selections() == {} and lake.built_sft_exports() == {}
    assert list(versions(lake)) == []
