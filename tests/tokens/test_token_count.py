"""Segment-cached token counts are exact: for every tokenizer family (small trained ones of each
pre-tokenizer, and Qwen3's real tokenizer from ../shared/fixtures), any text, any cut size, the count
equals len(tokenizer.encode(text, add_special_tokens=False)); the cache makes a second run encode
nothing and never changes a count."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers

from tracelake.tokens import token_cache, token_count
from tracelake.tokens.token_cache import SegmentCache
from tracelake.tokens.token_count import SPLIT_PATTERNS, CountStats, SegmentRule, TokenCounter
from tracelake.tokens.tokenizer import build_tokenizer, train_bpe

from ..helpers import qwen3_tokenizer, real_trace_texts

QWEN, LLAMA3 = sorted(SPLIT_PATTERNS, key=lambda p: "{1,3}" in p)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
PLAIN_ADDED = ["<think>", "</think>", "<tool_call>", "</tool_call>"]  # Qwen: added, not special
CORPUS = [
    "ls -la\ncd /app && git status\n",
    "def f(x):\n    return x + 1\n\n\nprint(f(2))\n",
    '{\n  "analysis": "The tests pass.",\n  "commands": [{"keystrokes": "ls\\n", "duration": 0.1}]\n}',
    'Traceback (most recent call last):\n  File "main.py", line 3\nValueError: bad\n',
    "It's done; they'll see. Numbers 12345 and 3.14159, dates 2024-05-09.\r\n\r\nEnd  \n\n  x",
    "café naïve Straße 日本語 🚀 e\u0301 \u00a0nbsp\t\ttabs\n\n\n",
] * 20


def _train(pre_tokenizer, normalizer=None) -> Tokenizer:
    return train_bpe(CORPUS, 600, pre_tokenizer, normalizer=normalizer, special=SPECIAL, added=PLAIN_ADDED)


def _split_byte_level(pattern: str):
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


FAMILIES = {
    "gpt2_byte_level": lambda: _train(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)),
    "qwen2": lambda: _train(_split_byte_level(QWEN), normalizers.NFC()),
    "llama3": lambda: _train(_split_byte_level(LLAMA3)),
    "prefix_space": lambda: _train(pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)),
    "whitespace": lambda: _train(pre_tokenizers.Whitespace()),
}
EXPECTED_RULE = {
    "gpt2_byte_level": "split",
    "qwen2": "split",
    "llama3": "split",
    "prefix_space": "whole",
    "whitespace": "whole",
    "qwen3": "split",
}


@pytest.fixture(scope="module", params=[*sorted(FAMILIES), "qwen3"])
def family(request, tmp_path_factory) -> tuple[str, Path]:
    """(name, tokenizer.json): a small one trained here, or Qwen3's real one read in place."""
    if request.param == "qwen3":
        return "qwen3", qwen3_tokenizer() / "tokenizer.json"
    path = tmp_path_factory.mktemp(request.param) / "tokenizer.json"
    FAMILIES[request.param]().save(str(path))
    return request.param, path


@pytest.fixture(scope="module")
def family_counter(family) -> TokenCounter:
    """The family's counter, opened once and its engine chosen (Qwen3's takes about a second to load
    and qualify): a test copies it with an empty cache."""
    counter = TokenCounter.open(family[1])
    counter.count(["engine"])
    return counter


def _encode_len(tok: Tokenizer, text: str) -> int:
    return len(tok.encode(text, add_special_tokens=False).ids)


def test_rule_per_family(family):
    name, path = family
    assert SegmentRule.of(json.loads(path.read_text())).name == EXPECTED_RULE[name]


def test_project_tokenizer_splits(tmp_path):
    path = build_tokenizer(tmp_path / "tok")
    assert SegmentRule.of(json.loads((path / "tokenizer.json").read_text())).name == "split"


