"""tiktoken's BPE counting (and encoding) for the tokenizers whose results it reproduces exactly.

`TokenCounter` (token_count.py) encodes the segments its cache lacks with `engine(tokenizer)`: a
`TiktokenCounts` where the tokenizer qualifies, else None and the reason (it keeps `tokenizers`'
`encode_batch_fast`). On segments (no added tokens in them) tiktoken gives the same count as
`len(tokenizer.encode(segment, add_special_tokens=False))` with about a tenth of the CPU time
(benchmarks/bench_encoders.py), when:

- the segment rule is `split` (token_count.SegmentRule): a BPE without dropout, NFC or no normalizer,
  a byte-level pre-tokenizer whose regex (`split_regex`) tiktoken runs as its own;
- the BPE has no subword prefix or end-of-word suffix; every byte is a token (so no unknown token
  or byte fallback ever applies); each merge joins two byte-level tokens and no two merges make the
  same token; with `ignore_merges` (a word that is a token is that token), every token is a byte, a
  merge's result or an added token;
- each merge's token, encoded alone by the tokenizer's own BPE, is that one token;
- no truncation or padding is set.

Why the counts agree: tiktoken merges the neighbours whose concatenation has the lowest rank, a BPE
the pair that comes first in its merge list. Each merge's token gets rank 256 + the merge's index
(one merge per token), so every pair the BPE may merge tiktoken merges too, in the same order. They
could part only where tiktoken joins neighbours x, y into a token t whose merge is not (x, y). But x
and y were built by merges inside t's span alone, in the order the BPE makes them on t by itself;
there it would reach x, y and stop (no merge joins them) short of t, which the check above rules
out. A word that is a token tiktoken takes whole: by the same check the BPE ends there too.

The same argument gives the ids, not only their number: tiktoken's tokens are the BPE's, named by
rank. `TiktokenCounts.ids` maps each rank back to the tokenizer's vocabulary id (a byte's token, or
the merge's token), so tokens/token_ids.py encodes segments with it too.

The text is normalized by the tokenizer's own NFC (where it has one; ASCII text is left as it is),
then split by tiktoken's regex engine: tests/tokens/test_fast_bpe.py checks it classes every code point
as the tokenizers' one does, and compares counts on random and real text.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import tiktoken
from tokenizers import Tokenizer, models

from tracelake.core.executor import cpu_count


def byte_level_alphabet() -> dict[str, int]:
    """The character that stands for each byte in a byte-level vocabulary, mapped to its byte: the
    printable Latin-1 bytes stand for themselves, the others for 256, 257, ... in byte order."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [b for b in range(256) if b not in printable]
    return {chr(b): b for b in printable} | {chr(256 + i): b for i, b in enumerate(others)}


class TiktokenCounts:
    """Token counts of segments through a tiktoken encoding built from a tokenizer.json BPE."""

    name = "tiktoken"

    def __init__(
        self,
        ranks: dict[bytes, int],
        pattern: str,
        normalizer: Any = None,
        threads: int | None = None,
        vocab_ids: np.ndarray | None = None,
    ):
        self._bpe = tiktoken.Encoding("tracelake", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})._core_bpe
        self._normalize = normalizer.normalize_str if normalizer is not None else None
        self.threads = threads or cpu_count()
        self._vocab_ids = vocab_ids  # rank -> the tokenizer's id (uint32), where `ids` is wanted

    def ids(self, texts: Sequence[str]) -> list[np.ndarray]:
        """The tokenizer's ids of each text (uint32), as `tokenizer.encode(t, add_special_tokens=False).ids`
        gives them for a segment (no added tokens in it)."""
        if self._vocab_ids is None:
            raise ValueError("this tiktoken encoding was built without the vocabulary's ids")
        return self._threaded(self._ids, texts)

    def _ids(self, texts: Sequence[str]) -> list[np.ndarray]:
        encode, normalize, vocab = self._bpe.encode_ordinary, self._normalize, self._vocab_ids
        if normalize is not None:
            texts = [t if t.isascii() else normalize(t) for t in texts]
        return [vocab[np.array(encode(t), dtype=np.int64)] for t in texts]

    def _threaded(self, work: Callable[[Sequence[str]], list], texts: Sequence[str]) -> list:
        n = min(self.threads, len(texts))
        if n <= 1:
            return work(texts)
        out: list = [None] * len(texts)
        with ThreadPoolExecutor(n) as pool:  # tiktoken releases the GIL while it encodes
            for i, part in enumerate(pool.map(work, [texts[i::n] for i in range(n)])):
                out[i::n] = part
        return out

    def counts(self, texts: Sequence[str]) -> list[int]:
        """The number of tokens of each text."""
        return self._threaded(self._counts, texts)

    def _counts(self, texts: Sequence[str]) -> list[int]:
        encode, normalize = self._bpe.encode_ordinary, self._normalize
        if normalize is None:
            return [len(encode(t)) for t in texts]
        return [len(encode(t if t.isascii() else normalize(t))) for t in texts]


