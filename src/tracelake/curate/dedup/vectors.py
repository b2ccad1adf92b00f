"""Vectors: the embedding cache, the LanceDB table the search runs on, and the range search over it.

Cache (`dedup.cache`, default .tracelake/cache/embeddings/<embedder fingerprint>/part-*.parquet):
(text_sha256, vector) rows, one Parquet part per run that embedded something new, named by its
content and renamed into place whole. A vector is computed once per (embedder, text), ever: adding a
source embeds only its new texts.

Table (a temporary directory per run, stages/dedup.py): a LanceDB database with one table, `texts`: one row per distinct text
as the embedder reads it (text_sha256, vector), sorted by text_sha256. LanceDB's own files carry
random names and timestamps, so the table is identified by its content (manifest.json: the version
id hashes the rows), not its bytes.

Search (rule range_search_v1): every text asks the table for its neighbours within cosine
distance `1 - threshold` (LanceDB `distance_range`). Up to `exact_below` rows the search is exact
(a flat scan). Above, an IVF_FLAT index serves it: IVF partitions the vectors by their nearest
centroid and a query scans the `nprobes` nearest partitions, with exact distances. The centroids
are computed here, by a fixed number of k-means iterations from evenly spaced starting rows
(LanceDB's own training draws random samples: different partitions, so different neighbours, on
every run), so the index and the pairs it finds are the same on every run and at any thread count.
IVF_PQ is not used: its compressed distances are what `distance_range` filters on (0.26 for a
vector against itself, measured), so a range search through it misses near-identical pairs.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracelake.curate.dedup.embed import Embedder

SEARCH_RULE = "range_search_v1"
TABLE = "texts"
_QUERY_BATCH = 1024
_KMEANS_ITERATIONS = 12
_KMEANS_SAMPLE_PER_CENTROID = 64


def text_sha(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def _vector_type(dim: int) -> pa.DataType:
    return pa.list_(pa.float32(), dim)


def _schema(dim: int) -> pa.Schema:
    return pa.schema(
        [pa.field("text_sha256", pa.binary(32), nullable=False), pa.field("vector", _vector_type(dim), nullable=False)]
    )


def vectors_table(shas: Sequence[bytes], vectors: np.ndarray) -> pa.Table:
    dim = vectors.shape[1]
    flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).ravel())
    return pa.table([pa.array(shas, pa.binary(32)), pa.FixedSizeListArray.from_arrays(flat, dim)], schema=_schema(dim))


@dataclass
class CacheStats:
    cached: int = 0
    embedded: int = 0

    def summary(self) -> str:
        return f"{self.embedded} embedded, {self.cached} cached"


class EmbeddingCache:
    """Vectors by (embedder fingerprint, text sha256); `root` None: no cache (embed everything)."""

    def __init__(self, root: Path | None, embedder: Embedder):
        self.embedder = embedder
        self.dir = Path(root) / embedder.fingerprint() if root else None
        self.stats = CacheStats()

    def _known(self) -> pa.Table:
        parts = sorted(self.dir.glob("part-*.parquet")) if self.dir and self.dir.is_dir() else []
        if not parts:
            return _schema(self.embedder.dim).empty_table()
        return pa.concat_tables([pq.read_table(p) for p in parts]).cast(_schema(self.embedder.dim))

    def vectors(self, texts: Sequence[str], on_embedded: Callable[[int], None] | None = None) -> np.ndarray:
        """(len(texts), dim) vectors of prepared texts, embedding only those the cache lacks."""
        return self.vectors_of([text_sha(t) for t in texts], lambda rows: [texts[k] for k in rows], on_embedded)

    def vectors_of(
        self,
        shas: Sequence[bytes],
        texts_at: Callable[[list[int]], list[str]],
        on_embedded: Callable[[int], None] | None = None,
    ) -> np.ndarray:
        """(len(shas), dim) vectors of the prepared texts whose sha256 are `shas`. Only the texts the
        cache lacks are asked of `texts_at` (positions in `shas`, a batch at a time), so a caller
        need not hold every text at once."""
        known = self._known()
        at = pc.index_in(pa.array(shas, pa.binary(32)), value_set=known.column("text_sha256"))
        missing = np.flatnonzero(at.is_null().to_numpy(zero_copy_only=False))
        found = ~np.isin(np.arange(len(shas)), missing)
        out = np.zeros((len(shas), self.embedder.dim), dtype=np.float32)
        if found.any():
            rows = known.column("vector").take(at.filter(pa.array(found)))
            out[found] = _as_matrix(rows, self.embedder.dim)
        del known
        if len(missing):
            first: dict[bytes, int] = {}  # a text repeated in `shas` is embedded once
            for i in missing.tolist():
                first.setdefault(shas[i], i)
            fresh_shas = list(first)
            fresh = np.zeros((len(fresh_shas), self.embedder.dim), dtype=np.float32)
            step = 4096
            for lo in range(0, len(fresh_shas), step):
                batch = fresh_shas[lo : lo + step]
                fresh[lo : lo + len(batch)] = self.embedder.embed(texts_at([first[s] for s in batch]))
                if on_embedded:
                    on_embedded(len(batch))
            position = {s: k for k, s in enumerate(fresh_shas)}
            out[missing] = fresh[[position[shas[i]] for i in missing]]
            self._save(vectors_table(fresh_shas, fresh))
        self.stats.cached += len(shas) - len(missing)
        self.stats.embedded += len(missing)
        return out

    def _save(self, table: pa.Table) -> None:
        if self.dir is None:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        order = pc.sort_indices(table, [("text_sha256", "ascending")])
        table = table.take(order)
        final = self.dir / f"part-{vectors_digest(table)[:16]}.parquet"
        tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
        pq.write_table(table, tmp, compression="zstd")
        tmp.replace(final)


def _as_matrix(column: pa.ChunkedArray | pa.Array, dim: int) -> np.ndarray:
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return array.values.to_numpy(zero_copy_only=False).reshape(-1, dim).astype(np.float32, copy=False)


@dataclass(frozen=True)
class SearchPlan:
    index: str  # "flat" (exact) or "ivf_flat"
    partitions: int
    nprobes: int

    def as_json(self) -> dict[str, Any]:
        return {"index": self.index, "partitions": self.partitions, "nprobes": self.nprobes}


def plan_search(rows: int, exact_below: int, nprobes: int) -> SearchPlan:
    if rows < exact_below:
        return SearchPlan("flat", 0, 0)
    partitions = max(2, int(round(np.sqrt(rows))))
    return SearchPlan("ivf_flat", partitions, min(nprobes, partitions))


def kmeans_centroids(vectors: np.ndarray, k: int) -> np.ndarray:
    """Unit centroids by spherical k-means: fixed start (evenly spaced rows), fixed iterations, on an
    evenly spaced sample. Same input, same centroids."""
    n = len(vectors)
    sample = vectors[np.linspace(0, n - 1, min(n, k * _KMEANS_SAMPLE_PER_CENTROID)).astype(np.int64)]
    centroids = vectors[np.linspace(0, n - 1, k).astype(np.int64)].astype(np.float64)
    for _ in range(_KMEANS_ITERATIONS):
        nearest = np.argmax(sample @ centroids.T.astype(np.float32), axis=1)
        sums = np.zeros_like(centroids)
        np.add.at(sums, nearest, sample)
        used = np.bincount(nearest, minlength=k) > 0
        centroids[used] = sums[used]
        centroids /= np.maximum(np.linalg.norm(centroids, axis=1, keepdims=True), 1e-12)
    return centroids.astype(np.float32)


def write_table(directory: Path, table: pa.Table, plan: SearchPlan) -> None:
    """The LanceDB database at `directory` with table `texts` (rows sorted by the caller), indexed as
    `plan` says."""
    import lance

    # lance's own writer, where LanceDB opens it (<directory>/<table>.lance): LanceDB's create_table
    # held several times the table's size more at its peak
    lance.write_dataset(table, Path(directory) / f"{TABLE}.lance")
    if plan.index == "ivf_flat":
        centroids = kmeans_centroids(
            _as_matrix(table.column("vector"), table.schema.field("vector").type.list_size), plan.partitions
        )
        lance.dataset(str(Path(directory) / f"{TABLE}.lance")).create_index(
            "vector",
            "IVF_FLAT",
            metric="cosine",
            num_partitions=plan.partitions,
            ivf_centroids=centroids,
            index_uuid=str(uuid.UUID(vectors_digest(table)[:32])),
        )


def vectors_digest(table: pa.Table) -> str:
    """sha256 over the rows of a (text_sha256, vector) table, in order: its content's name."""
    h = hashlib.sha256(b"vectors_v1\0")
    h.update(str(table.schema.field("vector").type.list_size).encode() + b"\0")
    for batch in table.to_batches():
        h.update(
            batch.column(0).buffers()[1].to_pybytes()[: 32 * batch.num_rows]
            if batch.column(0).offset == 0
            else b"".join(batch.column(0).to_pylist())
        )
        h.update(_as_matrix(batch.column(1), table.schema.field("vector").type.list_size).astype("<f4").tobytes())
    return h.hexdigest()


