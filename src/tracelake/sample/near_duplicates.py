"""Planted near-duplicate tasks and benchmark copies in the embedded sample, with their truth.

A dedup or decontamination stage can only be measured for precision and recall against a known
answer. Real corpora hold the same task many times over (re-published, lightly edited, reworded)
and leak benchmark tasks into training data; the sample plants both on purpose and records each
one in synth_manifest.json under "planted":

- near-duplicates: a task of a source whose instruction is a variant of an earlier original task
  of the same source (never of a variant or of a benchmark copy). It keeps its own name, so it is
  a distinct task with its own trials. Kinds, hardest to detect last:
    exact       the same text;
    near_exact  whitespace and case changes only: after lowercasing and collapsing whitespace the
                text is identical (what a normalising exact match must catch);
    paraphrase  the title first, the other paragraphs reordered, one or two numbers and file or
                path names changed, a little whitespace and case noise (what fuzzy matching must
                catch; normalised, the texts differ).
- benchmark copies: `synthesize` writes a small benchmark, out/benchmark/<task>/instruction.md,
  made like any source's tasks (styles cycling through STYLES). A few tasks of the sources are
  replaced by an exact or near-exact copy of a benchmark task of their style. Some benchmark tasks
  are held out and never copied, so a decontamination check has negatives as well as positives.

Every random choice comes from `seeded(seed, ...)`, so the same parameters plant the same copies.
Only the last MAX_ORIGINALS originals of a source are remembered, so memory stays bounded at any
scale.
"""

from __future__ import annotations

import random
import re
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tracelake.sample.common import STYLES, SourceSpec, seeded
from tracelake.sample.tasks import Task, make_task, with_instruction

__all__ = [
    "BENCHMARK_COPY_RATE",
    "BENCHMARK_DIR",
    "BENCHMARK_TASKS",
    "COPY_KINDS",
    "KINDS",
    "NEAR_DUPLICATE_RATE",
    "Planted",
    "SourcePlanter",
    "copyable",
    "exact",
    "make_benchmark",
    "near_exact",
    "normalize",
    "paraphrase",
]

NEAR_DUPLICATE_RATE = 0.10  # chance that a task (k >= 1) is a variant of an earlier original
BENCHMARK_TASKS = 8  # tasks in out/benchmark
BENCHMARK_COPY_RATE = 0.02  # chance that a task copies a benchmark task of its style (9 copies
# in the default sample: seed 0, 2000 trials, 300 tasks)
BENCHMARK_DIR = "benchmark"  # under the output directory; no source may have this name
MAX_ORIGINALS = 1000  # originals per source remembered as near-duplicate targets
KINDS = ("exact", "near_exact", "paraphrase")
KIND_WEIGHTS = (0.25, 0.35, 0.40)
COPY_KINDS = ("exact", "near_exact")
RENAMES = ("helpers", "compat", "legacy", "state", "config", "backend", "records", "session")

_WORD = re.compile(r"\S+")
_GAP = re.compile(r"(?<=\S) (?=\S)")
_NUMBER = re.compile(r"\b\d{2,}\b")
_RUN = re.compile(r"[\w./-]+")
_EXTENSION = re.compile(r"\.[A-Za-z]{1,4}$")


def normalize(text: str) -> str:
    """Lowercased, whitespace collapsed: what a near-exact copy leaves unchanged."""
    return " ".join(text.lower().split())


# --------------------------------------------------------------------------- variants
def exact(rng: random.Random, text: str) -> str:
    """The same text: the copy a byte-level dedup must catch."""
    return text


def near_exact(rng: random.Random, text: str) -> str:
    """Whitespace and case noise only; the bytes always differ from `text`."""
    lines = [_respace(rng, _recase(rng, line, 0.2), trailing=0.2) for line in text.split("\n")]
    new = "\n".join(_reblank(rng, lines))
    return new if new != text else new + " "


def paraphrase(rng: random.Random, text: str) -> str:
    """The title kept first, the other paragraphs reordered, one or two numbers and file or path
    names changed, light whitespace and case noise in the body: still recognisably the same task,
    but different once normalised. Needs at least two paragraphs after the title."""
    title, *blocks = text.split("\n\n")
    if len(blocks) < 2:
        raise ValueError("paraphrase needs at least two paragraphs after the title")
    body = "\n\n".join(_reorder(rng, blocks))
    body = _rename_files(rng, _rename_numbers(rng, body))
    body = "\n".join(_respace(rng, _recase(rng, line, 0.05), trailing=0.05) for line in body.split("\n"))
    return f"{title}\n\n{body}"


