"""Fuzzing the openai engine (hypothesis) against a hostile endpoint: tests/hostile_server.py serves
each request a drawn reply. A chat completion with a random JSON value at any field (or keys
dropped), any status (fatal ones included), any Retry-After (numbers, dates, garbage), bodies cut
short, without a length, undecodable or dripped past the deadline.

Property: the run never crashes (a fatal status stops it with its one-line BadInput, nothing else
escapes), every task ends answered or failed with a known reason, the answers fit the responses
schema, and the run ends within the time its deadlines allow. The bounded variant runs in every test
run (derandomized; helpers.FUZZ_EXAMPLES examples, 100 in CI); the `long` one runs thousands
(TRACELAKE_LONG=1). The module prints one line per test: examples, seconds, outcomes.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracelake.core.errors import BadInput
from tracelake.core.schema import load_schema
from tracelake.curate.scoring.answers import run_model_scorer
from tracelake.curate.scoring.scorers import LlmResponseLength

from ..helpers import fuzz_settings
from ..hostile_server import HostileServer, Reply
from .test_model_scoring import model, task_con

SHORT = fuzz_settings()
LONG = fuzz_settings(long_examples=2_000)

TASKS, CONCURRENCY, RETRIES = 4, 2, 1
TIMEOUT_S, MAX_RETRY_AFTER_S, MAX_BACKOFF_S = 0.5, 0.3, 0.02
REASONS = {"timeout", "connection_error", "retry_after_too_long", "bad_response", "cancelled"}
FATAL = {401, 403, 404}

RUNS: Counter = Counter()
SECONDS: Counter = Counter()
OUTCOMES: dict[str, Counter] = {}


@pytest.fixture(scope="module", autouse=True)
def summary(request):
    """One line per fuzz test after the module: examples run, seconds, and what the tasks became."""
    yield
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        for name in sorted(RUNS):
            outcomes = ", ".join(f"{k} {v}" for k, v in OUTCOMES[name].most_common())
            print(f"\nfuzz: {name}: {RUNS[name]} examples in {SECONDS[name]:.1f} s; {outcomes}")


# --- what a hostile endpoint sends ---------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


def maybe(valid, strategy=json_values):
    """The valid value most of the time (a run also needs answers to store); otherwise any JSON
    value, or the key left out."""
    return st.one_of(*[st.just(valid)] * 6, strategy, st.just(DROP))


DROP = object()  # a key left out


def _obj(**fields):
    return {k: v for k, v in fields.items() if v is not DROP}


@st.composite
def completions(draw) -> object:
    """A chat completion with any field replaced by a random JSON value, or left out."""
    content = draw(maybe("an answer", st.one_of(json_values, st.text(max_size=200))))
    message = draw(maybe(_obj(role="assistant", content=content)))
    choice = _obj(
        index=draw(maybe(0)),
        message=message,
        finish_reason=draw(maybe("stop", st.sampled_from(["length", None]) | json_values)),
    )
    choices = draw(st.one_of(st.just([choice]), st.just([choice]), st.just([choice, choice]), st.just([]), json_values))
    usage = draw(maybe(_obj(prompt_tokens=draw(maybe(5)), completion_tokens=draw(maybe(2)))))
    return draw(
        st.one_of(st.just(_obj(choices=choices, usage=usage)), st.just(_obj(choices=choices, usage=usage)), json_values)
    )


retry_afters = st.one_of(
    st.integers(min_value=-5, max_value=10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["0.1", "0.25", "nan", "inf", "-inf", "", "soon", "Wed, 21 Oct 2015 07:28:00 GMT"]),
    st.sampled_from(
        ["Fri, 31 Dec 9999 23:59:59 GMT", "Mon, 01 Jan 2100 00:00:00 GMT", "Thu, 01 Jan 1970 00:00:00 -0000"]
    ),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=30),
)


@st.composite
def replies(draw) -> Reply:
    """One HTTP reply: a status, headers, a body in one of the shapes a broken server sends."""
    status = draw(st.sampled_from([200] * 12 + [400, 418, 302, 429, 429, 500, 503, 401, 404]))
    body = draw(completions()) if status == 200 else {"error": {"message": draw(json_values)}}
    data = json.dumps(body).encode()
    shape = draw(st.sampled_from(["exact"] * 8 + ["cut", "unsized", "garbage", "gzip_garbage", "drip", "header_drip"]))
    headers = [("Content-Type", "application/json")]
    if draw(st.booleans()):
        headers.append(("Retry-After", draw(retry_afters)))
    if shape == "cut":
        return Reply(status, data[: draw(st.integers(0, max(0, len(data) - 1)))], headers, length=len(data))
    if shape == "unsized":
        return Reply(status, iter([data]), headers, length=None)
    if shape == "garbage":
        return Reply(status, draw(st.binary(max_size=64)), headers)
    if shape == "gzip_garbage":
        return Reply(status, draw(st.binary(max_size=64)), [*headers, ("Content-Encoding", "gzip")])
    if shape == "drip":
        return Reply(status, data, headers, body_drip_s=draw(st.sampled_from([0.01, 0.2])), drip_bytes=8)
    if shape == "header_drip":
        return Reply(status, data, [*headers, *[(f"X-{k}", "x") for k in range(4)]], header_drip_s=0.2)
    return Reply(status, data, headers)


def valid_reply() -> Reply:
    return Reply(200, json.dumps(VALID).encode(), [("Content-Type", "application/json")])


VALID = {"choices": [{"index": 0, "message": {"content": "an answer"}, "finish_reason": "stop"}], "usage": None}

# the replies a server cycles through, most often after a valid one (so that answers are stored too)
reply_lists = st.tuples(st.integers(0, 2), st.lists(replies(), min_size=1, max_size=6)).map(
    lambda pair: [valid_reply()] * pair[0] + pair[1]
)


# --- the property --------------------------------------------------------------------------------


def worst_seconds() -> float:
    """The longest a run may take: each task's tries each wait at most the deadline and then the
    longest pause allowed, a batch of `CONCURRENCY` tasks at a time (and start-up slack)."""
    per_try = TIMEOUT_S + max(MAX_RETRY_AFTER_S, MAX_BACKOFF_S)
    return -(-TASKS // CONCURRENCY) * (RETRIES + 1) * per_try + 2.0


def check_run(name: str, drawn: list[Reply], monkeypatch) -> None:
    monkeypatch.setenv("TRACELAKE_TEST_KEY", "k")
    fatal = any(r.status in FATAL for r in drawn)
    with HostileServer(lambda i, body: drawn[i % len(drawn)]) as server, tempfile.TemporaryDirectory() as cache:
        params = model(
            server.base_url,
            concurrency=CONCURRENCY,
            max_retries=RETRIES,
            backoff_s=0.01,
            max_backoff_s=MAX_BACKOFF_S,
            timeout_s=TIMEOUT_S,
            max_retry_after_s=MAX_RETRY_AFTER_S,
            max_response_bytes=1 << 16,
        )
        started = time.monotonic()
        try:
            run = run_model_scorer(LlmResponseLength(), task_con(TASKS), params, cache)
        except BadInput as e:  # a refused key or unknown model stops the run, in one line
            assert fatal and "\n" not in str(e), e
            OUTCOMES.setdefault(name, Counter())["stopped (fatal status)"] += 1
            return
        finally:
            elapsed = time.monotonic() - started
            RUNS[name] += 1
            SECONDS[name] += elapsed
        assert elapsed <= worst_seconds(), (elapsed, worst_seconds())
    failed = {task for task, _ in run.failures}
    scored = {row["task_id"] for row in run.rows}
    assert len(failed) + len(scored) == TASKS and not failed & scored
    for _, failure in run.failures:
        assert failure.reason in REASONS or failure.reason.startswith("http_"), failure
        assert failure.detail
    load_schema("responses").from_rows(run.answers())
    outcomes = OUTCOMES.setdefault(name, Counter())
    outcomes["answered"] += len(scored)
    outcomes.update(f.reason for _, f in run.failures)


@SHORT
@given(drawn=reply_lists)
def test_fuzz_hostile_endpoint(drawn, monkeypatch_session):
    check_run("hostile_endpoint", drawn, monkeypatch_session)


@pytest.mark.long
@LONG
@given(drawn=reply_lists)
def test_fuzz_hostile_endpoint_long(drawn, monkeypatch_session):
    check_run("hostile_endpoint_long", drawn, monkeypatch_session)


@pytest.fixture(scope="module")
def monkeypatch_session():
    """A monkeypatch hypothesis can share across the examples of a test (function-scoped fixtures are
    not reset between examples)."""
    with pytest.MonkeyPatch.context() as patch:
        yield patch
