"""tokens/token_ids.py with Qwen3's real tokenizer: a text's ids are its segments' ids and its added
tokens' ids in order, equal to `tokenizer.encode(text, add_special_tokens=False).ids` (tiktoken and
`tokenizers` alike); the segment ids cache answers a second run without encoding, from disk; its
small parts are merged."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from tracelake.tokens import token_ids
from tracelake.tokens.token_count import CHUNK_CHARS, segment_key
from tracelake.tokens.token_ids import SegmentIdsCache, TokenIds
from tracelake.tokens.tokenizer import load_tokenizer

from ..helpers import FIXTURES, need

QWEN3 = FIXTURES / "qwen3-tokenizer"


def tricky_texts() -> list[str]:
    """Texts around what cuts a text: added tokens (special or not, adjacent, at the ends), newlines
    at and around the safe cuts, long lines past CHUNK_CHARS, Unicode that NFC changes, braces."""
    rng = random.Random(7)
    words = ["ls", " -la", "\n", "\n\n", "  ", "é", "e\u0301", "Å", "中文", "🙂", "{}", "{x}", "\t", "\r\n", "1234567"]
    specials = ["<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<|endoftext|>"]
    texts = [
        "",
        "<|im_start|>",
        "<|im_start|><|im_end|>",
        "<think>\n\n</think>\n\n",
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
        "a<think>b</think>c",
        "x\n" * (CHUNK_CHARS + 10),
        "word " * (3 * CHUNK_CHARS // 5) + "\nnext\n" + "é" * CHUNK_CHARS,
        "\n" * (CHUNK_CHARS + 3) + "end",
        "Cafe\u0301 " * 3000 + "\n" + "x",
    ]
    for _ in range(60):
        parts = [rng.choice(words + specials) for _ in range(rng.randint(1, 400))]
        texts.append("".join(parts))
    return texts


def real_texts() -> list[str]:
    rows = json.loads(need(FIXTURES / "otagent" / "sample_raw.json").read_text())
    return [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for r in rows for m in r["conversations"]]


@pytest.mark.parametrize("fast", [True, False], ids=["tiktoken", "tokenizers"])
def test_ids_are_the_whole_encoding(tmp_path, fast):
    tokenizer = load_tokenizer(need(QWEN3))
    texts = tricky_texts() + real_texts()
    with TokenIds.open(QWEN3, tmp_path, fast=fast) as encoder:
        got = encoder.encode(texts)
    assert encoder.stats.engine.startswith("tiktoken" if fast else "tokenizers")
    assert encoder.stats.segments > len(texts)  # cut at added tokens and safe newlines
    expected = [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
    for k, (ids, want) in enumerate(zip(got, expected)):
        assert ids.dtype == np.uint32
        assert ids.tolist() == want, f"text {k}"
    # a second run: every segment from the disk cache, the same ids
    with TokenIds.open(QWEN3, tmp_path, fast=fast) as again:
        assert [a.tolist() for a in again.encode(texts)] == expected
    assert again.stats.encoded == 0 and again.stats.cached == again.stats.segments


def test_items_are_segments_and_added_tokens_in_order():
    encoder = TokenIds.open(need(QWEN3))
    body = "user\n" + "a\n" * CHUNK_CHARS
    items = encoder.items(f"<|im_start|>{body}<|im_end|>\n")
    assert items[0].tolist() == [151644] and items[-2].tolist() == [151645] and items[-1] == "\n"
    middle = items[1:-2]
    assert len(middle) > 1 and all(isinstance(i, str) for i in middle) and "".join(middle) == body


def test_cache_merges_small_parts(tmp_path, monkeypatch):
    monkeypatch.setattr(token_ids, "MAX_SMALL_PARTS", 3)
    rng = np.random.default_rng(0)
    entries = {
        segment_key(f"segment {i}"): rng.integers(0, 151_000, rng.integers(1, 50)).astype(np.uint32) for i in range(200)
    }
    keys = list(entries)
    for start in range(0, 200, 40):  # five runs, five parts
        cache = SegmentIdsCache(tmp_path, "ab" * 32)
        cache.add(keys[start : start + 40], [entries[k] for k in keys[start : start + 40]])
        cache.add(keys[:3], [entries[k] for k in keys[:3]])  # known already: kept once
        cache.save()
    parts = sorted((tmp_path / "abababababababab" / "ids").glob("part-*.ids"))
    assert len(parts) == 2  # the fourth save merged four small parts into one; the fifth added one
    cache = SegmentIdsCache(tmp_path, "ab" * 32)
    assert len(cache) == 203  # the fifth part holds the three repeated keys again (`len` counts both)
    found = cache.lookup(keys + [segment_key("unknown")])
    assert [f.tolist() for f in found[:-1]] == [entries[k].tolist() for k in keys]
    assert found[-1] is None