# Characters that stress pre-token boundaries: newlines next to spaces, punctuation and letters,
# CRLF, tabs, contractions, digits, combining marks, NBSP, and the added tokens themselves.
_ATOMS = [
    "\n",
    "\n\n",
    " ",
    "  ",
    "\t",
    "\r\n",
    "a",
    "Z",
    "é",
    "e\u0301",
    "\u00a0",
    "日本",
    "🚀",
    "'s",
    "'ll",
    "7",
    "123",
    "3.14",
    ".",
    "}",
    "{",
    '"',
    "-",
    "_",
    "x = 1",
    "</",
    ">",
    "<",
    *SPECIAL,
    *PLAIN_ADDED,
    # whitespace runs, unicode spaces, CJK, emoji, digits, and the rest of Qwen3's added tokens
    "   \n\n  ",
    "\n\n\n",
    " \t \n",
    "\r\n\r\n",
    "\u3000",
    "\u2028",
    "中文字符",
    "ｆｕｌｌ",
    "👍🏽",
    "👨\u200d👩\u200d👧",
    "2026",
    "٣",
    "'S",
    "<|fim_middle|>",
    "<tool_response>",
    "</tool_response>",
    "<|vision_pad|>",
    "<|im_start|>assistant\n<think>\n",
]
texts = st.lists(st.sampled_from(_ATOMS) | st.text(max_size=3), max_size=80).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(texts, min_size=1, max_size=6), chunk=st.sampled_from([1, 3, 16, 10_000]))
def test_counts_equal_encode(family_counter, batch, chunk, monkeypatch):
    monkeypatch.setattr(token_count, "CHUNK_CHARS", chunk)  # cut at every safe newline, or never
    counter = dataclasses.replace(family_counter, cache=SegmentCache(None, ""), stats=CountStats())  # nothing known
    assert counter.count(batch) == [_encode_len(counter.tokenizer, t) for t in batch]


@pytest.mark.parametrize("chunk", [200, token_count.CHUNK_CHARS])
def test_real_trace_text_counts_exactly(family, family_counter, chunk, monkeypatch):
    """Real trace text (tests/helpers.py real_trace_texts: OpenThoughts-Agent rows and Harbor's golden
    trajectories and exports, ~0.6 M characters), cut at small chunks and at the counter's own size:
    each text's count is one encode of it. Qwen3's tokenizer is counted by tiktoken, rule split."""
    texts = real_trace_texts()
    monkeypatch.setattr(token_count, "CHUNK_CHARS", 10**9)
    uncut: list[str] = []
    for text in texts:
        family_counter.rule.segments(text, uncut)
    monkeypatch.setattr(token_count, "CHUNK_CHARS", chunk)
    counter = dataclasses.replace(family_counter, cache=SegmentCache(None, ""), stats=CountStats())
    assert counter.count(texts) == [_encode_len(counter.tokenizer, t) for t in texts]
    if counter.rule.name == "split":
        assert counter.stats.segments > len(uncut)  # really cut, not counted whole
    if family[0] == "qwen3":
        assert counter.rule.name == "split" and counter.stats.engine == "tiktoken"


def test_cache_survives_runs_and_encodes_each_segment_once(tmp_path, family):
    _, path = family
    cache = tmp_path / "cache"
    texts = [
        "<|im_start|>user\nhello there\nfriend<|im_end|>\n",
        "<|im_start|>assistant\n<think>hm</think>ok<|im_end|>\n",
    ] * 3
    with TokenCounter.open(path, cache) as first:
        want = first.count(texts)
    assert first.stats.encoded <= 6  # each distinct segment once, not once per text
    with TokenCounter.open(path, cache) as second:
        assert second.count(texts) == want
    assert second.stats.encoded == 0 and second.stats.cached == second.stats.segments
    # another tokenizer never sees these counts
    other = tmp_path / "other.json"
    other.write_text(path.read_text().replace('"vocab"', '"vocab"', 1) + "\n")
    with TokenCounter.open(other, cache) as third:
        third.count(texts)
    assert third.stats.encoded > 0