VARIANTS: dict[str, Callable[[random.Random, str], str]] = {
    "exact": exact,
    "near_exact": near_exact,
    "paraphrase": paraphrase,
}


def _paragraphs(text: str) -> int:
    return text.count("\n\n") + 1


def _flip_case(word: str) -> str:
    if word != word.lower():
        return word.lower()
    return re.sub("[a-z]", lambda m: m.group().upper(), word, count=1)


def _recase(rng: random.Random, line: str, p: float) -> str:
    return _WORD.sub(lambda m: _flip_case(m.group()) if rng.random() < p else m.group(), line)


def _respace(rng: random.Random, line: str, trailing: float) -> str:
    """Some single spaces between words doubled or turned into tabs; sometimes trailing spaces."""

    def gap(_: re.Match[str]) -> str:
        r = rng.random()
        return "  " if r < 0.08 else "\t" if r < 0.12 else " "

    line = _GAP.sub(gap, line)
    return line + " " * rng.randint(1, 2) if rng.random() < trailing else line


def _reblank(rng: random.Random, lines: list[str]) -> list[str]:
    """Sometimes one blank line more, sometimes one less (never the first line)."""
    r = rng.random()
    blanks = [i for i, line in enumerate(lines) if i and not line.strip()]
    if r < 0.3 and len(lines) > 1:
        at = rng.randint(1, len(lines) - 1)
        return lines[:at] + [""] + lines[at:]
    if r < 0.55 and blanks:
        at = rng.choice(blanks)
        return lines[:at] + lines[at + 1 :]
    return lines


def _reorder(rng: random.Random, blocks: list[str]) -> list[str]:
    """The paragraphs shuffled into an order other than the original one."""
    order = blocks[:]
    rng.shuffle(order)
    return order if order != blocks else blocks[1:] + blocks[:1]


def _rename_numbers(rng: random.Random, text: str) -> str:
    """One or two numbers (two digits or more) changed everywhere they occur, same length."""
    numbers = sorted(set(_NUMBER.findall(text)))
    chosen = rng.sample(numbers, min(len(numbers), rng.randint(1, 2)))
    mapping = {old: _other_number(rng, old) for old in chosen}
    return _NUMBER.sub(lambda m: mapping.get(m.group(), m.group()), text)


def _other_number(rng: random.Random, old: str) -> str:
    low, high = 10 ** (len(old) - 1), 10 ** len(old) - 1
    new = old
    while new == old:
        new = str(rng.randint(low, high))
    return new


def _file_like(token: str) -> bool:
    last = token.rsplit("/", 1)[-1]
    return bool(last) and not last.startswith(".") and ("/" in token or bool(_EXTENSION.search(token)))


def _rename_files(rng: random.Random, text: str) -> str:
    """One or two file or path tokens get another last name (`pkg/core.py` -> `pkg/compat.py`),
    everywhere the same token occurs."""
    tokens = sorted({t for m in _RUN.finditer(text) if _file_like(t := m.group().rstrip("."))})
    chosen = rng.sample(tokens, min(len(tokens), rng.randint(1, 2)))
    mapping = {old: _renamed(rng, old) for old in chosen}

    def sub(m: re.Match[str]) -> str:
        core = m.group().rstrip(".")
        return mapping.get(core, core) + m.group()[len(core) :]

    return _RUN.sub(sub, text)


def _renamed(rng: random.Random, token: str) -> str:
    head, slash, last = token.rpartition("/")
    stem, dot, ext = last.partition(".")
    new = rng.choice([name for name in RENAMES if name != stem])
    return f"{head}{slash}{new}{dot}{ext}"


# --------------------------------------------------------------------------- benchmark
def make_benchmark(seed: int, n: int) -> list[Task]:
    """The benchmark: n tasks made like a source's, styles cycling through STYLES, named
    benchmark-000, benchmark-001, ..."""
    tasks = []
    for i in range(n):
        spec = SourceSpec(BENCHMARK_DIR, STYLES[i % len(STYLES)], "harbor", 1.0)
        tasks.append(replace(make_task(seed, spec, i), name=f"{BENCHMARK_DIR}-{i:03d}"))
    return tasks


