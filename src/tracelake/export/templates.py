"""LLaMA-Factory 0.9.5 chat templates as the pieces it encodes one by one (rule
lf_template_tokens_v1 in sft.py counts tokens with them), without any engine: params.yaml checks
train.sft.template against TEMPLATES."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from tracelake.core.errors import BadParams

if TYPE_CHECKING:
    from tracelake.export.sharegpt import SharegptRow


@dataclass(frozen=True)
class TemplateSlots:
    """How a LLaMA-Factory 0.9.5 template turns each message into text it encodes on its own."""
    system: str
    human: str
    observation: str
    gpt: str
    empty_thought: str | None   # prepended to a gpt turn with no <think> (ReasoningTemplate)


_CHATML = dict(system="<|im_start|>system\n{}<|im_end|>\n",
               human="<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n",
               observation="<|im_start|>user\n<tool_response>\n{}\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
               gpt="{}<|im_end|>\n")
TEMPLATES = {
    "qwen3": TemplateSlots(**_CHATML, empty_thought="<think>\n\n</think>\n\n"),
    "qwen3_nothink": TemplateSlots(**_CHATML, empty_thought=None),
}


def template_slots(name: str) -> TemplateSlots:
    if name not in TEMPLATES:
        raise BadParams(f"params.yaml: train.sft.template {name!r}: export_sft counts tokens exactly for "
                        f"{', '.join(TEMPLATES)} only")
    return TEMPLATES[name]


@dataclass(frozen=True)
class Segment:
    """One piece of text LLaMA-Factory encodes on its own; `trained`: its tokens are labels (loss)."""
    text: str
    role: str        # "system", "human", "observation", "gpt" or "empty_thought"
    trained: bool


def render_segments(row: SharegptRow, template: TemplateSlots) -> list[Segment]:
    """The exact text LLaMA-Factory 0.9.5's supervised processor encodes for a sharegpt row, piece by
    piece, in its default mode (train_on_prompt false, mask_history false, enable_thinking true).

    `tokenizer.encode(s.text, add_special_tokens=False)` of each segment, concatenated, is LF's
    `input_ids`; the tokens of the `trained` segments are exactly the positions where its `labels`
    are not -100. What LF 0.9.5's source does (llamafactory/data/...):

    - template.py `Template._encode`: each message becomes a list of elements, and
      `_convert_elements_to_ids` encodes every string element on its own. The first message's
      elements are format_prefix (empty for qwen3), then format_system (only when the system is
      non-empty; qwen3 has no default system), then format_user: the system block is encoded
      separately from the first human turn. A slot is one string per message (StringFormatter),
      the content put in with str.replace, so braces in content are kept verbatim.
    - template.py `ReasoningTemplate.encode_multiturn`: with enable_thinking true (the DataArguments
      default) and mask_history false, for every gpt turn whose content holds neither `<think>` nor
      `</think>` it prepends `get_thought_word_ids` (the encoding of "<think>\n\n</think>\n\n",
      on its own) to that turn's response ids ("do compute loss"): the empty thought is trained.
      Thoughts already in the content are kept as they are (nothing removed in this mode).
      qwen3_nothink is a plain Template: no empty thought.
    - processor/supervised.py `SupervisedDatasetProcessor._encode_data_example`: per (prompt,
      response) pair, the prompt ids get IGNORE_INDEX labels (train_on_prompt false; qwen3 has no
      efficient_eos) and the response ids are their own labels. So the system block and every
      human/observation slot (which ends with the `<|im_start|>assistant\n` generation prompt) are
      not trained; each gpt slot (content + `<|im_end|>\n`) is.

    Truncation is ignored: LF cuts an example longer than cutoff_len (infer_seqlen), but export_sft
    keeps only rows whose count fits cutoff_len, so an exported row is never cut.
    """
    return [Segment(text, role, trained) for text, role, trained in render_pieces(row, template)]


def render_pieces(row: SharegptRow, template: TemplateSlots) -> Iterator[tuple[str, str, bool]]:
    """render_segments as plain (text, role, trained) tuples: the one home of the rendering, without
    building a dataclass per piece (count_template_tokens renders every exported turn)."""
    if row.system:
        yield template.system.format(row.system), "system", False
    thought = template.empty_thought
    for turn in row.conversations:
        role, value = turn["from"], turn["value"]
        if role == "gpt":
            if thought and "<think>" not in value and "</think>" not in value:
                yield thought, "empty_thought", True
            yield template.gpt.format(value), "gpt", True
        else:
            yield getattr(template, role).format(value), role, False
