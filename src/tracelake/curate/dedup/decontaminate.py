"""Benchmark decontamination (rule contaminated_v1): which tasks copy a benchmark's task.

Benchmarks are named in params (`decontaminate.benchmarks: {name: path}`): a directory of Harbor
tasks (every `instruction.md` below it; the item is its directory, relative), or a Parquet / JSONL
/ JSON file with an instruction column (the item: the `id` column, else the row number).

A task is contaminated by a benchmark item when they share normalised word n-grams (13 words by
default, the span language-model decontamination has used since GPT-3; text_norm_v1 on both)
covering at least `ngram_min_share` of the task's distinct n-grams or of the item's, i.e. one text
contains most of the other; or when the whole normalised task is shorter than n words and equals
the item's text; or (if an embedding threshold is set) when the item's vector is that close to the
task's. A single shared 13-gram (`ngram_min_share: 0`'s rule) is not enough by default: templated
task families share boilerplate sentences with a benchmark of the same family (on the sample, any
shared 13-gram flags 212 of 300 tasks for 9 planted copies; a share of 0.8 flags exactly the 9).
The evidence kept per task: the item with the largest share (ties: benchmark name, then item
order), the first shared n-gram in the task's text, and the share as `similarity`.

The task's instruction is not all the model trains on: a derived task's instruction can miss the
text (a trace table of another agent's format), and a rollout's prompt can hold a benchmark's task
under another name. So the same n-gram rule also reads every rollout's opening turns (rule
task_turns_v1: its system and user messages before the first assistant turn, each turn a text, plus
the task between terminus-2's markers); a task whose instruction did not match but one of whose
rollouts' turns did is contaminated too (`found_in: turns`, the first such rollout by id in
`trajectory_id`), and the filter drops every rollout of it. Embedding similarity is for
instructions only (a 20,000-character system prompt has no useful vector for one task).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator

import numpy as np
import pyarrow as pa

from tracelake.core.errors import BadInput
from tracelake.curate.dedup.shingles import WordHasher, ngram_hashes, normalize
from tracelake.ingest.common import Reject, parse_json_bytes
from tracelake.ingest.derived_tasks import terminus_task
from tracelake.ingest.walk import Root, display, join, walk_dirs

DECONTAMINATION_RULE = "contaminated_v1"
TURNS_RULE = "task_turns_v1"  # which texts of the rollouts are compared too (task_turn_texts)


@dataclass(frozen=True)
class BenchmarkItem:
    benchmark: str
    item: str
    text: str


# Why a benchmark file, or one item of it, was not read: ingest's reasons where the cause is the same
# (its walker's rules), plus the size cap. schemas/README.md documents each.
SKIP_REASONS: dict[str, str] = {
    "symlink_outside_input": "a link whose target lies outside decontaminate.root: never followed",
    "linked_directory": "a directory link: its target is read where it lies (if inside), never through the link",
    "unsupported_file": "not a regular file (a FIFO, a device, a directory named instruction.md): never opened for reading",
    "unreadable_file": "the file or a directory could not be read (permissions, I/O error)",
    "invalid_path": "a directory name that is not UTF-8 (shown with \\xNN escapes)",
    "file_too_large": "a file read whole, a JSONL line or a Parquet value over decontaminate.max_file_bytes: not read",
    "json_too_deep": "a JSON document or line nested deeper than the parser allows (1024)",
    "unparsable_json": "a JSON document or line that is not valid JSON",
    "invalid_utf8": "a JSON document or line that is not UTF-8",
    "lone_surrogate": "a JSON string holding a lone UTF-16 surrogate",
    "invalid_field": "a row that is not an object, or whose instruction column is not a string",
}
DEFAULT_MAX_FILE_BYTES = 16 << 20  # decontaminate.max_file_bytes's default


class Skip(Exception):
    """Why one benchmark file or item is not read (a reason of SKIP_REASONS), raised while reading it."""

    def __init__(self, reason: str, detail: str):
        if reason not in SKIP_REASONS:
            raise ValueError(f"unknown skip reason {reason!r}")
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


@dataclass(frozen=True)
class Skipped:
    """A benchmark file (or a line, a value) that was not read, and why: never dropped silently."""

    benchmark: str
    path: str  # relative to the benchmark, as text ('t1/instruction.md', 'b.jsonl line 7')
    reason: str
    detail: str

    def line(self) -> str:
        return f"decontaminate.benchmarks.{self.benchmark}: {self.path} not read ({self.reason}): {self.detail}"


@dataclass
class BenchmarkRead:
    items: list[BenchmarkItem]
    skipped: list[Skipped]


def load_benchmark(
    name: str, path: Path, column: str = "instruction", id_column: str | None = None, **options
) -> list[BenchmarkItem]:
    """The items of one benchmark, in a fixed order; a one-line BadInput when it cannot be read
    whole, or when any file or item of it cannot be read (read_benchmark reports them instead)."""
    read = read_benchmark(name, path, column, id_column, **options)
    if read.skipped:
        raise BadInput(read.skipped[0].line())
    return read.items


def read_benchmark(
    name: str,
    path: Path,
    column: str = "instruction",
    id_column: str | None = None,
    *,
    root: Path | None = None,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
) -> BenchmarkRead:
    """The items of one benchmark, in a fixed order, and every file or item that was not read.

    Every byte is read through ingest's walker (tracelake.ingest.walk.Root): nothing outside `root`
    (decontaminate.root; default: the benchmark itself), no link followed out of it, regular files
    only (a FIFO or a device is never opened for reading), each file read whole at most
    `max_file_bytes` (from its size, before reading), JSON through ingest's depth-limited parser.
    A file or item that breaks a rule is a Skipped; a benchmark that cannot be read at all (missing,
    of an unknown kind, without the named column) is a one-line BadInput."""
    where = f"decontaminate.benchmarks.{name}: "
    path = Path(path)
    within = Root(root if root is not None else (path if os.path.isdir(path) else path.parent))
    if not os.path.lexists(path):
        raise BadInput(f"{where}{path} does not exist")
    if not within.contains(path):
        raise BadInput(f"{where}{path} leads outside decontaminate.root ({within.path}); it is not read")
    source = _Source(name, where, column, id_column, max_file_bytes)
    if os.path.isdir(path):
        return _task_dirs(source, Root(path, within=within.path), path)
    readers = {".parquet": _parquet, ".jsonl": _jsonl, ".json": _json}
    if path.suffix not in readers:
        raise BadInput(f"{where}{path}: a benchmark is a directory of tasks, or a .parquet, .jsonl or .json file")
    read = BenchmarkRead([], [])
    try:
        with within.open(path, display(path.name), "unreadable_file") as f:
            readers[path.suffix](source, f, display(path.name), read)
    except (Reject, Skip) as e:
        read.skipped.append(Skipped(name, display(path.name), e.reason, e.detail))
    except OSError as e:  # an I/O error part way: the items before it are kept
        read.skipped.append(Skipped(name, display(path.name), "unreadable_file", e.strerror or str(e)))
    return read


@dataclass(frozen=True)
class _Source:
    name: str
    where: str  # 'decontaminate.benchmarks.NAME: ', the prefix of a BadInput
    column: str
    id_column: str | None
    cap: int


def _task_dirs(source: _Source, root: Root, path: Path) -> BenchmarkRead:
    """Every task directory below the benchmark's (a directory holding instruction.md, found by
    ingest's walk: directory links and hidden directories are not walked), its instruction read."""
    found, problems = walk_dirs(root, lambda d: os.path.lexists(d / "instruction.md"), lambda d: False)
    read = BenchmarkRead([], [Skipped(source.name, rel, r.reason, r.detail) for rel, r in problems])
    for d, rel in found:
        file_rel = join(rel, "instruction.md")
        try:
            with root.open(d / "instruction.md", file_rel, "unreadable_file") as f:
                data = _read_capped(f, file_rel, source.cap)
        except (Reject, Skip) as e:
            read.skipped.append(Skipped(source.name, display(file_rel), e.reason, e.detail))
            continue
        read.items.append(BenchmarkItem(source.name, rel, data.decode("utf-8", errors="replace")))
    if not read.items and not read.skipped:
        raise BadInput(f"{source.where}{path} holds no task directory (no */instruction.md below it)")
    return read


