"""The score stage against a hostile OpenAI-compatible endpoint (tests/hostile_server.py, raw sockets
on 127.0.0.1), run as `python -m stages score` in a child process on a small ingested lake.

Wrong types in the fields of an answer, a Retry-After of a day, headers or a body dripped a byte a
second, answers of 64 MiB: each task fails with its reason and the run goes on, ends within its
deadlines and its memory bound; Ctrl-C stops it within about a second keeping every answer received.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from tracelake.core.hashing import canonical_json

from ..helpers import ROOT, copy_project, run_capped, run_ok
from ..hostile_server import HostileServer, Reply, big_completion, completion, json_reply, wait_for

SOURCES = ("swesmith", "superuser", "tezos", "nl2bash")
LLM = "llm_response_length_v1"
RETRY_AFTER = "100"  # under max_retry_after_s: the engine waits


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of the project with its four sample sources ingested (24 tasks with rollouts, ~4 s)."""
    repo = copy_project(tmp_path_factory.mktemp("hostile") / "project", trials=60, tasks=24)
    for args in (["synth"], *(["ingest", s] for s in SOURCES)):
        run_ok([sys.executable, "-m", "stages", *args], repo, env=_pythonpath())
    return repo


def _pythonpath() -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}


def params_for(project: Path, tmp_path: Path, base_url: str, **model) -> Path:
    """A params file scoring with LLM against `base_url`, its answer cache under tmp_path, any number
    of failures allowed (the test reads them from the run's output)."""
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["score"].update(
        scorers=["response_length_proxy_v1", LLM],
        max_failures=1000,
        cache=str(tmp_path / "cache"),
        model={
            "backend": "openai",
            "name": "tiny",
            "base_url": base_url,
            "api_key_env": None,
            "concurrency": 4,
            "max_retries": 1,
            "backoff_s": 0.01,
            "max_backoff_s": 0.05,
            "timeout_s": 10,
            "max_tokens": 30,
            **model,
        },
    )
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


TRACELAKE = str(Path(sys.executable).parent / "tracelake")


def score_command(params: Path) -> list[str]:
    return [sys.executable, "-m", "stages", "score", "--params", str(params)]


def run_score(
    project: Path, params: Path, timeout: float, cap_mb: int = 2048
) -> tuple[subprocess.CompletedProcess, float]:
    """The score stage in a child process: (its result, its peak RSS in MB), killed past `timeout`."""
    return run_capped(
        score_command(params), project, cap_mb=cap_mb, timeout=timeout, env={**os.environ, **_pythonpath()}
    )


def cached_answers(tmp_path: Path) -> int:
    return sum(
        pq.ParquetFile(p).metadata.num_rows for p in (tmp_path / "cache" / LLM / "answers").glob("part-*.parquet")
    )


def summary_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(f"score {LLM} "))


def failures(err: str) -> list[str]:
    """The stage's failure list: '  <task>: <reason>: <detail>' lines."""
    return [line.strip().split(": ", 1)[1] for line in err.splitlines() if line.startswith("  ") and ": " in line]