def test_cache_merges_and_compacts(tmp_path, monkeypatch):
    path = build_tokenizer(tmp_path / "tok")
    monkeypatch.setattr(token_cache, "MERGE_EVERY", 3)
    monkeypatch.setattr(token_cache, "MAX_PARTS", 2)
    cache = tmp_path / "cache"
    texts = [f"line {i}\nnext {i * 7}" for i in range(40)]
    want = [_encode_len(Tokenizer.from_file(str(path / "tokenizer.json")), t) for t in texts]
    for k in range(4):  # four runs, each adding 10 new texts: parts pile up, then compact
        with TokenCounter.open(path, cache) as c:
            assert c.count(texts[: 10 * (k + 1)]) == want[: 10 * (k + 1)]
            assert c.stats.encoded == 10
    parts = list(next(cache.iterdir()).glob("part-*.parquet"))
    assert 1 <= len(parts) <= 3
    with TokenCounter.open(path, cache) as c:
        assert c.count(texts) == want and c.stats.encoded == 0


def test_damaged_cache_part_is_ignored(tmp_path):
    path = build_tokenizer(tmp_path / "tok")
    cache = tmp_path / "cache"
    with TokenCounter.open(path, cache) as c:
        want = c.count(["some text\nmore"])
    part = next(next(cache.iterdir()).glob("part-*.parquet"))
    part.write_bytes(b"not parquet")
    with TokenCounter.open(path, cache) as c:
        assert c.count(["some text\nmore"]) == want
        assert c.stats.encoded > 0


def test_cache_runs_keep_what_an_interrupted_run_counted(tmp_path, monkeypatch):
    """Every MERGE_EVERY new entries become a part at once: a run stopped half way keeps them, and
    the next run encodes only what the stopped one had not reached."""
    path = build_tokenizer(tmp_path / "tok")
    monkeypatch.setattr(token_cache, "MERGE_EVERY", 4)
    cache = tmp_path / "cache"
    texts = [f"row {i}\nwith its own words {i * 13}" for i in range(30)]
    want = [_encode_len(Tokenizer.from_file(str(path / "tokenizer.json")), t) for t in texts]
    with pytest.raises(KeyboardInterrupt):
        with TokenCounter.open(path, cache) as c:
            assert c.count(texts[:20]) == want[:20]
            raise KeyboardInterrupt  # no save(): only the parts written on the way survive
    kept = list(next(cache.iterdir()).glob("part-*.parquet"))
    assert kept
    with TokenCounter.open(path, cache) as c:
        assert c.count(texts) == want
        assert 10 <= c.stats.encoded < 30  # the first 20 rows' parts were kept (a few pending ones lost)
    with TokenCounter.open(path, cache) as c:
        assert c.count(texts) == want and c.stats.encoded == 0


def test_cache_lookup_across_runs_and_unsorted_parts(tmp_path):
    """A key is found in whichever run holds it; a part not sorted by k1 (written by another tool)
    is sorted on load; an absent key is None, never a neighbour's count."""
    import polars as pl

    d = tmp_path / "cache"
    (d / "abcdef0123456789").mkdir(parents=True)
    keys = [bytes([i]) * 16 for i in range(1, 9)]
    k1, k2 = token_cache._halves(keys)
    pl.DataFrame({"k1": k1[4:][::-1], "k2": k2[4:][::-1], "n": pl.Series([8, 7, 6, 5], dtype=pl.UInt32)}).write_parquet(
        d / "abcdef0123456789" / "part-unsorted.parquet"
    )
    cache = token_cache.SegmentCache(d, "abcdef0123456789" + "0" * 48)
    cache.add(keys[:2], [1, 2])
    cache.flush()  # a run of its own, and a part
    cache.add(keys[2:4], [3, 4])  # still pending
    near = keys[0][:8] + bytes(8)  # shares k1 with keys[0], not k2
    assert cache.lookup([*keys, near, b"\xff" * 16]) == [1, 2, 3, 4, 5, 6, 7, 8, None, None]
    assert len(cache) == 8
    cache.save()
    again = token_cache.SegmentCache(d, "abcdef0123456789" + "0" * 48)
    assert again.lookup(keys) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_lookup_searches_each_run_for_what_is_still_unknown(tmp_path, monkeypatch):
    """Keys spread over runs of different sizes, asked in any order and more than once: each gets its
    own run's count; a later run is searched only for the keys earlier runs did not hold."""
    cache = token_cache.SegmentCache(None, "")
    keys = [i.to_bytes(16, "little") for i in range(1, 40)]
    for lo, hi in ((0, 3), (3, 20), (20, 30)):  # three runs: 3, 17 and 10 entries
        cache.add(keys[lo:hi], list(range(lo, hi)))
        cache.flush()
    cache.add(keys[30:35], list(range(30, 35)))  # pending
    asked = [keys[i] for i in (38, 0, 25, 5, 31, 5, 19, 2, 36, 25)]
    searched: list[int] = []
    real = token_cache.np.searchsorted
    monkeypatch.setattr(token_cache.np, "searchsorted", lambda a, v, **kw: searched.append(len(v)) or real(a, v, **kw))
    assert cache.lookup(asked) == [None, 0, 25, 5, 31, 5, 19, 2, None, 25]
    # the 17-entry run first (all 10 asked), then the 10-entry run (7 left), then the 3-entry one (5 left)
    assert searched == [10, 7, 5]


