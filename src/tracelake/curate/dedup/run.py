"""The dedup stage's work: tasks in, `task_clusters` and `contamination` out, plus the LanceDB
embeddings table. Pure of DVC and of the lake's layout (stages/dedup.py places the outputs).

    tasks (task_id, source, task, instruction, n_trajectories), sorted by task_id
      -> exact:      same normalised text (its 128-bit BLAKE2b)             (always)
      -> minhash:    one text per exact group, LSH candidates, true Jaccard  (dedup.minhash)
      -> embedding:  one vector per distinct text, cosine range search       (dedup.embedding)
      -> union-find -> task_clusters
      -> benchmarks: n-gram overlap, embedding similarity -> contamination  (decontaminate)
    rollouts' opening turns (task_id, source, task, trajectory_id, turns), streamed
      -> benchmarks: the same n-gram rule, for tasks not matched yet        (task_turns_v1)

Every step works on rows in task_id order with fixed seeds and fixed index centroids, so the same
tasks and params give the same tables at any thread count.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from tracelake.core.errors import BadInput
from tracelake.core.schema import load_schema
from tracelake.curate.dedup import vectors
from tracelake.curate.dedup.clusters import CLUSTER_RULE, clusters
from tracelake.curate.dedup.decontaminate import (
    DECONTAMINATION_RULE,
    TURNS_RULE,
    BenchmarkItem,
    Contamination,
    NgramIndex,
    Skipped,
    TurnMatch,
    as_table,
    read_benchmark,
    task_turn_texts,
)
from tracelake.curate.dedup.embed import make_embedder
from tracelake.curate.dedup.minhash import MINHASH_RULE, signatures, verified_pairs
from tracelake.curate.dedup.shingles import NORM_RULE, WordHasher, jaccard, normalize, shingle_set, words
from tracelake.curate.params import DecontaminateParams, DedupParams, MinHashParams

Progress = Callable[[str, int], None]  # (what, how many more done)
# The rollouts' opening turns, as Arrow batches of (task_id, source, task, trajectory_id, turns:
# list<string>), any order (sql/dedup_turns.sql); called once, after the tasks' own work.
Turns = Callable[[], Iterable[pa.RecordBatch]]
Warn = Callable[[str], None]  # one line naming a benchmark file that was not read, and why


@dataclass
class DedupResult:
    task_clusters: pa.Table
    contamination: pa.Table
    embeddings: pa.Table | None  # the LanceDB table's rows (text_sha256, vector), sorted
    embedder: str | None  # the embedder's fingerprint
    cache: vectors.CacheStats | None  # texts embedded now / found in the cache (printed, not recorded:
    # the outputs do not depend on what the cache held)
    counts: dict[str, Any] = field(default_factory=dict)
    formulas: dict[str, str] = field(default_factory=dict)


_BATCH = 4096  # instructions made into Python strings at a time


@dataclass
class _Corpus:
    """The tasks. Each instruction stays in its Arrow column and becomes a Python string only a
    batch at a time: at 1M rows a Python copy of every instruction and of its normalised text cost
    gigabytes, for texts each step reads once."""

    task_id: list[str]
    source: list[str]
    task: list[str]
    weight: list[int]
    instructions: pa.ChunkedArray  # null: no instruction (read as "")
    key: list[bytes]  # 16-byte BLAKE2b of each text_norm_v1 text: the exact duplicates' key

    def __len__(self) -> int:
        return len(self.task_id)

    def texts(self, indices: Sequence[int] | None = None) -> Iterator[str]:
        """The instructions of `indices` (every task: None), in that order. Taken chunk by chunk:
        pyarrow's take on a chunked column first concatenates it, a copy of every instruction."""
        chunks = self.instructions.chunks
        if indices is None:
            for chunk in chunks:
                for lo in range(0, len(chunk), _BATCH):
                    yield from (t or "" for t in chunk.slice(lo, _BATCH).to_pylist())
            return
        starts = np.cumsum([0] + [len(c) for c in chunks])
        for lo in range(0, len(indices), _BATCH):
            part = np.asarray(indices[lo : lo + _BATCH], dtype=np.int64)
            which = np.searchsorted(starts, part, side="right") - 1
            out: list[str | None] = [None] * len(part)
            for c in np.unique(which).tolist():
                at = np.flatnonzero(which == c)
                for k, t in zip(at.tolist(), chunks[c].take(pa.array(part[at] - starts[c])).to_pylist()):
                    out[k] = t
            yield from (t or "" for t in out)

    def text(self, i: int) -> str:
        return self.instructions[i].as_py() or ""

    def words(self, i: int) -> list[str]:
        return words(self.text(i))


