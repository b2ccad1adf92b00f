"""Embedders: text -> unit vector, for the semantic near-duplicate search and decontamination.

The default, `hashed_char_ngrams_v1`, needs no model and no network: the normalised text's
character n-grams (3, 4 and 5 bytes of UTF-8 by default) are hashed into `dim` signed buckets
(the hashing trick), counts are damped by log1p, and the vector is scaled to unit length. Two texts
that share most of their n-grams (reordered clauses, renamed files, whitespace and case changes)
point the same way; it knows nothing of meaning, so real paraphrases in other words are missed.

Every embedder names itself by a fingerprint of everything that changes its vectors, so the
embedding cache (vectors.py) keys vectors by (fingerprint, sha256 of the text it embeds).
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from tracelake.core.hashing import content_id
from tracelake.curate.dedup.shingles import _MULT, mix64, normalize

_CHUNK_BYTES = 4 << 20     # text bytes hashed at a time (~32 MB per temporary uint64 array)


class Embedder(Protocol):
    name: str
    dim: int

    def fingerprint(self) -> str: ...

    def prepare(self, text: str) -> str:
        """The text as the embedder reads it (its sha256 is the cache key)."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32 unit vectors of prepared texts (an empty text: all zeros)."""


class HashedNgramEmbedder:
    name = "hashed_char_ngrams_v1"

    def __init__(self, dim: int = 256, ngrams: Sequence[int] = (3, 4, 5)):
        self.dim = int(dim)
        self.ngrams = tuple(int(n) for n in ngrams)

    def fingerprint(self) -> str:
        return content_id("embedder", {"name": self.name, "dim": self.dim, "ngrams": list(self.ngrams)},
                          n_hex=16)

    def prepare(self, text: str) -> str:
        return normalize(text)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        lo = 0
        while lo < len(texts):
            hi, size = lo, 0
            while hi < len(texts) and (hi == lo or size < _CHUNK_BYTES):
                size += len(texts[hi]) + 1
                hi += 1
            out[lo:hi] = self._embed_chunk(texts[lo:hi])
            lo = hi
        return out

    def _embed_chunk(self, texts: Sequence[str]) -> np.ndarray:
        encoded = [t.encode() for t in texts]
        lengths = np.array([len(e) for e in encoded], dtype=np.int64)
        data = np.frombuffer(b"\0".join(encoded) + b"\0", dtype=np.uint8).astype(np.uint64)
        doc = np.repeat(np.arange(len(texts), dtype=np.int64), lengths + 1)
        doc[np.cumsum(lengths + 1) - 1] = -1           # the separator after each text belongs to none
        counts = np.zeros(len(texts) * self.dim, dtype=np.float64)
        with np.errstate(over="ignore"):
            for n in self.ngrams:
                m = len(data) - n + 1
                if m <= 0:
                    continue
                h = np.full(m, np.uint64(n), dtype=np.uint64)
                for j in range(n):
                    h = h * _MULT + data[j:j + m] + np.uint64(1)
                h = mix64(h)
                ok = (doc[:m] >= 0) & (doc[:m] == doc[n - 1:n - 1 + m])
                h, d = h[ok], doc[:m][ok]
                bucket = (h % np.uint64(self.dim)).astype(np.int64)
                sign = np.where((h >> np.uint64(63)) == 1, -1.0, 1.0)
                counts += np.bincount(d * self.dim + bucket, weights=sign, minlength=len(counts))
        vectors = counts.reshape(len(texts), self.dim)
        vectors = np.sign(vectors) * np.log1p(np.abs(vectors))
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return (vectors / np.where(norms == 0, 1.0, norms)).astype(np.float32)


def make_embedder(name: str, dim: int, ngrams: Sequence[int]) -> Embedder:
    if name == HashedNgramEmbedder.name:
        return HashedNgramEmbedder(dim, ngrams)
    raise ValueError(f"unknown embedder {name!r}")
