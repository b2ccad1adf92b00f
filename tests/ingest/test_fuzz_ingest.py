"""Fuzzing `ingest harbor` and `ingest traces` (hypothesis): random ATIF trajectories and result.json
files with a random JSON value at any field, random bytes and deep nesting, and mutations of the
real fixtures (Harbor's terminus-2 goldens, the OpenThoughts-Agent sample rows): keys dropped, values
retyped, bytes truncated or flipped, values nested deep.

Property: no exception escapes ingest, `inputs = rows + rejects`, every reject has a known reason,
and a trace table has one input per non-blank line. The bounded variants run in every test run (derandomized:
the same examples each run; helpers.FUZZ_EXAMPLES of them, 100 in CI); `@pytest.mark.long` variants run many more (TRACELAKE_LONG=1). Each
module run prints one summary line per test: examples run and seconds taken.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracelake.core.executor import Executor
from tracelake.ingest.common import REASONS
from tracelake.ingest.harbor import ingest_harbor
from tracelake.ingest.traces import ingest_traces

from ..helpers import FIXTURES, FUZZ_EXAMPLES, GOLDEN, print_fuzz_summary, result_json, simple_trajectory

SHORT = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=10_000,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
LONG = settings(
    max_examples=3_000,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

RUNS: Counter = Counter()  # test name -> examples run
SECONDS: Counter = Counter()
OUTCOMES: dict[str, Counter] = {}  # test name -> rows and rejects by reason, over all examples


@pytest.fixture(scope="module", autouse=True)
def summary(request):
    """One line per fuzz test after the module: how many examples ran, in how long."""
    yield
    print_fuzz_summary(request, RUNS, SECONDS, OUTCOMES)


# --- random JSON and ATIF ----------------------------------------------------------------------

leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
value = st.recursive(
    leaf,
    lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=6), c, max_size=3)),
    max_leaves=8,
)


def rare(odd, usual, one_in: int = 8):
    """`usual`, and one time in `one_in` the `odd` strategy instead."""
    # hypothesis favours the ends of a range: the odd choice sits in its middle
    return st.integers(1, one_in).flatmap(lambda i: odd if i == one_in // 2 + 1 else usual)


def field(valid):
    """Mostly (29 in 30) a valid value, else any JSON value: many documents get far enough to
    exercise rendering, and every field is sometimes wrong."""
    return rare(value, valid, 30)


text = st.one_of(st.text(max_size=30), st.sampled_from(["Analysis: a\nPlan: b", "x</think>y", "", "\ud7ff\u2028"]))
tool_call = st.fixed_dictionaries(
    {
        "tool_call_id": field(st.text(max_size=4)),
        "function_name": field(st.sampled_from(["bash_command", "mark_task_complete", "other"])),
        "arguments": field(
            st.one_of(
                st.dictionaries(st.sampled_from(["keystrokes", "duration"]), value, max_size=2), st.text(max_size=10)
            )
        ),
    }
)
observation = st.fixed_dictionaries(
    {
        "results": field(
            st.lists(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "content": field(
                            st.one_of(
                                text,
                                st.lists(
                                    st.fixed_dictionaries(
                                        {"type": st.sampled_from(["text", "image"]), "text": field(text)}
                                    ),
                                    max_size=2,
                                ),
                            )
                        )
                    },
                ),
                max_size=2,
            )
        )
    }
)
step = st.fixed_dictionaries(
    {
        "step_id": field(st.integers(1, 60)),
        "source": field(rare(st.just("tool"), st.sampled_from(["user", "agent", "system"]), 12)),
        "message": field(text),
    },
    optional={
        "reasoning_content": field(text),
        "tool_calls": field(st.lists(tool_call, max_size=2)),
        "observation": field(observation),
        "is_copied_context": field(st.booleans()),
    },
)
agent = st.fixed_dictionaries(
    {
        "name": field(st.sampled_from(["terminus-2", "terminus-2-summarization-1", "other"])),
        "model_name": field(st.text(max_size=8)),
    },
    optional={"extra": field(st.fixed_dictionaries({"parser": field(st.just("json"))}))},
)
trajectory = st.fixed_dictionaries(
    {"schema_version": st.just("ATIF-v1.5"), "agent": field(agent), "steps": field(st.lists(step, max_size=6))},
    optional={
        "continued_trajectory_ref": rare(
            field(st.sampled_from(["trajectory.cont-1.json", "trajectory.json", "../result.json", "missing.json"])),
            st.none(),
            4,
        )
    },
)
result = st.fixed_dictionaries(
    {"task_name": field(st.sampled_from(["hello", "world"])), "trial_name": field(st.sampled_from(["a", "b", "c"]))},
    optional={
        "config": field(st.fixed_dictionaries({"job_id": field(st.text(max_size=4))})),
        "agent_info": field(
            st.fixed_dictionaries(
                {
                    "name": field(st.text(max_size=6)),
                    "model_info": field(
                        st.fixed_dictionaries(
                            {"name": field(st.text(max_size=6)), "provider": field(st.text(max_size=4))}
                        )
                    ),
                }
            )
        ),
        "exception_info": field(
            st.fixed_dictionaries({"exception_type": field(st.sampled_from(["AgentTimeoutError", "RuntimeError", ""]))})
        ),
        "verifier_result": field(
            st.fixed_dictionaries(
                {
                    "rewards": field(
                        st.fixed_dictionaries(
                            {
                                "reward": field(
                                    rare(
                                        st.one_of(
                                            st.floats(allow_nan=True, allow_infinity=True),
                                            st.sampled_from(["nan", "-inf", "x"]),
                                        ),
                                        st.one_of(st.floats(0, 1), st.just("1.0")),
                                    )
                                )
                            }
                        )
                    )
                }
            )
        ),
        "started_at": field(st.text(max_size=10)),
        "stats": value,
    },
)


def deep_bytes(n: int) -> bytes:
    return b'{"steps": ' + b"[" * n + b"]" * n + b"}"


@st.composite
def encoded(draw, doc_strategy) -> bytes | None:
    """A document as a file's bytes: JSON (NaN written as the token), random bytes, deep nesting, or
    no file at all (None)."""
    kind = draw(st.sampled_from(["json"] * 16 + ["bytes", "deep", "absent", "truncated"]))
    if kind == "absent":
        return None
    if kind == "bytes":
        return draw(st.binary(max_size=40))
    if kind == "deep":
        return deep_bytes(draw(st.integers(400, 1500)))
    data = json.dumps(draw(doc_strategy)).encode("utf-8", "surrogatepass")
    if kind == "truncated":
        data = data[: draw(st.integers(0, len(data)))]
    return data


@st.composite
def trial(draw) -> dict[str, bytes | None]:
    files = {"result.json": draw(encoded(result)), "agent/trajectory.json": draw(encoded(trajectory))}
    for name in draw(
        st.lists(
            st.sampled_from(
                [
                    "trajectory.cont-1.json",
                    "trajectory.summarization-1-summary.json",
                    "trajectory.summarization-1-answers.json",
                ]
            ),
            max_size=2,
            unique=True,
        )
    ):
        files[f"agent/{name}"] = draw(encoded(trajectory))
    return files


def write_jobs(root: Path, trials: list[dict[str, bytes | None]]) -> None:
    for i, files in enumerate(trials):
        d = root / "job" / f"trial-{i}"
        (d / "agent").mkdir(parents=True)
        for name, data in files.items():
            if data is not None:
                (d / name).write_bytes(data)


def check_harbor(trials: list[dict[str, bytes | None]], name: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        jobs = Path(tmp) / "jobs"
        write_jobs(jobs, trials)
        r = ingest_harbor(jobs, source="fuzz", out_dir=Path(tmp) / "lake", executor=Executor("processes", 1))
    assert r.inputs == r.rows + r.rejects
    assert r.inputs >= len(trials)
    assert set(r.by_reason) <= set(REASONS)
    OUTCOMES.setdefault(name, Counter()).update({"rows": r.rows, **r.by_reason})


def timed(name: str):
    """Count the examples of a test and the time they took."""

    def wrap(fn):
        def run(*args, **kw):
            start = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                RUNS[name] += 1
                SECONDS[name] += time.perf_counter() - start

        return run

    return wrap


@timed("harbor_random")
def _harbor_random(trials):
    check_harbor(trials, "harbor_random")


@SHORT
@given(st.lists(trial(), min_size=1, max_size=4))
def test_fuzz_harbor_random(trials):
    _harbor_random(trials)


@pytest.mark.long
@LONG
@given(st.lists(trial(), min_size=1, max_size=4))
def test_fuzz_harbor_random_long(trials):
    _harbor_random(trials)


# --- mutations of the real fixtures ------------------------------------------------------------


def _golden() -> dict[str, object]:
    if not GOLDEN.exists():
        return {}
    return {p.name: json.loads(p.read_text()) for p in sorted(GOLDEN.glob("*.trajectory*.json"))}


GOLDEN_DOCS = _golden()
# decided at collection: hypothesis draws from the golden documents before a test body could skip
NEEDS_GOLDEN = pytest.mark.skipif(
    not GOLDEN_DOCS, reason=f"real fixtures not available: {GOLDEN} (they live in ../shared/fixtures)"
)
OTAGENT = FIXTURES / "otagent" / "sample_raw.json"
OTAGENT_ROWS = json.loads(OTAGENT.read_text()) if OTAGENT.exists() else []


def _slots(doc) -> list[tuple]:
    """Every (container, key) in a document: the places a mutation may hit."""
    out, stack = [], [doc]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            out.append((node, k))
            stack.append(v)
    return out


@st.composite
def mutated(draw, doc) -> bytes:
    """A document with 0-3 mutations (drop a key, retype a value, nest it deep), as bytes, which
    may then be truncated or have a byte replaced."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(0, 3))):
        slots = _slots(doc)
        if not slots:
            break
        node, key = draw(st.sampled_from(slots))
        op = draw(st.sampled_from(["drop", "retype", "retype", "deep"]))
        if op == "drop":
            if isinstance(node, dict):
                del node[key]
            else:
                node.pop(key)
        elif op == "retype":
            node[key] = draw(value)
        else:
            node[key] = json.loads("[" * 300 + "]" * 300) if draw(st.booleans()) else {"a": [[[node[key]]]]}
    data = json.dumps(doc).encode("utf-8", "surrogatepass")
    tail = draw(st.sampled_from(["keep"] * 5 + ["truncate", "flip"]))
    if tail == "truncate":
        data = data[: draw(st.integers(0, len(data)))]
    elif tail == "flip" and data:
        i = draw(st.integers(0, len(data) - 1))
        data = data[:i] + draw(st.binary(min_size=1, max_size=1)) + data[i + 1 :]
    return data


