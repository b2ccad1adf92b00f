"""`tracelake show ID`: one trajectory by id or unique prefix, for a terminal or as JSON."""

from __future__ import annotations

import json
import os
from functools import partial

import pyarrow.parquet as pq
import pytest

from tracelake.core.errors import BadInput
from tracelake.explore.show import find_trajectory, fold

from ..helpers import run_tracelake

tracelake = partial(run_tracelake, columns=120)


@pytest.fixture(scope="module")
def ids(sample_project) -> list[str]:
    return sorted(
        i
        for f in (sample_project / "lake").glob("trajectories/*/trajectories/part-*.parquet")
        for i in pq.read_table(f, columns=["trajectory_id"])["trajectory_id"].to_pylist()
    )


def _unique_prefix(ids: list[str], target: str) -> str:
    for n in range(6, 17):
        if sum(i.startswith(target[:n]) for i in ids) == 1:
            return target[:n]
    raise AssertionError("no unique prefix")


def test_json_is_the_row_found_by_id_or_unique_prefix(sample_project, ids):
    target = ids[len(ids) // 2]
    proc = tracelake(sample_project, "show", _unique_prefix(ids, target), "--json")
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout)
    assert row["trajectory_id"] == target and len(row["messages"]) == row["n_messages"]
    assert find_trajectory(sample_project / "lake", target.upper())["trajectory_id"] == target


def test_terminal_rendering_shows_roles_and_folds_long_output(sample_project):
    lake = sample_project / "lake"
    rows = pq.read_table(sorted(lake.glob("trajectories/*/trajectories/part-*.parquet"))[0]).to_pylist()
    row = max(
        rows,
        key=lambda r: max(len((m["content"] or "").split("\n")) for m in r["messages"] if m["role"] != "assistant"),
    )
    proc = tracelake(sample_project, "show", row["trajectory_id"])
    assert proc.returncode == 0, proc.stderr
    assert f"0 {row['messages'][0]['role']}" in proc.stdout and "1 assistant" in proc.stdout
    assert "more lines …" in proc.stdout
    assert "more lines" not in tracelake(sample_project, "show", row["trajectory_id"], "--full").stdout


def test_fold_keeps_head_and_tail():
    text = "\n".join(str(i) for i in range(30))
    folded = fold(text, 6).split("\n")
    assert folded[:3] == ["0", "1", "2"] and folded[-3:] == ["27", "28", "29"] and "24 more lines" in folded[3]
    assert fold("a\nb") == "a\nb"


def test_ambiguous_prefix(tmp_path):
    import pyarrow as pa

    d = tmp_path / "trajectories" / "x" / "trajectories"
    d.mkdir(parents=True)
    pq.write_table(pa.table({"trajectory_id": ["abcdef0123456789", "abcdef0f23456789"]}), d / "part-00000.parquet")
    with pytest.raises(BadInput, match="ambiguous"):
        find_trajectory(tmp_path, "abcdef")
    assert find_trajectory(tmp_path, "abcdef0f")["trajectory_id"] == "abcdef0f23456789"


def test_bad_references(sample_project, ids):
    lake = sample_project / "lake"
    with pytest.raises(BadInput, match="at least 6"):
        find_trajectory(lake, ids[0][:5])
    with pytest.raises(BadInput, match="not a trajectory id"):
        find_trajectory(lake, "zzzzzzzz")
    with pytest.raises(BadInput, match="no trajectory"):
        find_trajectory(lake, "ffffffffffffffff0")
    proc = tracelake(sample_project, "show", "abc")
    assert proc.returncode == 2 and proc.stderr.startswith("tracelake: show: ") and proc.stderr.count("\n") == 1


def test_trained_shows_what_each_llamafactory_mode_trains_on(sample_project):
    """--trained: the export row's tokens per LF mode (the modes themselves are proven against LF's own
    get_dataset in test_lf_render.py): train_on_prompt trains every token of the row, default
    trains the responses only, mask_history the last one only."""
    import duckdb

    from tracelake.explore.trained import _encoder, export_row, trained_counts

    lake = sample_project / "lake"
    rows = (
        duckdb.connect()
        .execute(
            f"SELECT trajectory_id, n_tokens FROM read_parquet('{lake}/exports/sft/316/*/*.parquet') "
            "ORDER BY trajectory_id LIMIT 8"
        )
        .fetchall()
    )
    cwd = os.getcwd()
    os.chdir(sample_project)  # the export's tokenizer path is the project's
    try:
        for trajectory_id, n_tokens in rows:
            row = export_row(lake, trajectory_id)
            assert row["scale"] == "316" and row["n_tokens"] == n_tokens
            counts = trained_counts(row, _encoder(row))
            assert counts["train_on_prompt"] == n_tokens
            assert 0 < counts["mask_history"] <= counts["default"] < n_tokens
            assert counts["no_thinking"] <= counts["default"]
            assert 0 < counts["v1"] <= n_tokens  # v1 trains every assistant turn with its header
    finally:
        os.chdir(cwd)
    proc = tracelake(sample_project, "show", rows[0][0], "--trained", "--mode", "mask_history")
    assert proc.returncode == 0, proc.stderr
    assert "in sft-316-" in proc.stdout and "trained tokens by LLaMA-Factory mode: default" in proc.stdout
    assert "mode mask_history:" in proc.stdout and "<|im_start|>assistant" in proc.stdout
    proc = tracelake(sample_project, "show", rows[0][0], "--trained")  # the mode the export trains in
    assert proc.returncode == 0 and "mode default:" in proc.stdout, proc.stderr
    proc = tracelake(sample_project, "show", rows[0][0], "--trained", "--mode", "v1")
    assert proc.returncode == 0, proc.stderr
    assert "mode v1: the v1 data engine (USE_V1=1); v1 cuts at cutoff_len 32,768" in proc.stdout
    assert ", v1 " in " ".join(proc.stdout.split("mode v1:")[0].split())  # the counts line (it may wrap)
    proc = tracelake(sample_project, "show", rows[0][0], "--trained", "--mode", "bogus")
    assert proc.returncode != 0 and "LF mode 'bogus': one of default" in proc.stderr
    dropped = (
        duckdb.connect()
        .execute(
            f"SELECT trajectory_id FROM read_parquet('{lake}/pool/dropped.parquet') ORDER BY trajectory_id LIMIT 1"
        )
        .fetchall()[0][0]
    )
    proc = tracelake(sample_project, "show", dropped, "--trained")
    assert proc.returncode != 0 and f"{dropped} is in no SFT export" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
