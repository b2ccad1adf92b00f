"""render_segments on tiny rows: the pieces LLaMA-Factory 0.9.5 encodes, their roles and which are
trained, in each training mode (tests/export/test_lf_render.py checks them against LLaMA-Factory's own
preprocessing)."""

from __future__ import annotations

import dataclasses

import pytest

from tracelake.core.errors import BadParams
from tracelake.tokens.rendering import count_template_tokens
from tracelake.tokens.sharegpt import SharegptRow
from tracelake.tokens.templates import (
    DEFAULT,
    LOSS_MODES,
    MODES,
    THINKING,
    V0_MODES,
    LfMode,
    Segment,
    chosen_mode,
    lf_mode,
    render_pieces,
    render_segments,
    template_slots,
    thinking_of,
    trained_tokens,
    truncated_trained,
)
from tracelake.tokens.tokenizer import build_tokenizer, load_tokenizer


def row(conversations: list[tuple[str, str]], system: str = "") -> SharegptRow:
    return SharegptRow(system, [{"from": f, "value": v} for f, v in conversations], 0, 0)


ROW = row(
    [("human", "list {files}"), ("gpt", "<think>ls</think>ls -la"), ("observation", "a.txt"), ("gpt", "done")],
    system="You are {terse}.",
)


def test_qwen3_segments():
    assert render_segments(ROW, template_slots("qwen3")) == [
        Segment("<|im_start|>system\nYou are {terse}.<|im_end|>\n", "system", False),
        Segment("<|im_start|>user\nlist {files}<|im_end|>\n<|im_start|>assistant\n", "human", False),
        Segment("<think>ls</think>ls -la<|im_end|>\n", "gpt", True),
        Segment(
            "<|im_start|>user\n<tool_response>\na.txt\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
            "observation",
            False,
        ),
        Segment("<think>\n\n</think>\n\n", "empty_thought", True),
        Segment("done<|im_end|>\n", "gpt", True),
    ]


def test_qwen3_nothink_has_no_empty_thought():
    segments = render_segments(ROW, template_slots("qwen3_nothink"))
    assert [s.role for s in segments] == ["system", "human", "gpt", "observation", "gpt"]
    assert [s.trained for s in segments] == [False, False, True, False, True]
    assert segments == [s for s in render_segments(ROW, template_slots("qwen3")) if s.role != "empty_thought"]


@pytest.mark.parametrize(
    "value,thought",
    [("plain", True), ("", True), ("<think>x", False), ("x</think>y", False), ("<think>\nlong\n</think>\n\nok", False)],
)
def test_empty_thought_only_without_think_tags(value, thought):
    segments = render_segments(row([("human", "q"), ("gpt", value)]), template_slots("qwen3"))
    assert [s.role for s in segments] == ["human"] + ["empty_thought"] * thought + ["gpt"]
    assert segments[-1].text == value + "<|im_end|>\n"


def test_no_system_block_without_a_system():
    segments = render_segments(row([("human", "q"), ("gpt", "a")]), template_slots("qwen3"))
    assert segments[0].role == "human" and not any(s.role == "system" for s in segments)


def test_segment_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Segment("a", "gpt", True).text = "b"  # type: ignore[misc]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return load_tokenizer(build_tokenizer(tmp_path_factory.mktemp("tok")))


@pytest.mark.parametrize("name", ["qwen3", "qwen3_nothink"])
def test_count_template_tokens_is_the_sum_of_the_segments(tokenizer, name):
    rows = [
        ROW,
        row([("human", "hi"), ("gpt", "no thought"), ("observation", "x\n\ny"), ("gpt", "<think>\n</think>ok")]),
        row([("human", "q"), ("gpt", "")], system="a\n\nb"),
    ]
    template = template_slots(name)
    expected = [
        sum(len(tokenizer.encode(s.text, add_special_tokens=False).ids) for s in render_segments(r, template))
        for r in rows
    ]
    assert count_template_tokens(tokenizer, rows, template) == expected


