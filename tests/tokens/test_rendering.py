"""One count (tokens/rendering.py): the rendering LLaMA-Factory encodes, the thinking choice, and the
counts of assistant turns by reasoning; the params that choose them."""

from __future__ import annotations

import copy
import random

import pyarrow as pa
import pytest

from tracelake.core.errors import BadParams
from tracelake.params import parse_params
from tracelake.tokens.rendering import (
    RenderedCounts,
    Rendering,
    count_template_tokens,
    mostly_empty_thoughts,
    thought_counts,
)
from tracelake.tokens.sharegpt import SharegptRow
from tracelake.tokens.special_tokens import ControlTokens
from tracelake.tokens.templates import MODES, TEMPLATES, chosen_mode, render_pieces
from tracelake.tokens.tokenizer import load_tokenizer, tokenizer_file

from ..helpers import FIXTURES, need
from ..project.test_config import BASE

TURN = pa.struct([("from", pa.string()), ("value", pa.string())])
THOUGHT = "<think>\nwhich command?\n</think>\n\n"


def conversations(rows: list[list[dict]]) -> pa.ListArray:
    return pa.array(rows, pa.list_(TURN))


def random_rows(seed: int, n: int) -> list[list[dict]]:
    """Rows whose gpt turns hold every shape of thought LF tells apart: well formed (removable),
    a bare tag, an unclosed one, none, several."""
    rng = random.Random(seed)
    bits = ["<think>\n", "\n</think>\n\n", "<think>", "</think>", "x", "\n", " y ", THOUGHT]
    rows = []
    for _ in range(n):
        conv = []
        for _ in range(rng.randint(1, 6)):
            conv.append({"from": rng.choice(["human", "observation"]), "value": "q"})
            conv.append({"from": "gpt", "value": "".join(rng.choice(bits) for _ in range(rng.randint(0, 5)))})
        rows.append(conv)
    return rows


@pytest.mark.parametrize("template", list(TEMPLATES))
def test_thought_counts_are_what_the_rendering_trains(template):
    """Arrow's tag tests give, row by row and in every v0 mode, exactly the empty thoughts and trained
    turns that render_pieces (LLaMA-Factory's rendering, tests/export/test_lf_render.py) trains."""
    rows = random_rows(0, 300)
    slots = TEMPLATES[template]
    for mode in (m for m in MODES.values() if not m.v1):
        for conv, c in zip(rows, thought_counts(conversations(rows), slots, mode)):
            pieces = list(render_pieces(SharegptRow("", conv, 0, 0), slots, mode))
            assert c.trained_empty_thoughts == sum(r == "empty_thought" and t for _, r, t in pieces), (mode, conv)
            assert c.trained_turns == sum(r == "gpt" and t for _, r, t in pieces), (mode, conv)
            assert c.assistant_turns == sum(t["from"] == "gpt" for t in conv)
            assert c.with_reasoning == sum(
                t["from"] == "gpt" and ("<think>" in t["value"] or "</think>" in t["value"]) for t in conv
            )


def test_traces_without_reasoning_train_an_empty_block_on_every_turn_unless_dropped():
    plain = [[{"from": "human", "value": "q"}, {"from": "gpt", "value": "ls"}] * 3]
    reasoned = [[{"from": "human", "value": "q"}, {"from": "gpt", "value": THOUGHT + "ls"}] * 3]
    qwen3 = TEMPLATES["qwen3"]
    [keep] = thought_counts(conversations(plain), qwen3, chosen_mode("default", "keep"))
    assert (keep.assistant_turns, keep.with_reasoning, keep.trained_turns, keep.trained_empty_thoughts) == (3, 0, 3, 3)
    assert mostly_empty_thoughts(keep.as_json()) and keep.as_json()["without_reasoning"] == 3
    [drop] = thought_counts(conversations(plain), qwen3, chosen_mode("default", "drop"))
    assert (drop.trained_turns, drop.trained_empty_thoughts) == (3, 0) and not mostly_empty_thoughts(drop.as_json())
    [last] = thought_counts(conversations(plain), qwen3, chosen_mode("mask_history", "last_turn"))
    assert (last.trained_turns, last.trained_empty_thoughts) == (1, 1)
    [thought] = thought_counts(conversations(reasoned), qwen3, chosen_mode("default", "keep"))
    assert (thought.with_reasoning, thought.trained_empty_thoughts) == (3, 0)
    [nothink] = thought_counts(conversations(plain), TEMPLATES["qwen3_nothink"], chosen_mode("default", "keep"))
    assert nothink.trained_empty_thoughts == 0  # a plain template adds no thought


