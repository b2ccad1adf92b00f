"""llm_response_length_v1 through `dvc repro` with the transformers engine: a tiny random Qwen3 on CPU
(built as the exports' tests build it) answers every task of the sample in the training
environment; the selection upsamples by those scores; a second run loads no model and asks nothing.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import duckdb
import pyarrow.compute as pc
import pytest
import yaml

from tracelake.core.lake import Lake
from tracelake.core.outputs import read_manifest
from tracelake.core.tables import read_table

from ..helpers import run_ok, train_python

pytestmark = pytest.mark.train_env
LLM = "llm_response_length_v1"
PROXY = "response_length_proxy_v1"


def set_params(repo: Path, **sections) -> None:
    params = yaml.safe_load((repo / "params.yaml").read_text())
    for section, values in sections.items():
        params[section].update(values)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def summary_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(f"score {LLM} "))


@pytest.fixture(scope="module")
def model_scored(sample_project, tiny_model, tmp_path_factory) -> tuple[Path, str, dict]:
    """The sample project rescored by the tiny model and selected by that score at 316 and 1k; the
    proxy-scored lake it replaced is kept in proxy-lake/. Returns (repo, output, env)."""
    repo = tmp_path_factory.mktemp("model-scored") / "project"
    shutil.copytree(sample_project, repo, symlinks=True)
    shutil.copytree(repo / "lake", repo / "proxy-lake")  # a selection is diffed with its lineage beside it
    set_params(
        repo,
        score={
            "scorers": ["response_length_proxy_v1", LLM],
            "model": {
                "backend": "transformers",
                "name": "tiny-qwen3",
                "path": str(tiny_model),
                "max_tokens": 24,
                "temperature": 1.0,
                "seed": 0,
            },
        },
        select={"score": LLM},
    )
    env = {"TRACELAKE_TRAIN_ENV": str(train_python().parent.parent)}
    return repo, run_ok(["dvc", "repro", "select@316", "select@1k"], repo, env), env


def test_transformers_backend_scores_the_sample_and_a_rerun_calls_no_model(model_scored):
    repo, out, env = model_scored

    lake = Lake(repo / "lake")
    con = duckdb.connect()
    tasks = con.execute(f"""SELECT count(DISTINCT t.task_id) FROM read_parquet('{lake.root}/tasks/*/tasks.parquet') t
                            WHERE t.task_id IN (SELECT task_id FROM read_parquet(
                                '{lake.root}/trajectories/*/trajectories/*.parquet'))""").fetchone()[0]
    assert tasks > 20
    line = summary_line(out)
    assert f"{tasks} tasks scored, {tasks} answered, 0 cached, 0 failed, {tasks} model calls" in line, line

    scores = read_table(lake.scores, "scores")
    llm = scores.filter(pc.equal(scores["scorer"], LLM))
    answers = read_table(lake.scores, "responses")
    assert llm.num_rows == tasks == answers.num_rows
    assert set(llm["model"].to_pylist()) == {"tiny-qwen3"}
    by_task = dict(zip(answers["task_id"].to_pylist(), answers["text"].to_pylist()))
    for task_id, score in zip(llm["task_id"].to_pylist(), llm["score"].to_pylist()):
        assert score == len(by_task[task_id])
    # the proxy is still there beside it, and the selection upsampled by the model's score
    assert scores.filter(pc.equal(scores["scorer"], "response_length_proxy_v1")).num_rows > 0
    selection = read_table(lake.selection("316"), "selection")
    score_of = dict(zip(llm["task_id"].to_pylist(), llm["score"].to_pylist()))
    assert all(score_of[t] == s for t, s in zip(selection["task_id"].to_pylist(), selection["score"].to_pylist()))
    assert read_manifest(lake.selection("316"))["params"]["score"] == LLM
    version = read_manifest(lake.scores)["version_id"]

    again = run_ok(["dvc", "repro", "-f", "score"], repo, env)
    line = summary_line(again)
    assert f"{tasks} tasks scored, 0 answered, {tasks} cached, 0 failed, 0 model calls" in line, line
    assert read_manifest(lake.scores)["version_id"] == version
    engine_lines = "\n".join(x for x in again.splitlines() if " shards on " not in x)  # not the executor's line
    assert not re.search(r"worker|Loading", engine_lines)  # no model was loaded


def test_diff_explains_the_moves_from_proxy_to_model_scores_by_the_score(model_scored):
    """`tracelake diff` between the proxy-scored and the model-scored 1k selections: every row that
    moved is explained by its task's score under each scorer, as the scores table has them."""
    repo, _, _ = model_scored
    report = json.loads(
        run_ok(
            [sys.executable, "-m", "tracelake", "diff", "--json", "proxy-lake/selections/1k", "lake/selections/1k"],
            repo,
        )
    )
    assert report["summary"]["scorers"] == {"a": PROXY, "b": LLM, "changed": True}
    scores = read_table(Lake(repo / "lake").scores, "scores").to_pylist()
    by = {(r["scorer"], r["task_id"]): r["score"] for r in scores}
    moved = report["moved"]
    assert moved and all(r["stage"] == "selection" for r in moved)
    for r in moved:
        a, b = (f"{by[(s, r['task_id'])]:.4f}".rstrip("0").rstrip(".") for s in (PROXY, LLM))
        assert r["detail"] == f"score {PROXY} {a} -> {LLM} {b}", r
    t = report["summary"]["trajectories"]
    assert sum(v["rows_a"] for v in t.values()) == 1000 == sum(v["rows_b"] for v in t.values())