def copyable(seed: int, tasks: Sequence[Task]) -> list[Task]:
    """The benchmark tasks sources may copy: all but a seeded few held out (2 of 8, a quarter of
    larger benchmarks), which are the negatives of a decontamination check."""
    held = min(len(tasks), max(2, len(tasks) // 4))
    out = set(seeded(seed, BENCHMARK_DIR, "held_out").sample(range(len(tasks)), held))
    return [task for i, task in enumerate(tasks) if i not in out]


# --------------------------------------------------------------------------- planting
@dataclass
class Planted:
    """The truth of what was planted, over all sources."""

    near_duplicates: list[dict[str, str]] = field(default_factory=list)
    benchmark_copies: list[dict[str, str]] = field(default_factory=list)

    def manifest(self) -> dict[str, Any]:
        """The manifest's "planted" entry, sorted by (source, task)."""

        def key(row: dict[str, str]) -> tuple[str, str]:
            return row["source"], row["task"]

        return {
            "near_duplicates": sorted(self.near_duplicates, key=key),
            "benchmark_copies": sorted(self.benchmark_copies, key=key),
            "benchmark_dir": BENCHMARK_DIR,
        }

    def counts(self) -> dict[str, dict[str, int]]:
        """Per list, copies by kind (every kind listed, zeros included)."""

        def by_kind(rows: list[dict[str, str]], kinds: Sequence[str]) -> dict[str, int]:
            return {kind: sum(row["kind"] == kind for row in rows) for kind in kinds}

        return {
            "near_duplicates": by_kind(self.near_duplicates, KINDS),
            "benchmark_copies": by_kind(self.benchmark_copies, COPY_KINDS),
        }


@dataclass(frozen=True)
class _Original:
    name: str
    instruction: str
    ctx: dict[str, str]


class SourcePlanter:
    """Decides, task by task, whether a source's task stays original or becomes a planted copy.

    Tasks must come in order k = 0, 1, ...: a near-duplicate copies an original made earlier.
    """

    def __init__(self, seed: int, spec: SourceSpec, rate: float, benchmark: Sequence[Task], planted: Planted) -> None:
        self._seed, self._spec, self._rate, self._planted = seed, spec, rate, planted
        self._benchmark = [task for task in benchmark if task.style == spec.style]
        self._originals: deque[_Original] = deque(maxlen=MAX_ORIGINALS)
        self._paraphrasable: deque[_Original] = deque(maxlen=MAX_ORIGINALS)

    def plant(self, k: int, task: Task) -> Task:
        """Task k as written: a benchmark copy, a near-duplicate, or `task` itself."""
        planted = self._benchmark_copy(k, task) or self._near_duplicate(k, task)
        if planted is not None:
            return planted
        original = _Original(task.name, task.instruction, task.ctx)
        self._originals.append(original)
        if _paragraphs(task.instruction) >= 3:
            self._paraphrasable.append(original)
        return task

    def _benchmark_copy(self, k: int, task: Task) -> Task | None:
        rng = seeded(self._seed, self._spec.name, "benchmark_copy", k)
        if not self._benchmark or rng.random() >= BENCHMARK_COPY_RATE:
            return None
        source = rng.choice(self._benchmark)
        kind = rng.choice(COPY_KINDS)
        self._planted.benchmark_copies.append(
            {"source": self._spec.name, "task": task.name, "benchmark": source.name, "kind": kind}
        )
        return with_instruction(task, VARIANTS[kind](rng, source.instruction), dict(source.ctx))

    def _near_duplicate(self, k: int, task: Task) -> Task | None:
        rng = seeded(self._seed, self._spec.name, "near_duplicate", k)
        if k < 1 or not self._originals or rng.random() >= self._rate:
            return None
        kind = rng.choices(KINDS, KIND_WEIGHTS)[0]
        if kind == "paraphrase" and not self._paraphrasable:
            kind = "near_exact"
        pool = self._paraphrasable if kind == "paraphrase" else self._originals
        original = pool[rng.randrange(len(pool))]
        self._planted.near_duplicates.append(
            {"source": self._spec.name, "task": task.name, "of": original.name, "kind": kind}
        )
        return with_instruction(task, VARIANTS[kind](rng, original.instruction), dict(original.ctx))