@st.composite
def golden_trial(draw) -> dict[str, bytes | None]:
    names = sorted(GOLDEN_DOCS)
    main = draw(st.sampled_from([n for n in names if n.endswith(".trajectory.json")]))
    stem = main[: -len(".trajectory.json")]
    files: dict[str, bytes | None] = {
        "result.json": json.dumps(result_json("hello", "t")).encode()
        if draw(st.booleans())
        else draw(mutated(result_json("hello", "t")))
    }
    for name in names:
        if name.startswith(stem + ".trajectory"):
            target = "agent/trajectory" + name[len(stem) + len(".trajectory") :]
            files[target] = (
                draw(mutated(GOLDEN_DOCS[name])) if draw(st.booleans()) else json.dumps(GOLDEN_DOCS[name]).encode()
            )
    return files


@timed("harbor_golden_mutations")
def _harbor_golden(trials):
    check_harbor(trials, "harbor_golden_mutations")


@NEEDS_GOLDEN
@SHORT
@given(st.lists(golden_trial(), min_size=1, max_size=3))
def test_fuzz_harbor_golden_mutations(trials):
    _harbor_golden(trials)


@NEEDS_GOLDEN
@pytest.mark.long
@LONG
@given(st.lists(golden_trial(), min_size=1, max_size=3))
def test_fuzz_harbor_golden_mutations_long(trials):
    _harbor_golden(trials)


