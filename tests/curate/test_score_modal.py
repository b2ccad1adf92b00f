"""`tracelake score --backend modal --dry-run`: the plan of a vLLM scoring run on Modal, offline
(requests cached and to send, the model's source, GPU, volume, secrets by name, the exact command),
and the Modal app itself defining its functions offline in the training environment."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import yaml

from tracelake.core.errors import BadParams
from tracelake.core.hashing import model_fingerprint
from tracelake.curate.score_params import ModelParams, ScoreParams
from tracelake.curate.scoring.answers import run_model_scorer
from tracelake.curate.scoring.engines.modal import PREFIX
from tracelake.curate.scoring.model_run import describe, plan_score
from tracelake.curate.scoring.scorers import LlmResponseLength

from ..chat_server import ChatServer
from ..helpers import ROOT, copy_project, run_ok, train_python
from .test_model_scoring import task_con

LLM = "llm_response_length_v1"
HUB_ID = "Qwen/Qwen3-0.6B"


def score_params(cache, **model) -> ScoreParams:
    return ScoreParams(
        scorers=[LLM], model=ModelParams(**{"backend": "vllm", "name": HUB_ID, **model}), cache=str(cache)
    )


def test_dry_run_counts_what_is_cached_and_shows_the_command(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    con, score = task_con(30), score_params(tmp_path / "cache", batch_size=128, max_tokens=64)
    text = describe(plan_score(LlmResponseLength(), con, score, "modal"), score.model)
    assert "requests: 30 tasks: 0 cached, 30 to send" in text
    assert f"hub id {HUB_ID}, downloaded on Modal into tracelake-scoring:/models/hub" in text
    assert "engine:   vllm on Modal, gpu H100:1, timeout 4 h (app tracelake-score)" in text
    assert "HF_TOKEN (not set)" in text and "image:    vllm==0.32.0, python 3.12" in text
    assert f"modal run scoring/modal_app.py::score --model {HUB_ID} --batch-size 128" in text
    assert "sampling: temperature 1.0, max_tokens 64, seed 0, n 1, score by chars" in text

    # answers already cached (from any engine: the key holds the model's name, not the engine) are not sent
    server = ChatServer().start()
    try:
        some = ModelParams(backend="openai", name=HUB_ID, base_url=server.base_url, api_key_env=None, max_tokens=64)
        run_model_scorer(LlmResponseLength(), task_con(12), some, score.cache)
    finally:
        server.stop()
    text = describe(plan_score(LlmResponseLength(), con, score, "modal"), score.model)
    assert "requests: 30 tasks: 12 cached, 18 to send" in text


def test_a_local_model_directory_is_uploaded_once_under_its_fingerprint(tmp_path, monkeypatch):
    model_dir = tmp_path / "tiny"
    model_dir.mkdir()
    (model_dir / "config.json").write_text('{"model_type": "qwen3"}')
    (model_dir / "model.safetensors").write_bytes(bytes(range(256)) * 20_000)  # > 2 MiB: head and tail
    fingerprint = model_fingerprint(model_dir)
    assert fingerprint == model_fingerprint(model_dir) and len(fingerprint) == 16
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value_123")
    score = score_params(tmp_path / "cache", path=str(model_dir), max_model_len=4096)
    text = describe(plan_score(LlmResponseLength(), task_con(3), score, "modal"), score.model)
    assert (
        f"local directory {model_dir.as_posix()}, fingerprint {fingerprint}: uploaded once to "
        f"tracelake-scoring:/models/{fingerprint}" in text
    )
    assert f"--model /models/{fingerprint}" in text and f"--fingerprint {fingerprint}" in text
    assert "--max-model-len 4096" in text
    assert "HF_TOKEN (set)" in text and "hf_secret_value_123" not in text
    # the end of a big file is part of it
    data = bytearray((model_dir / "model.safetensors").read_bytes())
    data[-1] ^= 1
    (model_dir / "model.safetensors").write_bytes(bytes(data))
    assert model_fingerprint(model_dir) != fingerprint


def test_only_the_vllm_engine_runs_on_modal(tmp_path):
    score = score_params(tmp_path / "cache", backend="transformers")
    with pytest.raises(BadParams, match="--backend modal runs the vllm engine: set score.model.backend: vllm"):
        plan_score(LlmResponseLength(), task_con(3), score, "modal")
    with pytest.raises(BadParams, match="--backend must be one of local, modal"):
        plan_score(LlmResponseLength(), task_con(3), score, "ray")


@pytest.mark.e2e  # runs the pipeline's stages in a project: not the fast loop
def test_the_command_line_dry_run_in_a_project(tmp_path):
    """`tracelake score --backend modal --dry-run` in a project whose sample is ingested."""
    repo = copy_project(tmp_path / "project", trials=40, tasks=12)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["score"].update(
        scorers=["response_length_proxy_v1", LLM],
        model={"backend": "vllm", "name": HUB_ID},
        cache=str(tmp_path / "cache"),
    )
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run_ok(["dvc", "repro", "ingest"], repo)
    out = run_ok([sys.executable, "-m", "tracelake", "score", "--backend", "modal", "--dry-run"], repo)
    assert re.search(r"requests: (\d+) tasks: 0 cached, \1 to send", out), out
    assert "modal run scoring/modal_app.py::score" in out and "then:     dvc repro score" in out
    assert not (repo / "lake" / "scores").exists()  # a dry run writes nothing
    proc = subprocess.run(
        [sys.executable, "-m", "tracelake", "score", "--backend", "modal", "--dry-run", "--params", "missing.yaml"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert (
        proc.returncode == 2
        and proc.stderr.strip() == "tracelake: missing.yaml not found (run from the repository root, or pass --params)"
    )


@pytest.mark.e2e  # runs the pipeline's stages in a project: not the fast loop
def test_local_backend_fills_the_cache_and_dvc_repro_score_asks_nothing(tmp_path):
    """`tracelake score` answers every task into the cache and writes nothing in the lake; the score
    stage then builds lake/scores from the cache without a model call."""
    repo = copy_project(tmp_path / "project", trials=40, tasks=12)
    server = ChatServer().start()
    try:
        params = yaml.safe_load((repo / "params.yaml").read_text())
        params["score"].update(
            scorers=["response_length_proxy_v1", LLM],
            cache=str(tmp_path / "cache"),
            model={
                "backend": "openai",
                "name": "tiny",
                "base_url": server.base_url,
                "api_key_env": None,
                "max_tokens": 30,
            },
        )
        (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        run_ok(["dvc", "repro", "ingest"], repo)
        out = run_ok([sys.executable, "-m", "tracelake", "score"], repo)
        n = int(re.search(r"requests: (\d+) tasks: 0 cached", out).group(1))
        assert f"{n} tasks scored, {n} answered, 0 cached, 0 failed, {n} model calls" in out, out
        assert server.answered == n and not (repo / "lake" / "scores").exists()
        out = run_ok(["dvc", "repro", "score"], repo)
        assert f"{n} tasks scored, 0 answered, {n} cached, 0 failed, 0 model calls" in out, out
        assert server.answered == n
    finally:
        server.stop()


@pytest.mark.train_env
def test_modal_app_defines_its_functions_offline(tmp_path):
    code = (
        "import sys; sys.path.insert(0, 'scoring'); import modal_app as m; "
        "print(m.app.name, sorted(m.app.registered_functions), sorted(m.app.registered_entrypoints), m.GPU, m.VOLUME, m.VLLM, m.PREFIX == sys.argv[1], m.WORKER.is_file())"
    )
    env = {
        "HOME": str(tmp_path),
        "TRACELAKE_MODAL_GPU": "L40S:1",
        "TRACELAKE_MODAL_APP": "s-app",
        "TRACELAKE_MODAL_VLLM": "0.31.0",
    }
    text = run_ok([str(train_python()), "-c", code, PREFIX.decode()], ROOT, env=env)
    # the last True: the worker the image copies exists (it is copied when the image is built, on Modal)
    assert "s-app ['generate'] ['score'] L40S:1 tracelake-scoring 0.31.0 True True" in text
    assert os.environ.get("HF_TOKEN") is None or "hf_" not in text
