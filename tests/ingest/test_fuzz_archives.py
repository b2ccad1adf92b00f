"""Fuzzing task archives (hypothesis): random member lists — files and directories in any order,
names that clash (a file `tests` and a member `tests/x`), repeat, pass through '.', run past the
file system's limits, or sit under one top-level directory — through what ingest and extraction
run: scan_archive (ingest's streamed acceptance check) and extract_archive.

Property: whatever ingest keeps extracts, exactly: every archive is either refused with a known
reason by both, or extracted with the same files, bytes and checksum that ingest recorded. Bounded:
helpers.FUZZ_EXAMPLES examples, derandomized; the `long` variant runs thousands (TRACELAKE_LONG=1)."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracelake.core.errors import BadInput
from tracelake.ingest.common import REASONS, Reject
from tracelake.ingest.task_archive import extract_archive, scan_archive, task_checksum, walk_task_dir

from ..helpers import fuzz_settings
from .test_hostile_tasks import tgz_typed

SHORT = fuzz_settings()
LONG = fuzz_settings(long_examples=3_000)
OUTCOMES: Counter = Counter()

# Mostly plain names (so that many archives are kept), and the edges: '.', a 255-byte name (the
# limit), a 256-byte one, parts whose joined path passes 1024 bytes.
PARTS = ["tests", "x", "instruction.md", "a"] * 3 + [".", "n" * 255, "é" * 128, "d" * 200]


@st.composite
def archive(draw) -> list[tuple[str, bytes | None]]:
    """Members in archive order: (name, data) for a file, (name, None) for a directory."""
    name = st.lists(st.sampled_from(PARTS), min_size=1, max_size=5).map("/".join)
    top = draw(st.sampled_from(["", "task/"]))
    members = draw(
        st.lists(st.tuples(name, st.one_of(st.none(), st.binary(max_size=20))), max_size=8).map(
            lambda ms: [(top + n, d) for n, d in ms]
        )
    )
    return [(top + "instruction.md", b"Do it.\n"), *members] if draw(st.booleans()) else members


def _check(members: list[tuple[str, bytes | None]]) -> None:
    data = tgz_typed(members)
    try:
        kept = scan_archive(data)
    except Reject as r:
        assert r.reason in REASONS
        with tempfile.TemporaryDirectory() as tmp, pytest.raises(BadInput):
            extract_archive(data, Path(tmp) / "out")
        OUTCOMES[r.reason] += 1
        return
    with tempfile.TemporaryDirectory() as tmp:
        files = extract_archive(data, Path(tmp) / "out")  # what ingest kept must extract
        assert files == sorted(e.name for e in kept if not e.is_dir)
        written = walk_task_dir(Path(tmp) / "out")
        assert task_checksum(written) == task_checksum(kept)
        assert {e.name for e in written} >= {e.name for e in kept}
    OUTCOMES["kept"] += 1


@SHORT
@given(archive())
def test_fuzz_archives_kept_by_ingest_extract(members):
    _check(members)


@pytest.mark.long
@LONG
@given(archive())
def test_fuzz_archives_kept_by_ingest_extract_long(members):
    _check(members)


def test_fuzz_outcomes_cover_both_ends():
    """The generator reaches both kept and refused archives (run after the fuzz test)."""
    if not OUTCOMES:
        pytest.skip("the fuzz test did not run first")
    print(f"\nfuzz: archives: {dict(OUTCOMES.most_common())}")
    assert OUTCOMES["kept"] > 0 and OUTCOMES["unsafe_archive"] > 0, OUTCOMES


def test_the_fuzz_names_reach_the_limits():
    """A 255-byte name is allowed (the limit), a 256-byte one is not: the parts straddle it."""
    assert len(("n" * 255).encode()) == 255 and len(("é" * 128).encode()) == 256
