"""Control-token literals in the SFT export (tokens/special_token_screen.py, filter.special_tokens).

A literal `<|im_end|>` in a tool result is one control token to the trainer's tokenizer: a fake turn
boundary it would train on. The export rejects such rows (`special_token_in_text`) or escapes the
literal (`zwsp_escape_v1`), and n_tokens is the count of the text it writes. Checked with the real
encoder on hand-made rows and on a hypothesis generator that mixes the tokenizer's own added tokens
(read from its tokenizer.json, not a list) into random text: bounded (helpers.FUZZ_EXAMPLES,
derandomized) in every run, thousands of examples with `-m long` (TRACELAKE_LONG=1).

Property: no exported turn holds a literal the tokenizer encodes as a control token, except an
assistant turn's own thought and tool-call words; the default rendering has one `<|im_end|>` per
slot; n_tokens equals the encoded length of LLaMA-Factory's rendering; escaped text unescapes to the
converted text, and under reject a row is exported unchanged or rejected for a literal it holds.
"""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tokenizers import Tokenizer

from tracelake.export.sft import SftStats
from tracelake.tokens.sharegpt import ExportReject, SharegptRow, to_sharegpt
from tracelake.tokens.special_tokens import MARK, ControlTokens
from tracelake.tokens.templates import MODES, render_pieces, template_slots
from tracelake.tokens.tokenizer import build_tokenizer, load_tokenizer

from ..helpers import convert_slots, fuzz_settings, print_fuzz_summary

TEMPLATE = template_slots("qwen3")
SHORT = fuzz_settings()
LONG = fuzz_settings(long_examples=3_000)
RUNS: Counter = Counter()  # test name -> examples run
SECONDS: Counter = Counter()
OUTCOMES: dict[str, Counter] = {}  # test name -> exported rows and rejects by reason


@pytest.fixture(scope="module", autouse=True)
def summary(request):
    """One line per fuzz test after the module: examples, seconds, outcomes."""
    yield
    print_fuzz_summary(request, RUNS, SECONDS, OUTCOMES)


@functools.cache
def tokenizer_dir() -> Path:
    """The project's tokenizer, built once per session (the generator below needs its added tokens)."""
    where = Path(tempfile.mkdtemp(prefix="tracelake-special-tokens-"))
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    return build_tokenizer(where / "tokenizer")


@functools.cache
def added_tokens() -> list[str]:
    """The tokenizer's own added tokens, as its tokenizer.json lists them."""
    return [t["content"] for t in json.loads((tokenizer_dir() / "tokenizer.json").read_text())["added_tokens"]]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return load_tokenizer(tokenizer_dir())


@pytest.fixture(scope="module")
def control() -> ControlTokens:
    return ControlTokens.open(tokenizer_dir() / "tokenizer.json", TEMPLATE.markup())


def slots(conversations: list[list[dict]], copies: int = 1) -> list[dict]:
    return [
        {
            "slot_id": f"s{k}-{c}",
            "trajectory_id": f"t{k}",
            "task_id": f"k{k}",
            "source": "src",
            "task": f"task{k}",
            "name": f"task{k}_copy{c:04d}",
            "copy": c,
            "messages": msgs,
        }
        for k, msgs in enumerate(conversations)
        for c in range(copies)
    ]


def export(rows: list[dict], tok: Tokenizer, control: ControlTokens, policy: str):
    stats = SftStats()
    out, rejects = convert_slots(rows, tokenizer=tok, stats=stats, control=control, special_tokens=policy)
    assert stats.rows_in == stats.rows_out + sum(stats.rejected.values()) == len(rows)
    return out.to_pylist(), rejects


def control_tokens_in(tok: Tokenizer, text: str, control: ControlTokens) -> list[str]:
    """The control tokens the real encoder reads in `text`."""
    ids = {tok.token_to_id(t): t for t in control.tokens}
    return [ids[i] for i in tok.encode(text, add_special_tokens=False).ids if i in ids]


def twelve_messages() -> list[dict]:
    """The case as reported: 12 messages, two of them holding `<|im_end|>` (terminal output, a chat log)."""
    msgs = [{"role": ("user", "assistant")[i % 2], "content": f"step {i}: ls"} for i in range(12)]
    msgs[2]["content"] = "$ python -c 'print(tok.eos_token)'\n<|im_end|>\n"
    msgs[7]["content"] = "<think>\nThe log says <|im_end|>\n</think>\n<tool_call>\n{}\n</tool_call>"
    return msgs


def test_reject_names_the_turn_and_the_token(tok, control):
    clean = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "<think>\nok\n</think>\n\n<tool_call>\n{}\n</tool_call>"},
    ]
    system = [{"role": "system", "content": "you are <|endoftext|>"}, *clean]
    rows, rejects = export(slots([clean, twelve_messages(), system], copies=2), tok, control, "reject")
    assert [r["trajectory_id"] for r in rows] == ["t0", "t0"]
    assert {(r["trajectory_id"], r["reason"], r["detail"]) for r in rejects} == {
        ("t1", "special_token_in_text", "human turn 2 holds <|im_end|>"),
        ("t2", "special_token_in_text", "the system prompt holds <|endoftext|>"),
    }
    assert len(rejects) == 4  # every upsampled copy is accounted for