def test_wrong_types_in_an_answer_fail_that_task_as_bad_response(project, tmp_path):
    """content 12345, prompt_tokens "11", finish_reason {"a": [1]}: three tasks fail, naming the field."""
    hostile = [
        completion(content=12345),
        completion(usage={"prompt_tokens": "11", "completion_tokens": 1}),
        completion(finish_reason={"a": [1]}),
    ]

    def reply(i: int, body: dict) -> Reply:
        return json_reply(hostile[i] if i < len(hostile) else completion("fine answer"))

    with HostileServer(reply) as server:
        done, _ = run_score(project, params_for(project, tmp_path, server.base_url), timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "21 tasks scored, 21 answered, 0 cached, 3 failed (3 bad_response)" in summary_line(done.stdout)
    reasons = sorted(failures(done.stderr))
    assert [r.split(": ")[0] for r in reasons] == ["bad_response"] * 3
    assert any("choices[0].message.content" in r for r in reasons), reasons
    assert any("usage.prompt_tokens" in r for r in reasons), reasons
    assert any("choices[0].finish_reason" in r for r in reasons), reasons
    assert cached_answers(tmp_path) == 21


def test_a_retry_after_past_the_cap_fails_the_task_without_waiting(project, tmp_path):
    """Retry-After: 86400 (a day) with max_retry_after_s 2: the tasks fail at once, with the reason."""

    def reply(i: int, body: dict) -> Reply:
        if i < 4:
            return json_reply({"error": {"message": "slow down"}}, 429, headers=[("Retry-After", "86400")])
        return json_reply(completion("fine answer"))

    with HostileServer(reply) as server:
        started = time.monotonic()
        done, _ = run_score(project, params_for(project, tmp_path, server.base_url, max_retry_after_s=2), timeout=30)
        elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert elapsed < 15
    assert "20 answered, 0 cached, 4 failed (4 retry_after_too_long)" in summary_line(done.stdout)
    assert all("Retry-After 86400 s" in r and "max_retry_after_s 2" in r for r in failures(done.stderr))


@pytest.mark.parametrize("via", ["stage", "cli"])
@pytest.mark.parametrize("stall", ["retry_after", "silent_body"])
def test_ctrl_c_stops_within_a_second_and_keeps_the_answers(project, tmp_path, stall, via):
    """Five answers, then every request stalls (a 100 s Retry-After, or a body that stops after 100
    bytes): SIGINT ends the stage within ~1 s with its one-line message, the five answers cached."""

    def reply(i: int, body: dict) -> Reply:
        if i < 5:
            return json_reply(completion("fine answer"))
        if stall == "retry_after":
            return json_reply({"error": {"message": "wait"}}, 429, headers=[("Retry-After", RETRY_AFTER)])
        return json_reply(completion("a slow answer " * 50), body_drip_s=100.0, drip_bytes=100)

    with HostileServer(reply) as server:
        params = params_for(project, tmp_path, server.base_url, timeout_s=300, max_retries=8)
        command = score_command(params) if via == "stage" else [TRACELAKE, "score", "--params", str(params)]
        child = subprocess.Popen(
            command,
            cwd=project,
            env={**os.environ, **_pythonpath()},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for(lambda: server.replied >= 5 and server.requests >= 6, timeout=30)
            time.sleep(0.3)  # every thread is now waiting on the endpoint
            child.send_signal(signal.SIGINT)
            sent = time.monotonic()
            out, err = child.communicate(timeout=20)
            elapsed = time.monotonic() - sent
        finally:
            child.kill()
    assert elapsed < 2.0, (elapsed, err)
    print(f"Ctrl-C ({stall}, {via}): exited {elapsed:.2f} s after SIGINT")
    assert child.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("tracelake: interrupted"), err
    assert "Traceback" not in err
    assert cached_answers(tmp_path) == 5


@pytest.mark.parametrize("drip", ["headers", "body"])
def test_a_dripping_endpoint_times_out_at_the_deadline(project, tmp_path, drip):
    """Headers one line a second, or a body one byte a second: each read is quick, the request is
    not. timeout_s 2 is the deadline of the whole request: the two tasks fail as timeouts in ~2 s."""
    slow_headers = [(f"X-Drip-{k}", "x") for k in range(60)]

    def reply(i: int, body: dict) -> Reply:
        if i >= 2:
            return json_reply(completion("fine answer"))
        if drip == "headers":
            return Reply(200, b"{}", slow_headers, header_drip_s=1.0)
        return json_reply(completion("x" * 200), body_drip_s=1.0)

    with HostileServer(reply) as server:
        started = time.monotonic()
        done, _ = run_score(
            project, params_for(project, tmp_path, server.base_url, timeout_s=2, max_retries=0), timeout=40
        )
        elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert "22 answered, 0 cached, 2 failed (2 timeout)" in summary_line(done.stdout)
    assert all("no answer in 2 s" in r for r in failures(done.stderr))
    assert elapsed < 8, elapsed
    print(f"{drip} dripped: the stage took {elapsed:.1f} s")


def test_an_answer_over_the_size_cap_is_a_bad_response_read_no_further(project, tmp_path):
    """Every task answered with 64 MiB: the body is read up to max_response_bytes (4 MiB by
    default) and the task fails; the process stays small."""
    with HostileServer(lambda i, body: big_completion(64 << 20)) as server:
        done, peak_mb = run_score(project, params_for(project, tmp_path, server.base_url), timeout=60)
    assert done.returncode == 0, done.stderr
    assert "0 answered, 0 cached, 24 failed (24 bad_response)" in summary_line(done.stdout)
    assert all("max_response_bytes" in r for r in failures(done.stderr))
    assert peak_mb < 600, peak_mb
    print(f"peak RSS {peak_mb:.0f} MB refusing 24 answers of 64 MiB")


def seed_cache(project: Path, params: Path, answer_chars: int) -> int:
    """Every request of the params' model scorer answered in its answer cache with `answer_chars`
    characters, written through the cache itself (as a run stores answers). Returns the answers."""
    from tracelake.core.duckdb_views import connect
    from tracelake.curate.scoring.answers import AnswerCache, answer_rows, pending_requests
    from tracelake.curate.scoring.engines import Answer, Sample
    from tracelake.curate.scoring.scorers import LlmResponseLength
    from tracelake.params import load_params

    p = load_params(params)
    scorer, model = LlmResponseLength(), p.score.model
    cache = AnswerCache(p.score.cache, scorer.name)
    _, missing = pending_requests(scorer, connect(project / "lake", list(p.sources)), model, cache)
    sampling = canonical_json(model.sampling()).decode()
    text = "word " * (answer_chars // 5)
    for key, (task_id, prompt_sha, _) in missing.items():
        answer = Answer(key, [Sample(text, "stop", 3, 9)])
        cache.add(answer_rows(key, task_id, scorer.name, model.name, prompt_sha, sampling, answer))
    cache.flush()
    return len(missing)


def test_a_cache_far_larger_than_memory_is_read_in_bounded_memory(project, tmp_path):
    """24 cached answers of 64 MiB (1.5 GiB of text, 1.5x the memory allowed): the run that finds
    them all cached scores them and writes every one to the lake under 1 GB, asking nothing."""

    def refuse(i: int, body: dict) -> Reply:
        return json_reply({"error": {"message": "no model calls expected"}}, 400)

    with HostileServer(refuse) as server:
        params = params_for(project, tmp_path, server.base_url, max_response_bytes=80 << 20)
        assert seed_cache(project, params, 64 << 20) == 24
        done, peak_mb = run_score(project, params, timeout=120, cap_mb=1024)
        assert server.requests == 0
    assert done.returncode == 0, done.stderr
    assert "24 tasks scored, 0 answered, 24 cached, 0 failed, 0 model calls" in summary_line(done.stdout)
    responses = pq.ParquetFile(project / "lake" / "scores" / "responses.parquet")
    assert responses.metadata.num_rows == 24
    print(f"peak RSS {peak_mb:.0f} MB reading 24 cached answers of 64 MiB")