def _corpus(tasks: pa.Table) -> _Corpus:
    corpus = _Corpus(
        tasks.column("task_id").to_pylist(),
        tasks.column("source").to_pylist(),
        tasks.column("task").to_pylist(),
        [int(n or 0) for n in tasks.column("n_trajectories").to_pylist()],
        tasks.column("instruction"),  # not combined: that would copy it
        [],
    )
    corpus.key = [hashlib.blake2b(normalize(t).encode(), digest_size=16).digest() for t in corpus.texts()]
    return corpus


def _exact_pairs(corpus: _Corpus) -> tuple[list[tuple[int, int]], list[int]]:
    """Pairs (first, i) of tasks with the same normalised text, and one task per distinct text."""
    first: dict[bytes, int] = {}
    pairs = []
    for i, key in enumerate(corpus.key):
        j = first.setdefault(key, i)
        if j != i:
            pairs.append((j, i))
    return pairs, sorted(first.values())


def _signatures(
    corpus: _Corpus, distinct: list[int], mh: MinHashParams, hasher: WordHasher
) -> tuple[list[int], np.ndarray]:
    """The distinct texts with at least one shingle, and their MinHash signatures: made a batch at a
    time, each batch's shingle sets dropped once signed (kept, 100K texts' sets cost hundreds of MB)."""
    nonempty: list[int] = []
    sigs = [np.empty((0, mh.bands * mh.rows), dtype=np.uint32)]
    texts = corpus.texts(distinct)
    for lo in range(0, len(distinct), _BATCH):
        batch = [(i, shingle_set(hasher.hashes(words(t)), mh.ngram)) for i, t in zip(distinct[lo : lo + _BATCH], texts)]
        batch = [(i, s) for i, s in batch if len(s)]
        if batch:
            nonempty += [i for i, _ in batch]
            sigs.append(signatures([s for _, s in batch], mh.bands * mh.rows, mh.seed))
    return nonempty, np.concatenate(sigs)


@dataclass
class _Space:
    """The embedding space: one unit vector per distinct (prepared) text, as in the LanceDB table."""

    embedder: Any
    cache: vectors.EmbeddingCache
    shas: list[bytes]  # the table's rows, sorted
    vecs: np.ndarray  # (rows, dim) float32
    row_of: dict[bytes, int]
    row_of_task: np.ndarray  # task index -> table row (-1: an empty text, no vector)
    first_task: list[int]  # table row -> the first task with that text
    plan: vectors.SearchPlan
    lance_dir: Path

    def open(self) -> Any:
        return vectors.open_table(self.lance_dir)

    def cosine(self, i: int, j: int) -> float | None:
        a, b = self.row_of_task[i], self.row_of_task[j]
        if a < 0 or b < 0:
            return None
        return float(np.dot(self.vecs[a].astype(np.float64), self.vecs[b]))


def _embedding_space(
    corpus: _Corpus, dedup: DedupParams, lance_dir: Path, cache_root: Path | None, tick: Progress
) -> _Space:
    em = dedup.embedding
    embedder = make_embedder(em)
    cache = vectors.EmbeddingCache(cache_root, embedder)
    task_shas = [vectors.text_sha(embedder.prepare(t)) for t in corpus.texts()]
    first: dict[bytes, int] = {}
    for i, sha in enumerate(task_shas):
        first.setdefault(sha, i)
    shas = sorted(first)
    vecs = cache.vectors_of(
        shas,
        lambda rows: [embedder.prepare(t) for t in corpus.texts([first[shas[k]] for k in rows])],
        on_embedded=lambda k: tick("embed", k),
    )
    nonzero = np.linalg.norm(vecs, axis=1) > 0  # an empty text has no direction
    shas = [s for s, ok in zip(shas, nonzero) if ok]
    vecs = vecs[nonzero]
    row_of = {s: k for k, s in enumerate(shas)}
    plan = vectors.plan_search(len(shas), em.exact_below, em.nprobes)
    vectors.write_table(lance_dir, vectors.vectors_table(shas, vecs), plan)
    return _Space(
        embedder,
        cache,
        shas,
        vecs,
        row_of,
        np.array([row_of.get(s, -1) for s in task_shas], np.int64),
        [first[s] for s in shas],
        plan,
        lance_dir,
    )