# Modes. ROW2: a thought in a history turn (LF's shape, removable), a history turn without one, and a
# last turn with a thought.
THINK = "<think>\nhmm\n</think>\n\n"
ROW2 = row(
    [
        ("human", "a"),
        ("gpt", THINK + "one"),
        ("observation", "o"),
        ("gpt", "\ntwo"),
        ("human", "b"),
        ("gpt", THINK + "three"),
    ],
    system="s",
)
SYS = Segment("<|im_start|>system\ns<|im_end|>\n", "system", False)
HUMAN_A = Segment("<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n", "human", False)
OBS = Segment(
    "<|im_start|>user\n<tool_response>\no\n</tool_response><|im_end|>\n<|im_start|>assistant\n", "observation", False
)
HUMAN_B = Segment("<|im_start|>user\nb<|im_end|>\n<|im_start|>assistant\n", "human", False)
EMPTY = "<think>\n\n</think>\n\n"


def test_every_mode_and_thinking_choice_is_one_lf_mode():
    """train.sft.mode x train.sft.thinking: each allowed pair is one MODES entry, and back."""
    pairs = [(m, t) for m in LOSS_MODES for t in THINKING if t != "last_turn" or m == "mask_history"]
    chosen = [chosen_mode(m, t) for m, t in pairs]
    assert len({c.name for c in chosen}) == len(pairs) == len(V0_MODES)
    assert {c.name for c in chosen} == set(V0_MODES)
    for (_, t), c in zip(pairs, chosen):
        assert thinking_of(c) == t
    assert chosen_mode("default", "keep") is DEFAULT
    assert chosen_mode("mask_history", "last_turn").lf_args()["preserve_thinking"] is False
    assert chosen_mode("mask_history", "keep").lf_args()["preserve_thinking"] is True
    assert chosen_mode("train_on_prompt", "drop").lf_args()["enable_thinking"] is False
    for bad in [("default", "last_turn"), ("train_on_prompt", "last_turn"), ("default", "maybe")]:
        with pytest.raises(BadParams):
            chosen_mode(*bad)


