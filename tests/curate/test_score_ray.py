"""llm_response_length_v1 on a real local Ray cluster (a head node and two worker nodes of one CPU
each): the transformers engine (a tiny random Qwen3, the training environment's interpreter) runs
once per node as a Ray task, answers stream back into the answer cache, every task is scored by
its answer's length, and a rerun asks nothing (no Ray task, no model)."""

from __future__ import annotations

import json
import shutil

import pyarrow.compute as pc
import pytest
import yaml

from tracelake.core.lake import Lake
from tracelake.core.tables import read_table

from ..helpers import run_stage, train_python
from ..ray_cluster import local_cluster

pytestmark = pytest.mark.train_env
LLM = "llm_response_length_v1"


def test_the_transformers_scorer_runs_one_engine_per_ray_node(sample_project, tiny_model, tmp_path):
    repo = tmp_path / "project"
    shutil.copytree(sample_project, repo, symlinks=True)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["score"].update(
        scorers=[LLM],
        model={"backend": "transformers", "name": "tiny-qwen3", "path": str(tiny_model), "max_tokens": 16, "seed": 0},
    )
    params["select"]["score"] = LLM
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {"TRACELAKE_TRAIN_ENV": str(train_python().parent.parent), "TRACELAKE_EXECUTOR": "ray"}
    with local_cluster(workers=2) as cluster:
        env["RAY_ADDRESS"] = cluster.address
        first = run_stage(repo, "score", env=env)
        assert first.returncode == 0, first.stdout + first.stderr
        line = next(x for x in first.stdout.splitlines() if x.startswith(f"score {LLM} "))
        assert "on Ray, one engine per node: 2" in line, line
        scores = read_table(Lake(repo / "lake").scores, "scores")
        answers = read_table(Lake(repo / "lake").scores, "responses")
        tasks = scores.num_rows
        assert tasks > 20 and f"{tasks} tasks scored, {tasks} answered, 0 cached, 0 failed, {tasks} model calls" in line
        by_task = dict(zip(answers["task_id"].to_pylist(), answers["text"].to_pylist()))
        assert set(pc.unique(scores["scorer"]).to_pylist()) == {LLM}
        for task_id, score in zip(scores["task_id"].to_pylist(), scores["score"].to_pylist()):
            assert score == len(by_task[task_id])
        record = json.loads((repo / ".tracelake" / "runs" / "score.json").read_text())
        assert record["executor"] == "ray", record

        again = run_stage(repo, "score", env=env)
        assert again.returncode == 0, again.stdout + again.stderr
        line = next(x for x in again.stdout.splitlines() if x.startswith(f"score {LLM} "))
        assert f"{tasks} tasks scored, 0 answered, {tasks} cached, 0 failed, 0 model calls" in line, line
        assert "on Ray" not in line  # no engine was made: Ray was not even joined