def test_a_segment_repeated_in_a_batch_is_looked_up_once(tmp_path, family):
    """Renderings of one conversation in several modes share their messages: count() hashes and
    looks up each distinct segment of a batch once, and still counts every occurrence."""
    _, path = family
    texts = ["<|im_start|>user\nsame words here<|im_end|>\n"] * 5 + [
        "<|im_start|>assistant\nsame words here<|im_end|>\n"
    ]
    counter = TokenCounter.open(path, tmp_path / "cache")
    asked: list[int] = []
    real = counter.cache.lookup
    counter.cache.lookup = lambda keys: asked.append(len(keys)) or real(keys)
    assert counter.count(texts) == [_encode_len(counter.tokenizer, t) for t in texts]
    assert len(asked) == 1 and asked[0] < counter.stats.segments
    assert counter.stats.cached == 0 and counter.stats.encoded == asked[0]
    again = counter.count(texts)
    assert again == [_encode_len(counter.tokenizer, t) for t in texts]
    assert counter.stats.cached == counter.stats.segments // 2  # the second call: every occurrence from the cache


def test_a_workers_cache_never_writes_a_part(tmp_path, monkeypatch):
    """A worker's counter (shared_counter, read only) and a forked copy of the driver's never write a
    part however much they encode: the driver saves what they send back (absorb). The driver's own
    cache, loaded before the fork (share), is searched in the child without reading a part again."""
    import multiprocessing

    from tracelake.tokens import token_count

    monkeypatch.setattr(token_cache, "MERGE_EVERY", 2)
    keys = [i.to_bytes(16, "little") for i in range(1, 6)]
    worker = token_cache.SegmentCache(tmp_path / "w", "ab" * 32)
    worker.read_only = True
    worker.add(keys, [1, 2, 3, 4, 5])
    assert not (tmp_path / "w").exists()
    path = build_tokenizer(tmp_path / "tok")
    driver = TokenCounter.open(path, tmp_path / "d")
    driver.cache.add(keys[:2], [1, 2])  # a part: MERGE_EVERY reached
    parts = sorted((tmp_path / "d").rglob("part-*.parquet"))
    assert len(parts) == 1
    token_count.share(driver, str(path), str(tmp_path / "d"))
    try:
        # a fresh cache opened on the same directory, shared: loaded before the fork
        again = TokenCounter.open(path, tmp_path / "d")
        token_count.share(again, str(path), str(tmp_path / "d"))
        assert again.cache._runs is not None
        ctx = multiprocessing.get_context("fork")
        child = ctx.Process(target=_add_in_a_forked_copy, args=(str(path), str(tmp_path / "d"), keys))
        child.start()
        child.join(60)
        assert child.exitcode == 0
    finally:
        token_count.unshare(str(path), str(tmp_path / "d"))
    assert sorted((tmp_path / "d").rglob("part-*.parquet")) == parts


def _add_in_a_forked_copy(tokenizer: str, cache: str, keys: list[bytes]) -> None:
    from tracelake.tokens import token_count

    counter = token_count.shared_counter(tokenizer, cache)
    assert counter.cache.lookup(keys[:3]) == [1, 2, None]
    counter.cache.add(keys, [1, 2, 3, 4, 5])