_BUILT: dict[bytes, tuple[TiktokenCounts | None, str]] = {}  # engine's answers in this process, by tokenizer


def engine(
    tokenizer: Tokenizer, split_pattern: Callable[[dict[str, Any]], str | None]
) -> tuple[TiktokenCounts | None, str]:
    """tiktoken counting for `tokenizer` and "", or None and why it does not qualify (asked once per
    tokenizer content in a process)."""
    if not hasattr(tokenizer, "to_str"):
        return None, "not a tokenizers Tokenizer"
    text = tokenizer.to_str()
    key = hashlib.blake2b(text.encode(), digest_size=16).digest()
    if key not in _BUILT:
        config = json.loads(text)
        _BUILT[key] = _build(config, tokenizer.normalizer, split_pattern(config))
    return _BUILT[key]


def _build(config: dict[str, Any], normalizer: Any, pattern: str | None) -> tuple[TiktokenCounts | None, str]:
    if config.get("truncation") or config.get("padding"):
        return None, "truncation or padding is set"
    if pattern is None:
        return None, "not a byte-level BPE split by a known regex (segment rule whole)"
    model = config["model"]
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return None, "the BPE has a subword prefix or an end-of-word suffix"
    alphabet = byte_level_alphabet()
    vocab: dict[str, int] = model["vocab"]
    if any(c not in vocab for c in alphabet):
        return None, "a byte is not a token"
    pairs = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    try:
        merged = [a + b for a, b in pairs]
        keys = [bytes(map(alphabet.__getitem__, token)) for token in merged]
    except (ValueError, KeyError):
        return None, "a merge is not two byte-level tokens"
    ranks = {bytes([b]): b for b in range(256)} | {key: 256 + i for i, key in enumerate(keys)}
    if len(ranks) != 256 + len(keys):
        return None, "two merges make the same token"
    if model.get("ignore_merges"):
        added = {t["content"] for t in config.get("added_tokens") or []}
        if any(t not in added and t not in alphabet for t in set(vocab) - set(merged)):
            return None, "ignore_merges with a token that no merge makes"
    own = models.BPE(vocab, pairs, ignore_merges=False)  # the tokenizer's BPE, merges always applied
    if any(len(own.tokenize(t)) != 1 for t in merged):
        return None, "a merge's token does not encode to itself"
    by_rank = [*sorted(alphabet, key=alphabet.__getitem__), *merged]  # rank b: byte b; 256 + i: merge i
    if any(t not in vocab for t in by_rank):
        return None, "a merge's token is not in the vocabulary"
    vocab_ids = np.array([vocab[t] for t in by_rank], dtype=np.int64)
    return TiktokenCounts(
        ranks, pattern, normalizer if config.get("normalizer") else None, vocab_ids=vocab_ids.astype(np.uint32)
    ), ""
