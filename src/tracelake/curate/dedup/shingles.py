"""Normalised words and word n-gram hashes: what MinHash and the n-gram overlap compare.

Normalisation (rule text_norm_v1): lowercase, every run of characters that are not letters or
digits becomes one space. So whitespace, case and punctuation changes do not change the words.

A word hashes to 64 bits with BLAKE2b (keyed by nothing: the same word, the same hash, on every
machine and in every process); an n-gram of words hashes by a polynomial over its words' hashes
followed by a 64-bit finaliser, vectorised with NumPy. Python's own `hash` is salted per process,
so it is never used.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

NORM_RULE = "text_norm_v1"
_NOT_WORD = re.compile(r"[\W_]+", re.UNICODE)
_MULT = np.uint64(0x9E3779B97F4A7C15)  # odd constants of splitmix64
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def normalize(text: str) -> str:
    """text_norm_v1: lowercase, non-alphanumeric runs to one space, stripped."""
    return _NOT_WORD.sub(" ", text.lower()).strip()


def words(text: str) -> list[str]:
    normal = normalize(text)
    return normal.split(" ") if normal else []


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: spreads every input bit over the output (uint64 in, uint64 out)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * _MIX1
        x = (x ^ (x >> np.uint64(27))) * _MIX2
        return x ^ (x >> np.uint64(31))


class WordHasher:
    """Word -> 64-bit hash, memoised (a corpus repeats its vocabulary: each word is hashed once)."""

    def __init__(self) -> None:
        self._known: dict[str, int] = {}

    def hashes(self, ws: list[str]) -> np.ndarray:
        known = self._known
        out = np.empty(len(ws), dtype=np.uint64)
        for i, w in enumerate(ws):
            h = known.get(w)
            if h is None:
                h = known[w] = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little")
            out[i] = h
        return out


def ngram_hashes(word_hashes: np.ndarray, n: int) -> np.ndarray:
    """The hashes of every run of n consecutive words, in text order. A text shorter than n words
    gives one n-gram of all its words (so short texts still compare); an empty text gives none."""
    k = len(word_hashes)
    if k == 0:
        return np.empty(0, dtype=np.uint64)
    n = min(n, k)
    with np.errstate(over="ignore"):
        acc = np.zeros(k - n + 1, dtype=np.uint64)
        for j in range(n):
            acc = acc * _MULT + word_hashes[j : k - n + 1 + j]
    return mix64(acc)


def shingle_set(word_hashes: np.ndarray, n: int) -> np.ndarray:
    """The distinct n-gram hashes of a text, sorted: its shingle set."""
    return np.unique(ngram_hashes(word_hashes, n))


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """True Jaccard similarity of two sorted shingle sets."""
    if len(a) == 0 and len(b) == 0:
        return 1.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)
