"""Fuzzing the decontamination reader (hypothesis): random benchmark directories with links in and
out of decontaminate.root, FIFOs, directories named instruction.md, names and bytes that are not
UTF-8, oversize files, and a JSONL file of random lines (deep nesting, bad bytes, oversize lines,
non-objects), through the real `read_benchmark`.

Property: it never hangs (an alarm fails the example), never reads outside the root (a secret
planted outside appears in no item and no report), and every planted task directory and JSONL line
ends read or reported with a known reason. Bounded: helpers.FUZZ_EXAMPLES examples, derandomized;
the `long` variant runs thousands (TRACELAKE_LONG=1)."""

from __future__ import annotations

import json
import os
import signal
import tempfile
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracelake.core.errors import BadInput
from tracelake.curate.dedup.decontaminate import SKIP_REASONS, read_benchmark
from tracelake.ingest.walk import display

from ..helpers import fuzz_settings

SECRET = "FUZZ-BENCH-SECRET-never-read"
CAP = (
    4096  # decontaminate.max_file_bytes in the fuzz: small, so oversize files are cheap (a line nested 1,100 deep fits)
)
ALARM_S = 20  # an example that blocks (a FIFO opened for reading) fails here instead of hanging

SHORT = fuzz_settings()
LONG = fuzz_settings(long_examples=3_000)
OUTCOMES: Counter = Counter()

KINDS = ["text", "bytes", "oversize", "fifo", "directory", "link_inside", "link_out", "link_etc", "dangling"]
NAMES = [b"t0", b"t1", b"t2", b"sub/t3", b"t\xff", b"sub\xfe/t4", b"deep/a/b/t5"]
DIR_LINKS = [".", "..", "OUT", "OUT/task", "t0", "missing"]


@st.composite
def benchmark_tree(draw) -> tuple[list[tuple[bytes, str]], list[tuple[bytes, str]], list[bytes]]:
    """Task directories (name, what its instruction.md is), directory links (name, target), and
    JSONL lines."""
    tasks = draw(
        st.lists(
            st.tuples(st.sampled_from(NAMES), st.sampled_from(KINDS)), min_size=1, max_size=6, unique_by=lambda t: t[0]
        )
    )
    links = draw(
        st.lists(st.tuples(st.sampled_from([b"l", b"sub/l", b"loop"]), st.sampled_from(DIR_LINKS)), max_size=3)
    )
    line = st.one_of(
        st.builds(lambda t: json.dumps({"instruction": t}).encode(), st.text(max_size=40)),
        st.builds(lambda d: b"[" * d + b"]" * d, st.integers(1, 1200)),
        st.builds(lambda d: b'{"instruction": ' + b"[" * d + b"]" * d + b"}", st.integers(1000, 1100)),
        st.just(json.dumps({"instruction": "x" * (CAP + 10)}).encode()),
        st.binary(max_size=30).filter(lambda b: b"\n" not in b),
        st.just(b""),
        st.just(b'{"instruction": 3}'),
    )
    return tasks, links, draw(st.lists(line, max_size=6))


def _plant(tmp: Path, tasks, links, lines) -> tuple[Path, Path]:
    """The benchmark directory and the JSONL benchmark under tmp/benchmarks; a secret outside."""
    out = tmp / "outside"
    (out / "task").mkdir(parents=True)
    (out / "secret.md").write_text(SECRET)
    (out / "task" / "instruction.md").write_text(SECRET)
    root = tmp / "benchmarks"
    bench = os.fsencode(root / "b")
    os.makedirs(bench)
    for name, kind in tasks:
        task = os.path.join(bench, name)
        os.makedirs(task, exist_ok=True)
        _instruction(os.path.join(task, b"instruction.md"), kind, out, os.fsdecode(bench))
    for name, target in links:
        where = os.path.join(bench, name)
        os.makedirs(os.path.dirname(where), exist_ok=True)
        if not os.path.lexists(where):
            os.symlink(str(out) + target[3:] if target.startswith("OUT") else target, where)
    (root / "b.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return root, Path(os.fsdecode(bench))


def _instruction(path: bytes, kind: str, out: Path, bench: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        os.mkdir(path)
    elif kind.startswith("link") or kind == "dangling":
        target = {
            "link_inside": os.path.join(bench, "inside.md"),
            "link_out": str(out / "secret.md"),
            "link_etc": "/etc/passwd",
            "dangling": os.path.join(bench, "missing.md"),
        }[kind]
        if kind == "link_inside":
            Path(target).write_text("a file inside the benchmark")
        os.symlink(target, path)
    else:
        data = {"text": b"Sort the numbers.", "bytes": b"bad \xff\xfe bytes", "oversize": b"w " * CAP}[kind]
        with open(path, "wb") as f:
            f.write(data)


@contextmanager
def alarm(seconds: int):
    """Fail, rather than hang, when the reader blocks (SIGALRM interrupts a blocking open)."""

    def fire(signum, frame):
        raise TimeoutError(f"the benchmark reader blocked for {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _check(tasks, links, lines) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root, bench = _plant(Path(tmp), tasks, links, lines)
        with alarm(ALARM_S):
            tree = read_benchmark("b", bench, root=root, max_file_bytes=CAP)
            try:
                table = read_benchmark("j", root / "b.jsonl", root=root, max_file_bytes=CAP)
            except BadInput as e:  # the first row has no instruction column: a wrong `column:`, one line
                assert "has no column 'instruction'" in str(e) and "\n" not in str(e), e
                table = None
    for read in filter(None, (tree, table)):
        assert all(SECRET not in i.text for i in read.items), "read outside the root"
        assert all(SECRET not in s.line() and s.reason in SKIP_REASONS for s in read.skipped)
        OUTCOMES.update({"items": len(read.items), **Counter(s.reason for s in read.skipped)})
    items, reported = {i.item for i in tree.items}, {s.path for s in tree.skipped}
    for name, _ in tasks:  # every planted task directory: read, or its file or itself reported
        rel = display(os.fsdecode(name))
        assert rel in items or f"{rel}/instruction.md" in reported or rel in reported, (rel, items, reported)
    if table is not None:  # every non-blank line: an item or a report
        assert len(table.items) + len(table.skipped) == sum(1 for line in lines if line.strip()), table


@SHORT
@given(benchmark_tree())
def test_fuzz_benchmark_trees(t):
    _check(*t)


@pytest.mark.long
@LONG
@given(benchmark_tree())
def test_fuzz_benchmark_trees_long(t):
    _check(*t)


def test_fuzz_outcomes_cover_every_kind():
    """The generator reaches what it is for (run after the fuzz test: the same module)."""
    if not OUTCOMES:
        pytest.skip("the fuzz test did not run first")
    print(f"\nfuzz: benchmark trees: {dict(OUTCOMES.most_common())}")
    for reason in ("symlink_outside_input", "unsupported_file", "file_too_large"):
        assert OUTCOMES[reason] > 0, OUTCOMES
