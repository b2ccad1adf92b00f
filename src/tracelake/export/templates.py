"""LLaMA-Factory 0.9.5 chat templates as the pieces it encodes one by one (rule
lf_template_tokens_v1 in sft.py counts tokens with them), without any engine: params.yaml checks
train.sft.template against TEMPLATES."""

from __future__ import annotations

from dataclasses import dataclass

from tracelake.core.errors import BadParams


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