# --- random directory trees: links in and out, loops, names that are not UTF-8 ------------------

SECRET = b"FUZZ-SECRET-never-in-the-lake"
LINK_TARGETS = [
    "..",
    ".",
    "../..",
    "OUT",
    "OUT/trial",
    "OUT/trajectory.json",
    "OUT/result.json",
    "trial-0",
    "trial-0/agent",
    "trial-0/agent/trajectory.json",
    "missing",
]


@st.composite
def tree(draw) -> tuple[list[bytes], list[tuple[bytes, str]]]:
    """Trial directories (job/name, names sometimes not UTF-8) and links (where, what to)."""
    names = draw(
        st.lists(
            st.sampled_from(
                [b"job-1/trial-0", b"job-1/trial-1", b"job-2/trial-0", b"job-1/t\xff", b"job-\xfe/trial-0"]
            ),
            min_size=1,
            max_size=4,
            unique=True,
        )
    )
    places = [b"job-1", b"job-2", b"job-1/trial-0", b"job-1/trial-0/agent", b"."]
    links = draw(
        st.lists(
            st.tuples(
                st.sampled_from(places),
                st.sampled_from(
                    [
                        b"l",
                        b"loop",
                        b"trajectory.json",
                        b"result.json",
                        b"trajectory.cont-1.json",
                        b"trajectory.summarization-1-summary.json",
                        b"agent",
                    ]
                ),
                st.sampled_from(LINK_TARGETS),
            ),
            max_size=4,
        )
    )
    return names, [(os.path.join(place, name), target) for place, name, target in links]