def _read_capped(f: BinaryIO, rel: str, cap: int) -> bytes:
    """A file's bytes, refused from its size when over the cap (and again if it grew meanwhile)."""
    size = os.fstat(f.fileno()).st_size
    if size <= cap:
        data = f.read(cap + 1)
        size = max(size, len(data))
    if size > cap:
        raise Skip("file_too_large", f"{display(rel)} is {size} bytes, over decontaminate.max_file_bytes ({cap})")
    return data


def _jsonl(source: _Source, f: BinaryIO, rel: str, read: BenchmarkRead) -> None:
    """One item per non-blank line (its id: the id column, else its number among those lines),
    streamed: a line is held only up to the cap, so no file is ever read whole."""
    k = 0
    for number, line in _lines(f, source.cap):
        if line is not None and not line.strip():
            continue
        at = f"{rel} line {number}"
        try:
            if line is None:
                raise Skip("file_too_large", f"{at} is over decontaminate.max_file_bytes ({source.cap})")
            _add_item(source, read, parse_json_bytes(line, at), k, at, first=not k)
        except (Reject, Skip) as e:
            read.skipped.append(Skipped(source.name, at, e.reason, e.detail))
        k += 1


def _lines(f: BinaryIO, cap: int) -> Iterator[tuple[int, bytes | None]]:
    """(line number, its bytes), or None for a line longer than the cap (skipped, never held)."""
    number = 0
    while line := f.readline(cap + 1):
        number += 1
        if len(line) > cap and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):
                line = f.readline(1 << 20)
            yield number, None
        else:
            yield number, line