def test_modes_and_their_lf_args():
    assert set(MODES) == {
        "default",
        "mask_history",
        "mask_history_preserve_thinking",
        "mask_history_no_thinking",
        "no_thinking",
        "train_on_prompt",
        "train_on_prompt_no_thinking",
        "v1",
    }
    assert lf_mode("v1").lf_args() == {} and lf_mode("v1").v1
    with pytest.raises(BadParams):  # v1 has none of v0's DataArguments
        LfMode("x", v1=True, mask_history=True)
    assert lf_mode("default") is DEFAULT
    assert DEFAULT.lf_args() == {
        "mask_history": False,
        "enable_thinking": True,
        "train_on_prompt": False,
        "preserve_thinking": False,
    }
    assert lf_mode("no_thinking").lf_args()["enable_thinking"] is False
    assert lf_mode("mask_history_preserve_thinking").lf_args() == {
        **DEFAULT.lf_args(),
        "mask_history": True,
        "preserve_thinking": True,
    }
    with pytest.raises(BadParams):
        lf_mode("nope")
    with pytest.raises(BadParams):  # LF refuses the pair too (data_args.py:182)
        LfMode("x", mask_history=True, train_on_prompt=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT.mask_history = True  # type: ignore[misc]


def test_default_mode_keeps_thoughts_and_trains_every_response():
    assert render_segments(ROW2, template_slots("qwen3"), MODES["default"]) == [
        SYS,
        HUMAN_A,
        Segment(THINK + "one<|im_end|>\n", "gpt", True),
        OBS,
        Segment(EMPTY, "empty_thought", True),
        Segment("\ntwo<|im_end|>\n", "gpt", True),
        HUMAN_B,
        Segment(THINK + "three<|im_end|>\n", "gpt", True),
    ]
    assert render_segments(ROW2, template_slots("qwen3")) == render_segments(ROW2, template_slots("qwen3"), DEFAULT)


def test_mask_history_drops_history_thoughts_and_trains_the_last_turn_only():
    assert render_segments(ROW2, template_slots("qwen3"), MODES["mask_history"]) == [
        SYS,
        HUMAN_A,
        Segment("one<|im_end|>\n", "gpt", False),
        OBS,
        Segment("two<|im_end|>\n", "gpt", False),  # remove_thought strips leading newlines; no empty thought
        HUMAN_B,
        Segment(THINK + "three<|im_end|>\n", "gpt", True),
    ]  # the last turn keeps its thought


def test_mask_history_adds_the_empty_thought_to_the_last_turn_only():
    r = row([("human", "a"), ("gpt", "x"), ("human", "b"), ("gpt", "y")])
    assert [(s.role, s.trained) for s in render_segments(r, template_slots("qwen3"), MODES["mask_history"])] == [
        ("human", False),
        ("gpt", False),
        ("human", False),
        ("empty_thought", True),
        ("gpt", True),
    ]


def test_mask_history_preserve_thinking_keeps_the_text_of_default():
    mode = MODES["mask_history_preserve_thinking"]
    default = render_segments(ROW2, template_slots("qwen3"))
    masked = render_segments(ROW2, template_slots("qwen3"), mode)
    assert [(s.text, s.role) for s in masked] == [(s.text, s.role) for s in default]
    assert [s.trained for s in masked] == [False] * 6 + [False, True]  # history empty thought untrained too


def test_no_thinking_removes_every_thought_and_puts_the_empty_one_in_the_prompt():
    assert render_segments(ROW2, template_slots("qwen3"), MODES["no_thinking"]) == [
        SYS,
        HUMAN_A,
        Segment(EMPTY, "empty_thought", False),
        Segment("one<|im_end|>\n", "gpt", True),
        OBS,
        Segment(EMPTY, "empty_thought", False),
        Segment("two<|im_end|>\n", "gpt", True),
        HUMAN_B,
        Segment(EMPTY, "empty_thought", False),
        Segment("three<|im_end|>\n", "gpt", True),
    ]


@pytest.mark.parametrize(
    "value,text,thought",
    [
        ("<think>ls</think>ls", "<think>ls</think>ls", False),  # not LF's thought words: kept, no empty thought
        ("a <think>\nx\n</think>\n\nb", "a b", True),  # removed anywhere
        ("<think>\nx\n</think>\n\n<think>\ny\n</think>\n\nz", "z", True),  # every one
        (EMPTY + "z", "z", True),
        ("<think>\nunclosed", "<think>\nunclosed", False),
        ("\n\nz\n", "z\n", True),  # leading newlines go even without a thought
    ],
)
def test_no_thinking_remove_thought(value, text, thought):
    segments = render_segments(row([("human", "q"), ("gpt", value)]), template_slots("qwen3"), MODES["no_thinking"])
    assert [s.role for s in segments] == ["human"] + ["empty_thought"] * thought + ["gpt"]
    assert segments[-1] == Segment(text + "<|im_end|>\n", "gpt", True)


def test_mask_history_with_no_thinking():
    mode = LfMode("mh_nt", mask_history=True, enable_thinking=False)
    assert [(s.role, s.trained) for s in render_segments(ROW2, template_slots("qwen3"), mode)] == [
        ("system", False),
        ("human", False),
        ("gpt", False),
        ("observation", False),
        ("gpt", False),
        ("human", False),
        ("empty_thought", False),
        ("gpt", True),
    ]


def test_train_on_prompt_trains_everything():
    segments = render_segments(ROW2, template_slots("qwen3"), MODES["train_on_prompt"])
    assert [s.text for s in segments] == [s.text for s in render_segments(ROW2, template_slots("qwen3"))]
    assert all(s.trained for s in segments)
    nothink = LfMode("x", enable_thinking=False, train_on_prompt=True)
    assert all(s.trained for s in render_segments(ROW2, template_slots("qwen3"), nothink))


@pytest.mark.parametrize("mode", [m for m in MODES.values() if not m.v1], ids=V0_MODES)
def test_qwen3_nothink_ignores_the_thinking_args(mode):
    """A plain Template: no empty thought, no thought removed; only the labels follow the mode."""
    template = template_slots("qwen3_nothink")
    segments = render_segments(ROW2, template, mode)
    assert [s.text for s in segments] == [s.text for s in render_segments(ROW2, template)]
    trained = [s.trained for s in segments]
    if mode.train_on_prompt:
        assert all(trained)
    elif mode.mask_history:
        assert trained == [False] * 6 + [True]
    else:
        assert trained == [s.role == "gpt" for s in segments]


@pytest.mark.parametrize("name", ["qwen3", "qwen3_nothink"])
@pytest.mark.parametrize("mode", list(MODES.values()), ids=list(MODES))
def test_trained_tokens_sums_the_trained_segments(tokenizer, name, mode):
    template = template_slots(name)

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    for r in (ROW, ROW2):
        assert trained_tokens(r, template, mode, count) == sum(
            count(s.text) for s in render_segments(r, template, mode) if s.trained
        )
    assert trained_tokens(ROW2, template, mode, len) == sum(
        len(t) for t, _, trained in render_pieces(ROW2, template, mode) if trained
    )


def test_v1_renders_each_message_whole_and_trains_every_assistant_turn():
    """LLaMA-Factory v1 (templates docstring): the system column dropped, headers inside the trained
    assistant piece, and (qwen3) an empty thought before the last turn even when it has one."""
    got = render_segments(ROW2, template_slots("qwen3"), MODES["v1"])
    assert got == [
        Segment("<|im_start|>user\na<|im_end|>\n", "human", False),
        Segment("<|im_start|>assistant\n" + THINK + "one<|im_end|>\n", "gpt", True),
        Segment("<|im_start|>user\n<tool_response>\no\n</tool_response><|im_end|>\n", "observation", False),
        Segment("<|im_start|>assistant\n\ntwo<|im_end|>\n", "gpt", True),
        Segment("<|im_start|>user\nb<|im_end|>\n", "human", False),
        Segment("<|im_start|>assistant\n" + EMPTY + THINK + "three<|im_end|>\n", "gpt", True),
    ]
    plain = render_segments(ROW2, template_slots("qwen3_nothink"), MODES["v1"])
    assert plain[-1].text == "<|im_start|>assistant\n" + THINK + "three<|im_end|>\n" and plain[:-1] == got[:-1]
    # a last assistant turn after a tool result only (no user query after it) still counts as after the query
    tail = row([("human", "q"), ("gpt", "call"), ("observation", "r"), ("gpt", "\n\nend")])
    assert (
        render_segments(tail, template_slots("qwen3"), MODES["v1"])[-1].text
        == "<|im_start|>assistant\n" + EMPTY + "end<|im_end|>\n"
    )


def test_v1_trained_tokens_stop_at_cutoff_len():
    count = len
    rendered = [(len(s.text), s.trained) for s in render_segments(ROW2, template_slots("qwen3"), MODES["v1"])]
    full = sum(n for n, trained in rendered if trained)
    assert trained_tokens(ROW2, template_slots("qwen3"), MODES["v1"], count) == full
    assert trained_tokens(ROW2, template_slots("qwen3"), MODES["v1"], count, cutoff_len=10**6) == full
    first = rendered[0][0]  # the first piece is a prompt: a cut inside it trains nothing
    assert trained_tokens(ROW2, template_slots("qwen3"), MODES["v1"], count, cutoff_len=first) == 0
    assert trained_tokens(ROW2, template_slots("qwen3"), MODES["v1"], count, cutoff_len=first + 5) == 5
    assert truncated_trained([(3, True), (4, False), (5, True)], 9) == 5
    # the v0 modes ignore cutoff_len (export_sft keeps only rows that fit it)
    assert trained_tokens(ROW2, template_slots("qwen3"), DEFAULT, count, cutoff_len=1) == trained_tokens(
        ROW2, template_slots("qwen3"), DEFAULT, count
    )