def _semantic_pairs(space: _Space, dedup: DedupParams, tick: Progress) -> list[tuple[int, int]]:
    """Task pairs whose texts' cosine reaches the threshold (recomputed here in float64, so the
    decision never rests on the search's float32 rounding)."""
    em = dedup.embedding
    if len(space.shas) < 2:
        return []
    q, keys, _ = vectors.range_search(
        space.open(),
        space.vecs,
        1.0 - em.threshold + 1e-4,
        em.neighbours,
        space.plan,
        on_batch=lambda k: tick("search", k),
    )
    pairs = []
    for a, key in zip(q.tolist(), keys.tolist()):
        b = space.row_of[key]
        if a < b and float(np.dot(space.vecs[a].astype(np.float64), space.vecs[b])) >= em.threshold:
            pairs.append((space.first_task[a], space.first_task[b]))
    return pairs


def run_dedup(
    tasks: pa.Table,
    dedup: DedupParams,
    decon: DecontaminateParams,
    *,
    lance_dir: Path,
    cache_root: Path | None,
    progress: Progress | None = None,
    warn: Warn | None = None,
    turns: Turns | None = None,
) -> DedupResult:
    """`tasks` sorted by task_id; writes the LanceDB table into `lance_dir` when an embedding is used.
    The benchmarks are read first: one that cannot be read whole stops the run before any work
    (load_benchmarks; `warn` gets each file not read). `turns`: the rollouts' opening turns, compared
    with the benchmarks too (task_turns_v1); None: the instructions only."""
    tick = progress or (lambda what, n: None)
    benchmarks = load_benchmarks(decon, warn) if decon.benchmarks else ([], [])
    corpus = _corpus(tasks)
    counts: dict[str, Any] = {"tasks": len(corpus)}
    formulas = {"normalise": NORM_RULE, "clusters": CLUSTER_RULE}
    exact, distinct = _exact_pairs(corpus)
    counts["exact"] = {"pairs": len(exact), "distinct_texts": len(distinct)}
    edges: list[tuple[int, int]] = list(exact)

    hasher = WordHasher()
    sets: dict[int, np.ndarray] = {}  # the shingle sets kept: the LSH candidates' and the representatives'

    def shingles(i: int, keep: bool = True) -> np.ndarray:
        if i in sets:
            return sets[i]
        made = shingle_set(hasher.hashes(corpus.words(i)), dedup.minhash.ngram)
        if keep:
            sets[i] = made
        return made

    if dedup.minhash.enabled:
        mh = dedup.minhash
        formulas["minhash"] = f"{MINHASH_RULE} ngram {mh.ngram} bands {mh.bands} rows {mh.rows} seed {mh.seed}"
        nonempty, sig = _signatures(corpus, distinct, mh, hasher)
        verified, candidates = verified_pairs(sig, lambda k: shingles(nonempty[k]), mh.bands, mh.rows, mh.threshold)
        edges += [(nonempty[a], nonempty[b]) for a, b, _ in verified]
        counts["minhash"] = {"texts": len(nonempty), "candidates": candidates, "verified": len(verified)}
        tick("minhash", len(distinct))

    space, cache_stats = None, None
    if dedup.embedding.enabled or (decon.benchmarks and decon.embedding_threshold is not None):
        space = _embedding_space(corpus, dedup, lance_dir, cache_root, tick)
        formulas["embedding"] = f"{space.embedder.name} {space.embedder.fingerprint()}"
        counts["embedding"] = {"texts": len(space.shas), **space.plan.as_json()}
        cache_stats = vectors.CacheStats(**space.cache.stats.__dict__)  # the tasks' texts (not the benchmarks')
        if dedup.embedding.enabled:
            formulas["search"] = vectors.SEARCH_RULE
            semantic = _semantic_pairs(space, dedup, tick)
            counts["embedding"]["verified"] = len(semantic)
            edges += semantic

    members = clusters(len(corpus), edges, corpus.weight, corpus.task_id)
    task_clusters = _cluster_table(corpus, members, dedup, shingles, space)
    dropped = task_clusters.column("dropped").to_pylist()
    counts["clusters"] = {
        "clusters": len({m.cluster for m in members if m.size > 1}),
        "clustered_tasks": sum(1 for m in members if m.size > 1),
        "dropped_tasks": sum(dropped),
    }

    contamination, counts["contamination"] = _decontaminate(corpus, decon, benchmarks, hasher, space, tick, turns)
    if decon.benchmarks:
        formulas["decontaminate"] = f"{DECONTAMINATION_RULE} ngram {decon.ngram}"
        if turns is not None:
            formulas["decontaminate_turns"] = TURNS_RULE
    embeddings = vectors.vectors_table(space.shas, space.vecs) if space else None
    return DedupResult(
        task_clusters,
        contamination,
        embeddings,
        space.embedder.fingerprint() if space else None,
        cache_stats,
        counts,
        formulas,
    )


