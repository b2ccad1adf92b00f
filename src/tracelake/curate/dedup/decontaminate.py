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
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
import pyarrow as pa

from tracelake.core.errors import BadInput
from tracelake.core.tables import open_parquet
from tracelake.curate.dedup.shingles import WordHasher, ngram_hashes, normalize

DECONTAMINATION_RULE = "contaminated_v1"


@dataclass(frozen=True)
class BenchmarkItem:
    benchmark: str
    item: str
    text: str


def load_benchmark(
    name: str, path: Path, column: str = "instruction", id_column: str | None = None
) -> list[BenchmarkItem]:
    """The items of one benchmark, in a fixed order; a one-line BadInput when it cannot be read."""
    where = f"decontaminate.benchmarks.{name}: "
    path = Path(path)
    if path.is_dir():
        files = sorted(path.rglob("instruction.md"))
        if not files:
            raise BadInput(f"{where}{path} holds no task directory (no */instruction.md below it)")
        return [
            BenchmarkItem(name, str(f.parent.relative_to(path)) or ".", f.read_text(errors="replace")) for f in files
        ]
    if not path.is_file():
        raise BadInput(f"{where}{path} does not exist")
    if path.suffix == ".parquet":
        table = open_parquet(path, where).read()
        rows = table.to_pylist()
    elif path.suffix in (".jsonl", ".json"):
        try:
            text = path.read_text()
            rows = (
                [json.loads(line) for line in text.splitlines() if line.strip()]
                if path.suffix == ".jsonl"
                else json.loads(text)
            )
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise BadInput(f"{where}{path} is not valid JSON ({e})") from None
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise BadInput(f"{where}{path} must hold a list of objects")
    else:
        raise BadInput(f"{where}{path}: a benchmark is a directory of tasks, or a .parquet, .jsonl or .json file")
    if rows and column not in rows[0]:
        raise BadInput(f"{where}{path} has no column {column!r} (set `column:`); it has {sorted(rows[0])}")
    items = []
    for k, row in enumerate(rows):
        value = row.get(column)
        if not isinstance(value, str):
            raise BadInput(f"{where}{path} row {k}: {column!r} is not a string")
        item = str(row[id_column]) if id_column and row.get(id_column) is not None else str(k)
        items.append(BenchmarkItem(name, item, value))
    return items


@dataclass(frozen=True)
class Contamination:
    task: int  # index of the task
    item: int  # index of the benchmark item
    method: str  # "ngram" | "embedding"
    similarity: float  # 1.0 for an n-gram match; the cosine for an embedding match
    evidence: str | None  # the matching n-gram (normalised words)


def ngram_matches(
    task_words: Iterable[list[str]], items: list[BenchmarkItem], n: int, min_share: float, hasher: WordHasher
) -> dict[int, Contamination]:
    """task index -> its n-gram match: the item sharing the largest share of n-grams with the task,
    where the shared n-grams cover at least `min_share` of the task's distinct n-grams or of the
    item's (one text contains the other). The evidence is the first shared n-gram in the task."""
    item_hashes, item_of, item_size = [], [], np.zeros(len(items), dtype=np.int64)
    short_items: dict[str, int] = {}
    for k, it in enumerate(items):
        ws = normalize(it.text).split()
        if len(ws) < n:
            short_items.setdefault(" ".join(ws), k)
            continue
        h = np.unique(ngram_hashes(hasher.hashes(ws), n))
        item_hashes.append(h)
        item_of.append(np.full(len(h), k, dtype=np.int64))
        item_size[k] = len(h)
    flat = np.concatenate(item_hashes) if item_hashes else np.empty(0, np.uint64)
    owners = np.concatenate(item_of) if item_of else np.empty(0, np.int64)
    order = np.lexsort((owners, flat))
    flat, owners = flat[order], owners[order]
    found: dict[int, Contamination] = {}
    for t, ws in enumerate(task_words):
        if len(ws) < n:
            k = short_items.get(" ".join(ws)) if ws else None
            if k is not None:
                found[t] = Contamination(t, k, "ngram", 1.0, " ".join(ws))
            continue
        if not len(flat):
            continue
        grams = ngram_hashes(hasher.hashes(ws), n)
        distinct = np.unique(grams)
        lo, hi = np.searchsorted(flat, distinct, "left"), np.searchsorted(flat, distinct, "right")
        if not (hi > lo).any():
            continue
        shared = np.bincount(np.concatenate([owners[a:b] for a, b in zip(lo, hi) if b > a]), minlength=len(items))
        share = np.maximum(shared / len(distinct), shared / np.maximum(item_size, 1))
        best = int(np.argmax(share))  # the first item among equals
        if share[best] < min_share or shared[best] == 0:
            continue
        mine = flat[owners == best]
        first = int(np.flatnonzero(np.isin(grams, mine))[0])
        found[t] = Contamination(t, best, "ngram", round(float(share[best]), 6), " ".join(ws[first : first + n]))
    return found


def as_table(
    found: list[Contamination],
    task_id: list[str],
    source: list[str],
    task: list[str],
    items: list[BenchmarkItem],
    schema: pa.Schema,
) -> pa.Table:
    found = sorted(found, key=lambda c: task_id[c.task])
    return pa.table(
        {
            "task_id": [task_id[c.task] for c in found],
            "source": [source[c.task] for c in found],
            "task": [task[c.task] for c in found],
            "benchmark": [items[c.item].benchmark for c in found],
            "benchmark_item": [items[c.item].item for c in found],
            "method": [c.method for c in found],
            "similarity": [round(c.similarity, 6) for c in found],
            "ngram": [c.evidence for c in found],
        },
        schema=schema,
    )