def _json(source: _Source, f: BinaryIO, rel: str, read: BenchmarkRead) -> None:
    """A .json benchmark: one list of objects, read whole under the cap."""
    rows = parse_json_bytes(_read_capped(f, rel, source.cap), rel)
    if not isinstance(rows, list):
        raise BadInput(f"{source.where}{rel} must hold a list of objects")
    for k, row in enumerate(rows):
        try:
            _add_item(source, read, row, k, f"{rel} item {k}", first=not k)
        except Skip as e:
            read.skipped.append(Skipped(source.name, f"{rel} item {k}", e.reason, e.detail))


def _parquet(source: _Source, f: BinaryIO, rel: str, read: BenchmarkRead) -> None:
    """A Parquet benchmark, read batch by batch, only its instruction and id columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(f)
    except (pa.ArrowException, OSError) as e:
        raise BadInput(f"{source.where}{rel} is not a readable Parquet file ({e})") from None
    names = table.schema_arrow.names
    if source.column not in names:
        raise BadInput(f"{source.where}{rel} has no column {source.column!r} (set `column:`); it has {sorted(names)}")
    columns = [source.column] + ([source.id_column] if source.id_column in names else [])
    k = 0
    for batch in table.iter_batches(batch_size=1024, columns=columns):
        for row in batch.to_pylist():
            try:
                _add_item(source, read, row, k, f"{rel} row {k}", first=False)
            except Skip as e:
                read.skipped.append(Skipped(source.name, f"{rel} row {k}", e.reason, e.detail))
            k += 1


def _add_item(source: _Source, read: BenchmarkRead, row: Any, k: int, at: str, first: bool) -> None:
    """Row k as an item; the first row without the column is a wrong `column:` (BadInput)."""
    if not isinstance(row, dict):
        raise Skip("invalid_field", f"{at} is {type(row).__name__}, not an object")
    if first and source.column not in row:
        raise BadInput(f"{source.where}{at} has no column {source.column!r} (set `column:`); it has {sorted(row)}")
    value = row.get(source.column)
    if not isinstance(value, str):
        raise Skip("invalid_field", f"{at}: {source.column!r} is not a string")
    if len(value) > source.cap and len(value.encode("utf-8", "surrogatepass")) > source.cap:
        raise Skip("file_too_large", f"{at}: {source.column!r} is over decontaminate.max_file_bytes ({source.cap})")
    ident = row.get(source.id_column) if source.id_column else None
    read.items.append(BenchmarkItem(source.name, str(ident) if ident is not None else str(k), value))


@dataclass(frozen=True)
class Contamination:
    task: int  # index of the task
    item: int  # index of the benchmark item
    method: str  # "ngram" | "embedding"
    similarity: float  # 1.0 for an n-gram match; the cosine for an embedding match
    evidence: str | None  # the matching n-gram (normalised words)


class NgramIndex:
    """The benchmark items' n-grams, built once; `match` finds the item a text copies (rule
    contaminated_v1): the item sharing the largest share of n-grams with the text, where the shared
    n-grams cover at least `min_share` of the text's distinct n-grams or of the item's (one text
    contains the other); a text shorter than n words matches an item whose whole text it equals."""

    def __init__(self, items: list[BenchmarkItem], n: int, min_share: float, hasher: WordHasher):
        self.n, self.min_share, self.hasher = n, min_share, hasher
        item_hashes, item_of, self.item_size = [], [], np.zeros(len(items), dtype=np.int64)
        self.short_items: dict[str, int] = {}
        for k, it in enumerate(items):
            ws = normalize(it.text).split()
            if len(ws) < n:
                self.short_items.setdefault(" ".join(ws), k)
                continue
            h = np.unique(ngram_hashes(hasher.hashes(ws), n))
            item_hashes.append(h)
            item_of.append(np.full(len(h), k, dtype=np.int64))
            self.item_size[k] = len(h)
        flat = np.concatenate(item_hashes) if item_hashes else np.empty(0, np.uint64)
        owners = np.concatenate(item_of) if item_of else np.empty(0, np.int64)
        order = np.lexsort((owners, flat))
        self.flat, self.owners, self.n_items = flat[order], owners[order], len(items)

    def match(self, t: int, ws: list[str]) -> Contamination | None:
        """Text t's match (its words `ws`), or None. The evidence: the first shared n-gram in the text."""
        n = self.n
        if len(ws) < n:
            k = self.short_items.get(" ".join(ws)) if ws else None
            return Contamination(t, k, "ngram", 1.0, " ".join(ws)) if k is not None else None
        if not len(self.flat):
            return None
        flat, owners = self.flat, self.owners
        grams = ngram_hashes(self.hasher.hashes(ws), n)
        distinct = np.unique(grams)
        lo, hi = np.searchsorted(flat, distinct, "left"), np.searchsorted(flat, distinct, "right")
        if not (hi > lo).any():
            return None
        shared = np.bincount(np.concatenate([owners[a:b] for a, b in zip(lo, hi) if b > a]), minlength=self.n_items)
        share = np.maximum(shared / len(distinct), shared / np.maximum(self.item_size, 1))
        best = int(np.argmax(share))  # the first item among equals
        if share[best] < self.min_share or shared[best] == 0:
            return None
        mine = flat[owners == best]
        first = int(np.flatnonzero(np.isin(grams, mine))[0])
        return Contamination(t, best, "ngram", round(float(share[best]), 6), " ".join(ws[first : first + n]))