def _build(tmp: Path, names: list[bytes], links: list[tuple[bytes, str]]) -> Path:
    out = tmp / "outside"
    (out / "trial" / "agent").mkdir(parents=True)
    secret_doc = simple_trajectory()
    secret_doc["steps"][0]["message"] = SECRET.decode()
    for f in (out / "trajectory.json", out / "trial" / "agent" / "trajectory.json"):
        f.write_text(json.dumps(secret_doc))
    for f in (out / "result.json", out / "trial" / "result.json"):
        f.write_text(json.dumps(result_json(SECRET.decode(), SECRET.decode())))
    jobs = os.fsencode(tmp / "jobs")
    for i, name in enumerate(names):
        trial = os.path.join(jobs, name)
        os.makedirs(os.path.join(trial, b"agent"))
        with open(os.path.join(trial, b"result.json"), "wb") as f:
            f.write(json.dumps(result_json("hello", f"t{i}")).encode())
        with open(os.path.join(trial, b"agent", b"trajectory.json"), "wb") as f:
            f.write(json.dumps(simple_trajectory()).encode())
    for where, target in links:
        path = os.path.join(jobs, where)
        if not os.path.isdir(os.path.dirname(path)) or os.path.lexists(path):
            continue
        if target.startswith("OUT"):
            target = str(out) + target[3:]
        elif target.startswith("trial-0"):
            target = str(tmp / "jobs" / "job-1" / target)
        os.symlink(target, path)
    return Path(os.fsdecode(jobs))


@timed("harbor_trees")
def _harbor_tree(names, links):
    with tempfile.TemporaryDirectory() as tmp:
        jobs = _build(Path(tmp), names, links)
        metrics = Path(tmp) / "metrics.json"
        r = ingest_harbor(
            jobs, source="fuzz", out_dir=Path(tmp) / "lake", executor=Executor("processes", 1), metrics_path=metrics
        )
        assert r.inputs == r.rows + r.rejects
        assert set(r.by_reason) <= set(REASONS)
        for f in [metrics, *(Path(tmp) / "lake").rglob("*")]:
            assert not f.is_file() or SECRET not in f.read_bytes(), f"{f} holds what lies outside the input"
    OUTCOMES.setdefault("harbor_trees", Counter()).update({"rows": r.rows, **r.by_reason})


@SHORT
@given(tree())
def test_fuzz_harbor_trees(t):
    _harbor_tree(*t)


@pytest.mark.long
@LONG
@given(tree())
def test_fuzz_harbor_trees_long(t):
    _harbor_tree(*t)


# --- trace tables ------------------------------------------------------------------------------

