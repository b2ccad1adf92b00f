"""render_segments on tiny rows: the pieces LLaMA-Factory 0.9.5 encodes, their roles and which are
trained (tests/test_lf_render.py checks them against LLaMA-Factory's own preprocessing)."""

from __future__ import annotations

import dataclasses

import pytest

from tracelake.core.tokens import build_tokenizer, load_tokenizer
from tracelake.export.sft import count_template_tokens
from tracelake.export.sharegpt import SharegptRow
from tracelake.export.templates import Segment, render_segments, template_slots


def row(conversations: list[tuple[str, str]], system: str = "") -> SharegptRow:
    return SharegptRow(system, [{"from": f, "value": v} for f, v in conversations], 0, 0)


ROW = row([("human", "list {files}"), ("gpt", "<think>ls</think>ls -la"), ("observation", "a.txt"),
           ("gpt", "done")], system="You are {terse}.")


def test_qwen3_segments():
    assert render_segments(ROW, template_slots("qwen3")) == [
        Segment("<|im_start|>system\nYou are {terse}.<|im_end|>\n", "system", False),
        Segment("<|im_start|>user\nlist {files}<|im_end|>\n<|im_start|>assistant\n", "human", False),
        Segment("<think>ls</think>ls -la<|im_end|>\n", "gpt", True),
        Segment("<|im_start|>user\n<tool_response>\na.txt\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
                "observation", False),
        Segment("<think>\n\n</think>\n\n", "empty_thought", True),
        Segment("done<|im_end|>\n", "gpt", True),
    ]


def test_qwen3_nothink_has_no_empty_thought():
    segments = render_segments(ROW, template_slots("qwen3_nothink"))
    assert [s.role for s in segments] == ["system", "human", "gpt", "observation", "gpt"]
    assert [s.trained for s in segments] == [False, False, True, False, True]
    assert segments == [s for s in render_segments(ROW, template_slots("qwen3")) if s.role != "empty_thought"]


@pytest.mark.parametrize("value,thought", [("plain", True), ("", True), ("<think>x", False), ("x</think>y", False),
                                           ("<think>\nlong\n</think>\n\nok", False)])
def test_empty_thought_only_without_think_tags(value, thought):
    segments = render_segments(row([("human", "q"), ("gpt", value)]), template_slots("qwen3"))
    assert [s.role for s in segments] == ["human"] + ["empty_thought"] * thought + ["gpt"]
    assert segments[-1].text == value + "<|im_end|>\n"


def test_no_system_block_without_a_system():
    segments = render_segments(row([("human", "q"), ("gpt", "a")]), template_slots("qwen3"))
    assert segments[0].role == "human" and not any(s.role == "system" for s in segments)


def test_segment_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Segment("a", "gpt", True).text = "b"   # type: ignore[misc]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return load_tokenizer(build_tokenizer(tmp_path_factory.mktemp("tok")))


@pytest.mark.parametrize("name", ["qwen3", "qwen3_nothink"])
def test_count_template_tokens_is_the_sum_of_the_segments(tokenizer, name):
    rows = [ROW, row([("human", "hi"), ("gpt", "no thought"), ("observation", "x\n\ny"), ("gpt", "<think>\n</think>ok")]),
            row([("human", "q"), ("gpt", "")], system="a\n\nb")]
    template = template_slots(name)
    expected = [sum(len(tokenizer.encode(s.text, add_special_tokens=False).ids) for s in render_segments(r, template))
                for r in rows]
    assert count_template_tokens(tokenizer, rows, template) == expected