def test_input_tokens_are_the_mode_s_rendering_on_qwen3_and_recalled_per_mode(tmp_path):
    """With Qwen3's real tokenizer: each mode's count is the sum of its pieces' encodings; a count is
    recalled under its rendering's key, and another thinking choice is counted anew, never recalled."""
    from tracelake.tokens.sharegpt import sharegpt_batch
    from tracelake.tokens.token_count import TokenCounter

    qwen3 = need(FIXTURES / "qwen3-tokenizer")
    tok = load_tokenizer(qwen3)
    messages = pa.array(
        [
            [
                {"role": "system", "content": "You are an agent."},
                {"role": "user", "content": "fix {the} bug"},
                {"role": "assistant", "content": THOUGHT + "I run `ls`"},
                {"role": "tool", "content": "a.py\nb.py"},
                {"role": "assistant", "content": "done"},
            ]
        ]
    )
    batch = sharegpt_batch(messages)
    row = SharegptRow(batch.system[0].as_py(), batch.conversations[0].as_py(), 0, 0)
    control = ControlTokens.open(tokenizer_file(qwen3), TEMPLATES["qwen3"].markup())
    seen = {}
    with TokenCounter.open(qwen3, tmp_path / "cache") as counter:
        for thinking in ("keep", "drop"):
            rendering = Rendering("qwen3", chosen_mode("default", thinking))
            want = sum(
                len(tok.encode(text, add_special_tokens=False).ids)
                for text, _, _ in render_pieces(row, TEMPLATES["qwen3"], rendering.mode)
            )
            assert count_template_tokens(tok, [row], TEMPLATES["qwen3"], rendering.mode) == [want]
            before = counter.stats.recalled
            got = RenderedCounts(counter, batch, ["h"], rendering, control, "reject").input_tokens()
            assert got == [want] and counter.stats.recalled == before  # a new key: counted, not recalled
            assert RenderedCounts(counter, batch, ["h"], rendering, control, "reject").input_tokens() == [want]
            assert counter.stats.recalled == before + 1
            seen[thinking] = want
    assert seen["drop"] < seen["keep"]  # the thought is not encoded at all


def sft_params(**sft) -> dict:
    data = copy.deepcopy(BASE)
    data["train"]["sft"].update(sft)
    return data


@pytest.mark.parametrize(
    "sft, message",
    [
        ({"mode": "no_thinking"}, "'no_thinking' is now train.sft.mode: default with thinking: drop"),
        (
            {"mode": "mask_history_preserve_thinking"},
            "is now train.sft.mode: mask_history with thinking: keep",
        ),
        ({"thinking": "last_turn"}, "last_turn needs train.sft.mode mask_history"),
        ({"thinking": "maybe"}, "must be one of keep, drop, last_turn"),
        ({"template": "qwen3_nothink", "thinking": "drop"}, "needs a reasoning template"),
    ],
)
def test_thinking_params_are_refused_in_one_line(sft, message):
    with pytest.raises(BadParams, match=message) as e:
        parse_params(sft_params(**sft))
    assert "\n" not in str(e.value)


def test_each_mode_and_thinking_pair_selects_its_lf_mode():
    assert (
        parse_params(sft_params(mode="mask_history", thinking="last_turn")).train.sft.lf_mode() is MODES["mask_history"]
    )
    assert parse_params(sft_params(thinking="drop")).train.sft.lf_mode() is MODES["no_thinking"]
    assert parse_params(sft_params()).train.sft.lf_mode() is MODES["default"]