def open_table(directory: Path) -> Any:
    import lancedb

    return lancedb.connect(str(directory)).open_table(TABLE)


def range_search(
    table: Any,
    queries: np.ndarray,
    max_distance: float,
    limit: int,
    plan: SearchPlan,
    on_batch: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each query row q: the table rows within cosine distance `max_distance` (at most `limit`
    nearest). Returns (query index, text_sha256 of the row, cosine similarity) arrays."""
    qs, keys, sims = [], [], []
    for lo in range(0, len(queries), _QUERY_BATCH):
        batch = queries[lo : lo + _QUERY_BATCH]
        search = (
            table.search(batch if len(batch) > 1 else batch[0])
            .distance_type("cosine")
            .distance_range(upper_bound=max_distance)
            .select(["text_sha256"])
            .limit(limit)
        )
        if plan.index == "ivf_flat":
            search = search.nprobes(plan.nprobes)
        else:
            search = search.bypass_vector_index()
        found = search.to_arrow()
        q = (
            found.column("query_index").to_numpy()
            if "query_index" in found.column_names
            else np.zeros(found.num_rows, dtype=np.int64)
        )
        qs.append(q.astype(np.int64) + lo)
        keys.extend(found.column("text_sha256").to_pylist())
        sims.append(1.0 - found.column("_distance").to_numpy(zero_copy_only=False).astype(np.float64))
        if on_batch:
            on_batch(len(batch))
    if not qs:
        return np.empty(0, np.int64), np.empty(0, object), np.empty(0, np.float64)
    return np.concatenate(qs), np.array(keys, dtype=object), np.concatenate(sims)