def ngram_matches(
    task_words: Iterable[list[str]], items: list[BenchmarkItem], n: int, min_share: float, hasher: WordHasher
) -> dict[int, Contamination]:
    """task index -> its n-gram match (NgramIndex.match), for the tasks that have one."""
    index = NgramIndex(items, n, min_share, hasher)
    found: dict[int, Contamination] = {}
    for t, ws in enumerate(task_words):
        if (c := index.match(t, ws)) is not None:
            found[t] = c
    return found


def task_turn_texts(turns: list[str]) -> list[str]:
    """What rule task_turns_v1 compares with the benchmarks for one rollout: each of its opening turns
    (the system and user messages before its first assistant turn: what the model reads as its task)
    and, where a turn holds terminus-2's markers, the task between them, so that an item shorter than
    n words, which matches only a whole text, is found inside terminus-2's prompt too."""
    texts = list(turns)
    for text in turns:
        inner = terminus_task(text)
        if inner:
            texts.append(inner)
    return texts


@dataclass(frozen=True)
class TurnMatch:
    """A task found through one of its rollouts' opening turns (rule task_turns_v1)."""

    task_id: str
    source: str
    task: str
    trajectory_id: str
    found: Contamination


def as_table(
    found: list[Contamination],
    task_id: list[str],
    source: list[str],
    task: list[str],
    items: list[BenchmarkItem],
    schema: pa.Schema,
    by_turns: Iterable[TurnMatch] = (),
) -> pa.Table:
    """The contamination table: the tasks whose instruction matched (`found`, indices into the
    task columns), then those found only through a rollout's opening turns, by task_id."""
    rows = [(task_id[c.task], source[c.task], task[c.task], c, "instruction", None) for c in found] + [
        (m.task_id, m.source, m.task, m.found, "turns", m.trajectory_id) for m in by_turns
    ]
    rows.sort(key=lambda r: r[0])
    return pa.table(
        {
            "task_id": [r[0] for r in rows],
            "source": [r[1] for r in rows],
            "task": [r[2] for r in rows],
            "benchmark": [items[r[3].item].benchmark for r in rows],
            "benchmark_item": [items[r[3].item].item for r in rows],
            "method": [r[3].method for r in rows],
            "similarity": [round(r[3].similarity, 6) for r in rows],
            "ngram": [r[3].evidence for r in rows],
            "found_in": [r[4] for r in rows],
            "trajectory_id": [r[5] for r in rows],
        },
        schema=schema,
    )