def _cluster_table(
    corpus: _Corpus,
    members: list,
    dedup: DedupParams,
    shingles: Callable[..., np.ndarray],  # (task, keep=True) -> its shingle set
    space: _Space | None,
) -> pa.Table:
    rows: dict[str, list] = {
        k: []
        for k in (
            "task_id",
            "source",
            "task",
            "cluster_id",
            "cluster_size",
            "method",
            "similarity",
            "jaccard",
            "cosine",
            "dropped",
        )
    }

    for m in members:
        i, rep = m.index, m.cluster
        jac = cos = sim = None
        if m.size == 1:
            method = "unique"
        elif i == rep:
            method = "representative"
        else:
            same_text = corpus.key[i] == corpus.key[rep]
            if dedup.minhash.enabled:  # the same text, the same shingles
                jac = 1.0 if same_text else round(jaccard(shingles(i, keep=False), shingles(rep)), 6)
            if space is not None and (c := space.cosine(i, rep)) is not None:
                cos = round(c, 6)
            if same_text:
                method, sim = "exact", 1.0
            elif jac is not None and jac >= dedup.minhash.threshold:
                method, sim = "minhash", jac
            elif cos is not None and dedup.embedding.enabled and cos >= dedup.embedding.threshold:
                method, sim = "embedding", cos
            else:
                method = "transitive"
        rows["task_id"].append(corpus.task_id[i])
        rows["source"].append(corpus.source[i])
        rows["task"].append(corpus.task[i])
        rows["cluster_id"].append(corpus.task_id[rep])
        rows["cluster_size"].append(m.size)
        rows["method"].append(method)
        rows["similarity"].append(sim)
        rows["jaccard"].append(jac)
        rows["cosine"].append(cos)
        rows["dropped"].append(i != rep and dedup.keep_for(corpus.source[i]) == "one")
    return pa.table(rows, schema=load_schema("task_clusters").arrow)


def load_benchmarks(decon: DecontaminateParams, warn: Warn | None = None) -> tuple[list[BenchmarkItem], list[Skipped]]:
    """Every benchmark's items, and every file or item not read, each passed to `warn` as one line.
    With `decontaminate.unreadable: fail` (the default) any such file stops the stage: a
    decontamination that misses a benchmark's items looks complete, and the filter would then keep
    copies of them; the user fixes the file, or chooses `skip`, which the manifest records."""
    items: list[BenchmarkItem] = []
    skipped: list[Skipped] = []
    for name in sorted(decon.benchmarks):
        b = decon.benchmarks[name]
        read = read_benchmark(
            name, Path(b.path), b.column, b.id, root=Path(decon.root), max_file_bytes=decon.max_file_bytes
        )
        items += read.items
        skipped += read.skipped
    for s in skipped:
        (warn or (lambda line: None))(s.line())
    if skipped and decon.unreadable == "fail":
        raise BadInput(_unreadable_message(skipped))
    return items, skipped


def _unreadable_message(skipped: list[Skipped]) -> str:
    first = skipped[0]
    files = "1 benchmark file" if len(skipped) == 1 else f"{len(skipped)} benchmark files"
    return (
        f"decontaminate: {files} could not be read ({first.benchmark}: {first.path}, {first.reason}"
        f"{'' if len(skipped) == 1 else ', …'}); decontaminating without them would miss their items: "
        f"fix them, or set decontaminate.unreadable: skip to go on without them"
    )