message = st.fixed_dictionaries(
    {"role": field(st.sampled_from(["user", "assistant", "tool", "system", "gpt", "x"])), "content": field(text)}
)
trace_row = st.fixed_dictionaries(
    {"conversations": field(st.lists(message, max_size=5)), "task": field(st.text(max_size=6))},
    optional={
        name: field(st.text(max_size=6))
        for name in ("trace_source", "episode", "run_id", "trial_name", "agent", "model", "model_provider", "date")
    }
    | {
        "result": field(
            rare(
                st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["nan", "inf", " "])),
                st.one_of(st.floats(0, 1), st.sampled_from(["1.0", "AgentTimeoutError"])),
            )
        )
    },
)


@st.composite
def trace_line(draw) -> bytes:
    kind = draw(st.sampled_from(["row"] * 4 + ["real"] * 3 + ["bytes", "deep"]))
    if kind == "bytes":
        return draw(st.binary(max_size=30)).replace(b"\n", b" ")
    if kind == "deep":
        return b'{"task": "t", "conversations": ' + b"[" * draw(st.integers(400, 1500)) + b"]" * 10 + b"}"
    if kind == "real" and OTAGENT_ROWS:
        return draw(mutated(draw(st.sampled_from(OTAGENT_ROWS)))).replace(b"\n", b" ")
    return json.dumps(draw(trace_row)).encode("utf-8", "surrogatepass")


def check_traces(lines: list[bytes], as_json: bool) -> None:
    """Ingest the lines as a JSONL table (or as the items of a JSON list)."""
    with tempfile.TemporaryDirectory() as tmp:
        if as_json:
            path = Path(tmp) / "t.json"
            path.write_bytes(b"[" + b",".join(lines) + b"]")
        else:
            path = Path(tmp) / "t.jsonl"
            path.write_bytes(b"\n".join(lines) + b"\n")
        r = ingest_traces([path], source="fuzz", out_dir=Path(tmp) / "lake", executor=Executor("processes", 1))
    assert r.inputs == r.rows + r.rejects
    assert set(r.by_reason) <= set(REASONS)
    OUTCOMES.setdefault("traces", Counter()).update({"rows": r.rows, **r.by_reason})
    if not as_json:
        assert r.inputs == sum(1 for line in lines if line.strip())


@timed("traces")
def _traces(lines, as_json):
    check_traces(lines, as_json)


@SHORT
@given(st.lists(trace_line(), min_size=1, max_size=8), st.booleans())
def test_fuzz_traces(lines, as_json):
    _traces(lines, as_json)


@pytest.mark.long
@LONG
@given(st.lists(trace_line(), min_size=1, max_size=8), st.booleans())
def test_fuzz_traces_long(lines, as_json):
    _traces(lines, as_json)


def test_fuzz_fixtures_are_valid_as_given():
    """The unmutated fixtures ingest without a reject: the mutations start from accepted inputs."""
    if not GOLDEN_DOCS:
        pytest.skip(f"real fixtures not available: {GOLDEN}")
    trials = []
    for main in (n for n in sorted(GOLDEN_DOCS) if n.endswith(".trajectory.json")):
        stem = main[: -len(".trajectory.json")]
        files = {"result.json": json.dumps(result_json("hello", stem)).encode()}
        for name in (n for n in GOLDEN_DOCS if n.startswith(stem + ".trajectory")):
            files["agent/trajectory" + name[len(stem) + len(".trajectory") :]] = json.dumps(GOLDEN_DOCS[name]).encode()
        trials.append(files)
    with tempfile.TemporaryDirectory() as tmp:
        write_jobs(Path(tmp) / "jobs", trials)
        r = ingest_harbor(
            Path(tmp) / "jobs", source="fuzz", out_dir=Path(tmp) / "lake", executor=Executor("processes", 1)
        )
    assert r.rejects == 0 and r.rows == r.inputs > len(trials)
    if OTAGENT_ROWS:
        with tempfile.TemporaryDirectory() as tmp:
            table = Path(tmp) / "t.jsonl"
            table.write_bytes(b"".join(json.dumps(row).encode() + b"\n" for row in OTAGENT_ROWS))
            r = ingest_traces([table], source="fuzz", out_dir=Path(tmp) / "lake", executor=Executor("processes", 1))
        assert (r.rows, r.rejects) == (len(OTAGENT_ROWS), 0)