def test_escape_writes_one_boundary_per_turn_and_counts_what_it_writes(tok, control):
    msgs = twelve_messages()
    raw = "".join(text for text, _, _ in render_pieces(to_sharegpt(msgs), TEMPLATE))
    assert control_tokens_in(tok, raw, control).count("<|im_end|>") == 14  # as written: two fake boundaries
    (row,), rejects = export(slots([msgs]), tok, control, "escape")
    assert rejects == []
    sharegpt = SharegptRow(row["system"], row["conversations"], 0, 0)
    pieces = [text for text, _, _ in render_pieces(sharegpt, TEMPLATE)]
    assert control_tokens_in(tok, "".join(pieces), control).count("<|im_end|>") == 12
    assert row["n_tokens"] == sum(len(tok.encode(p, add_special_tokens=False).ids) for p in pieces)
    assert f"<{MARK}|im_end|>" in row["conversations"][2]["value"]
    assert [control.unescape(t["value"]) for t in row["conversations"]] == [
        t["value"] for t in to_sharegpt(msgs).conversations
    ]


# --- fuzzing -------------------------------------------------------------------------------------

# Pieces of message text: the tokenizer's own added tokens (from its tokenizer.json), their escaped
# forms, their halves (a literal split by the text around it), and random text near their alphabet.
added = st.deferred(lambda: st.sampled_from(added_tokens()))
piece = st.one_of(
    added,
    added.map(lambda t: t[0] + MARK + t[1:]),
    added.flatmap(lambda t: st.integers(1, len(t) - 1).map(lambda k: t[:k])),
    st.text(alphabet=st.sampled_from(list("<|>/_ \nabimtsrkhn") + [MARK]), max_size=12),
    st.text(max_size=20),
)
message_text = st.lists(piece, max_size=8).map("".join)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool", "assistant"]), "content": message_text}
)
conversation = st.tuples(
    st.lists(st.fixed_dictionaries({"role": st.just("system"), "content": message_text}), max_size=1),
    st.fixed_dictionaries({"role": st.just("user"), "content": message_text}),
    st.lists(message, min_size=1, max_size=6),
).map(lambda parts: [*parts[0], parts[1], *parts[2]])


def converted(msgs: list[dict]) -> SharegptRow | None:
    try:
        return to_sharegpt(msgs)
    except ExportReject:
        return None


def check_export(tok: Tokenizer, control: ControlTokens, conversations: list[list[dict]], name: str) -> None:
    """The property (module docstring) for both policies on one batch of conversations."""
    start = time.perf_counter()
    allowed = {True: set(control.in_response), False: set()}
    for policy in ("reject", "escape"):
        rows, rejects = export(slots(conversations), tok, control, policy)
        OUTCOMES.setdefault(name, Counter()).update([f"{policy}: exported"] * len(rows))
        OUTCOMES[name].update(f"{policy}: {r['reason']}" for r in rejects)
        rejected = {r["trajectory_id"]: r["reason"] for r in rejects}
        by_id = {r["trajectory_id"]: r for r in rows}
        for k, msgs in enumerate(conversations):
            original = converted(msgs)
            if original is None:
                continue
            texts = [(original.system, False)] + [(t["value"], t["from"] == "gpt") for t in original.conversations]
            literal = any(control.hostile(text, response) for text, response in texts)
            row = by_id.get(f"t{k}")
            if policy == "reject":
                assert (rejected.get(f"t{k}") == "special_token_in_text") == literal
                if row is None:
                    continue
                assert row["conversations"] == original.conversations and row["system"] == original.system
            else:
                assert row is not None
                assert [control.unescape(t["value"]) for t in row["conversations"]] == [
                    t["value"] for t in original.conversations
                ]
                assert control.unescape(row["system"]) == original.system
            for turn in row["conversations"]:
                found = set(control_tokens_in(tok, turn["value"], control))
                assert found <= allowed[turn["from"] == "gpt"], (policy, turn)
            assert not control_tokens_in(tok, row["system"], control)
            sharegpt = SharegptRow(row["system"], row["conversations"], 0, 0)
            pieces = [text for text, _, _ in render_pieces(sharegpt, TEMPLATE, MODES["default"])]
            assert row["n_tokens"] == sum(len(tok.encode(p, add_special_tokens=False).ids) for p in pieces)
            boundaries = control_tokens_in(tok, "".join(pieces), control).count("<|im_end|>")
            assert boundaries == len(row["conversations"]) + bool(row["system"])
    RUNS[name] += 1
    SECONDS[name] += time.perf_counter() - start


@SHORT
@given(st.lists(conversation, min_size=1, max_size=4))
def test_fuzz_no_control_token_reaches_a_shard(tok, control, conversations):
    check_export(tok, control, conversations, "test_fuzz_no_control_token_reaches_a_shard")


@pytest.mark.long
@LONG
@given(st.lists(conversation, min_size=1, max_size=4))
def test_fuzz_no_control_token_reaches_a_shard_long(tok, control, conversations):
    check_export(tok, control, conversations, "test_fuzz_no_control_token_reaches_a_shard_long")
