"""Embedders: text -> unit vector, for the semantic near-duplicate search and decontamination.

`transformers_mean_v1` (dedup.embedding.embedder: transformers): a transformers encoder (or a
sentence-transformers model) from a local directory, mean-pooled; it runs in the environment that
holds torch, by encode_worker.py. Its fingerprint covers the model's files.

The default, `hashed_char_ngrams_v1`, needs no model and no network: the normalised text's
character n-grams (3, 4 and 5 bytes of UTF-8 by default) are hashed into `dim` signed buckets
(the hashing trick), counts are damped by log1p, and the vector is scaled to unit length. Two texts
that share most of their n-grams (reordered clauses, renamed files, whitespace and case changes)
point the same way; it knows nothing of meaning, so real paraphrases in other words are missed.

Every embedder names itself by a fingerprint of everything that changes its vectors, so the
embedding cache (vectors.py) keys vectors by (fingerprint, sha256 of the text it embeds).
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np
import orjson

from tracelake.core.envs import ENVIRONMENTS, env_dir, env_program
from tracelake.core.errors import BadInput, BadParams
from tracelake.core.hashing import content_id, model_fingerprint
from tracelake.curate.dedup.shingles import _MULT, mix64, normalize
from tracelake.curate.params import EmbeddingParams

ENCODE_WORKER = Path(__file__).with_name("encode_worker.py")

_CHUNK_BYTES = 4 << 20  # text bytes hashed at a time (~32 MB per temporary uint64 array)


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
        return content_id("embedder", {"name": self.name, "dim": self.dim, "ngrams": list(self.ngrams)}, n_hex=16)

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
        doc[np.cumsum(lengths + 1) - 1] = -1  # the separator after each text belongs to none
        counts = np.zeros(len(texts) * self.dim, dtype=np.float64)
        with np.errstate(over="ignore"):
            for n in self.ngrams:
                m = len(data) - n + 1
                if m <= 0:
                    continue
                h = np.full(m, np.uint64(n), dtype=np.uint64)
                for j in range(n):
                    h = h * _MULT + data[j : j + m] + np.uint64(1)
                h = mix64(h)
                ok = (doc[:m] >= 0) & (doc[:m] == doc[n - 1 : n - 1 + m])
                h, d = h[ok], doc[:m][ok]
                bucket = (h % np.uint64(self.dim)).astype(np.int64)
                sign = np.where((h >> np.uint64(63)) == 1, -1.0, 1.0)
                counts += np.bincount(d * self.dim + bucket, weights=sign, minlength=len(counts))
        vectors = counts.reshape(len(texts), self.dim)
        vectors = np.sign(vectors) * np.log1p(np.abs(vectors))
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return (vectors / np.where(norms == 0, 1.0, norms)).astype(np.float32)


class TransformersEmbedder:
    """A transformers encoder from a local directory, run by encode_worker.py in the environment that
    holds torch (default: the training environment). Vectors are rounded to 5 decimals and rescaled
    to unit length, so that float noise from the thread count (matrix products sum in a different
    order) does not reach the table; a value within 1e-6 of a rounding boundary may still differ."""

    name = "transformers_mean_v1"

    def __init__(self, model_dir: str, python: str | None = None, batch_size: int = 32, max_length: int = 512):
        self.dir = Path(model_dir)
        if not (self.dir / "config.json").is_file():
            raise BadParams(f"params.yaml: dedup.embedding.model {model_dir} is not a model directory (no config.json)")
        config = orjson.loads((self.dir / "config.json").read_bytes())
        dim = config.get("hidden_size") or config.get("d_model") or config.get("dim")
        if not isinstance(dim, int):
            raise BadParams(f"params.yaml: dedup.embedding.model {model_dir}: config.json names no hidden_size")
        self.dim, self.batch_size, self.max_length = dim, batch_size, max_length
        self.python = Path(python) if python else env_program("training", "python")
        if self.python is None or not self.python.is_file():
            variable, _, setup = ENVIRONMENTS["training"]
            raise BadParams(
                f"dedup.embedding.embedder transformers: no {python or env_dir('training') / 'bin/python'} "
                f"(set dedup.embedding.python to an interpreter with torch and transformers, or "
                f"${variable}; `{setup}` makes one)"
            )
        self._fingerprint = content_id(
            "embedder", {"name": self.name, "model": model_fingerprint(self.dir), "max_length": max_length}, n_hex=16
        )

    def fingerprint(self) -> str:
        return self._fingerprint

    def prepare(self, text: str) -> str:
        return text.strip()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with tempfile.TemporaryDirectory(prefix="tracelake-encode-") as tmp:
            inputs, output = Path(tmp) / "texts.jsonl", Path(tmp) / "vectors.npy"
            inputs.write_bytes(b"".join(orjson.dumps(t) + b"\n" for t in texts))
            proc = subprocess.run(
                [
                    str(self.python),
                    str(ENCODE_WORKER),
                    "--model",
                    str(self.dir),
                    "--texts",
                    str(inputs),
                    "--out",
                    str(output),
                    "--batch-size",
                    str(self.batch_size),
                    "--max-length",
                    str(self.max_length),
                ],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0 or not output.is_file():
                last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
                raise BadInput(f"dedup: the encoder {self.dir} failed: {last}")
            vectors = np.load(output).astype(np.float64)
        if vectors.shape != (len(texts), self.dim):
            raise BadInput(
                f"dedup: the encoder {self.dir} returned {vectors.shape}, expected ({len(texts)}, {self.dim})"
            )
        vectors = np.round(vectors, 5)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return (vectors / np.where(norms == 0, 1.0, norms)).astype(np.float32)


def make_embedder(params: EmbeddingParams) -> Embedder:
    if params.embedder == HashedNgramEmbedder.name:
        return HashedNgramEmbedder(params.dim, params.ngrams)
    return TransformersEmbedder(params.model, params.python, params.batch_size, params.max_length)