def skipped_counts(skipped: list[Skipped]) -> dict[str, int]:
    """Files (or lines, values) not read, by reason."""
    counts: dict[str, int] = {}
    for s in skipped:
        counts[s.reason] = counts.get(s.reason, 0) + 1
    return dict(sorted(counts.items()))


def _decontaminate(
    corpus: _Corpus,
    decon: DecontaminateParams,
    benchmarks: tuple[list[BenchmarkItem], list[Skipped]],
    hasher: WordHasher,
    space: _Space | None,
    tick: Progress,
    turns: Turns | None = None,
) -> tuple[pa.Table, dict[str, Any]]:
    schema = load_schema("contamination").arrow
    if not decon.benchmarks:
        return schema.empty_table(), {"benchmarks": {}, "items": 0, "tasks": 0}
    items, skipped = benchmarks
    index = NgramIndex(items, decon.ngram, decon.ngram_min_share, hasher)
    found: dict[int, Contamination] = {}
    for t, text in enumerate(corpus.texts()):
        if (c := index.match(t, words(text))) is not None:
            found[t] = c
    tick("decontaminate", len(corpus))
    by_embedding = 0
    if decon.embedding_threshold is not None and space is not None and len(space.vecs) and items:
        qv = space.cache.vectors([space.embedder.prepare(it.text) for it in items])
        ok = np.flatnonzero(np.linalg.norm(qv, axis=1) > 0)
        q, keys, _ = vectors.range_search(
            space.open(), qv[ok], 1.0 - decon.embedding_threshold + 1e-4, len(space.vecs), space.plan
        )
        best: dict[int, tuple[float, int]] = {}  # table row -> (cosine, item): the most similar item
        for a, key in zip(q.tolist(), keys.tolist()):
            row, item = space.row_of[key], int(ok[a])
            cos = float(np.dot(qv[item].astype(np.float64), space.vecs[row]))
            if cos >= decon.embedding_threshold and (row not in best or (-cos, item) < (-best[row][0], best[row][1])):
                best[row] = (cos, item)
        for t, row in enumerate(space.row_of_task.tolist()):
            if t not in found and row in best:
                cos, item = best[row]
                found[t] = Contamination(t, item, "embedding", cos, None)
                by_embedding += 1
    matched = {corpus.task_id[t] for t in found}
    by_turns, scanned = _turn_matches(index, matched, turns) if turns is not None else ({}, {})
    table = as_table(list(found.values()), corpus.task_id, corpus.source, corpus.task, items, schema, by_turns.values())
    per_benchmark: dict[str, int] = {name: 0 for name in sorted(decon.benchmarks)}
    for name in table.column("benchmark").to_pylist():
        per_benchmark[name] += 1
    return table, {
        "benchmarks": per_benchmark,
        "items": len(items),
        "tasks": table.num_rows,
        "by_embedding": by_embedding,
        "by_turns": len(by_turns),  # tasks found only through a rollout's opening turns (task_turns_v1)
        "turns": scanned,
        "skipped": skipped_counts(skipped),  # benchmark files (lines, values) not read, by reason
    }


def _turn_matches(index: NgramIndex, matched: set[str], turns: Turns) -> tuple[dict[str, TurnMatch], dict[str, int]]:
    """Rule task_turns_v1: the tasks not matched by their instruction that a rollout's opening turns
    match (task_turn_texts), each with its smallest such rollout id (any batch order gives the same).
    Each distinct text is compared once (a system prompt shared by every rollout, upsampled copies)."""
    seen: dict[bytes, Contamination | None] = {}
    out: dict[str, TurnMatch] = {}
    rollouts = 0
    for batch in turns():
        cols = [batch.column(name).to_pylist() for name in ("task_id", "source", "task", "trajectory_id", "turns")]
        for task_id, source, task, trajectory_id, texts in zip(*cols):
            if task_id in matched:
                continue
            rollouts += 1
            best = None
            for text in task_turn_texts([t or "" for t in texts or []]):
                key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
                if key not in seen:
                    seen[key] = index.match(0, words(text))
                c = seen[key]
                if c is not None and (best is None or c.similarity > best.similarity):
                    best = c
            if best is not None and (task_id not in out or trajectory_id < out[task_id].trajectory_id):
                out[task_id] = TurnMatch(task_id, source, task, trajectory_id, best)
    return out, {"rollouts": rollouts, "texts": len(seen)}