@pytest.mark.parametrize("max_tokens", [None, 40000])
def test_a_filter_limit_past_the_cutoff_is_refused(max_tokens):
    """The pool keeps only rows its export keeps: filter.max_tokens at most train.sft.cutoff_len."""
    data = sft_params(cutoff_len=32768)
    data["filter"]["max_tokens"] = max_tokens
    with pytest.raises(BadParams, match=r"filter\.max_tokens.*cutoff_len \(32768\)"):
        parse_params(data)
    data["filter"]["max_tokens"], data["filter"]["count_tokens"] = None, False  # nothing counted: nothing to hold
    parse_params(data)


def test_the_sample_params_choose_explicitly():
    p = parse_params(copy.deepcopy(BASE))
    assert (p.train.sft.mode, p.train.sft.thinking) == ("default", "keep")
    assert p.filter.max_tokens <= p.train.sft.cutoff_len


def test_the_stage_warns_when_most_trained_turns_get_an_empty_block():
    from stages.export_sft import thinking_lines

    counts = {"assistant_turns": 10, "with_reasoning": 1, "without_reasoning": 9, "trained_turns": 10}
    lines = thinking_lines("1k", {**counts, "trained_empty_thoughts": 9}, "keep", "qwen3")
    assert len(lines) == 2 and "warning: 9 of 10 trained assistant turns" in lines[1]
    assert "thinking: drop" in lines[1]
    assert len(thinking_lines("1k", {**counts, "trained_empty_thoughts": 0}, "drop", "qwen3")) == 1


def test_reasoning_lf_cannot_remove_is_counted_and_warned():
    """LF's remove_thought needs `<think>\\n...\\n</think>\\n\\n`; Harbor writes `<think>...</think>`: under
    thinking drop such reasoning stays in the trained text, and the export says so."""
    from stages.export_sft import thinking_lines

    harbor = [[{"from": "human", "value": "q"}, {"from": "gpt", "value": "<think>plan</think>\nls"}] * 2]
    lf_shape = [[{"from": "human", "value": "q"}, {"from": "gpt", "value": THOUGHT + "ls"}] * 2]
    drop = chosen_mode("default", "drop")
    [kept] = thought_counts(conversations(harbor), TEMPLATES["qwen3"], drop)
    assert (kept.with_reasoning, kept.reasoning_not_removed) == (2, 2)
    rendered = "".join(t for t, _, _ in render_pieces(SharegptRow("", harbor[0], 0, 0), TEMPLATES["qwen3"], drop))
    assert rendered.count("<think>plan</think>") == 2  # LF's own rendering keeps it (test_lf_render.py)
    [removed] = thought_counts(conversations(lf_shape), TEMPLATES["qwen3"], drop)
    assert (removed.with_reasoning, removed.reasoning_not_removed) == (2, 0)
    [keep] = thought_counts(conversations(harbor), TEMPLATES["qwen3"], chosen_mode("default", "keep"))
    assert keep.reasoning_not_removed == 0  # keep removes nothing
    lines = thinking_lines("1k", kept.as_json(), "drop", "qwen3")
    assert any("2 assistant turns keep their reasoning although thinking drop removes it" in line for line in lines)


def test_status_shows_the_thinking_choice_and_flags_mostly_empty_blocks():
    from tracelake.explore.status import thinking_cell

    t = {"assistant_turns": 10, "with_reasoning": 4, "trained_turns": 10, "trained_empty_thoughts": 6}
    assert thinking_cell({"rendering": {"thinking": "keep"}, "thinking": t}) == "keep: 40% reason, 60% empty (!)"
    t = {**t, "trained_empty_thoughts": 0}
    assert thinking_cell({"rendering": {"thinking": "drop"}, "thinking": t}) == "drop: 40% reason, 0% empty"
    assert thinking_cell({"tasks_out": 3}) == ""  # the RL export has no assistant turns
