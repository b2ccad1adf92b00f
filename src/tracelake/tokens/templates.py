"""LLaMA-Factory 0.9.5 chat templates as the pieces it encodes one by one (rule
lf_template_tokens_v1 in sft.py counts tokens with them), without any engine: params.yaml checks
train.sft.template against TEMPLATES. render_segments gives those pieces, and which are trained, in
each LF training mode (LfMode, MODES); tests/export/test_lf_render.py checks every mode against LF's own
get_dataset.

How LF 0.9.5 renders a sharegpt row (paths under llamafactory/, line numbers of the installed 0.9.5):

- data/template.py:132-170 `Template._encode`: each message becomes a list of elements and
  `_convert_elements_to_ids` (:113-130) encodes every string element on its own. The first
  message's elements are format_prefix (empty for qwen3), format_system (only when the system is
  non-empty; qwen3 has no default system), then format_user: the system block is encoded apart from
  the first human turn. A slot is one string per message (StringFormatter), the content put in
  with str.replace, so braces in content are kept verbatim.
- data/processor/supervised.py:52-106 `_encode_data_example`: per (prompt, response) pair from
  `template.encode_multiturn` (:67), the prompt ids get labels IGNORE_INDEX unless train_on_prompt
  (:83-88; qwen3 has no efficient_eos), the response ids are their own labels unless mask_history
  and not the last pair (:90-93). Each human/observation slot ends with the `<|im_start|>assistant\n`
  generation prompt and is a prompt; each gpt slot (content + `<|im_end|>\n`) is a response.
- data/template.py:439-472 `ReasoningTemplate.encode_multiturn` (qwen3; qwen3_nothink, :1979-1991,
  is a plain Template whose encode_multiturn, :76-87, ignores every thinking argument): the thought
  words are ("<think>\n", "\n</think>\n\n") (:554), `add_thought()` their concatenation, the
  empty thought "<think>\n\n</think>\n\n" (:100-102), encoded on its own (:109-111).
  `remove_thought` (:104-106) cuts every `<think>\n...\n</think>\n\n` and then strips leading
  newlines (also when nothing was cut; a `<think>x</think>` without those newlines stays).
  get_template_and_fix_tokenizer copies enable_thinking and preserve_thinking onto a reasoning
  template only (:656-663).

The modes (MODES; the DataArguments in hparams/data_args.py):

- `default` (train_on_prompt, mask_history false; enable_thinking true): thoughts are kept as
  written; a gpt turn with neither `<think>` nor `</think>` gets the empty thought prepended to its
  response, trained (template.py:460-470). Prompts untrained, every response trained.
- `mask_history` (data_args.py:54-57; preserve_thinking false, data_args.py:128-131):
  supervised.py:66 passes discarding_history_cot, so every gpt turn but the last has its thoughts
  removed (template.py:452-454) and gets no empty thought (only the last turn is considered,
  :457-458); only the last response is trained (supervised.py:90-93). LF encodes the pairs in reverse
  (supervised.py:69-70) but prepends each (:95-97): the ids come out in the original order, and the
  reversal only matters for truncation (it keeps the last turns), which export_sft rules out.
- `mask_history_preserve_thinking` (also preserve_thinking=true): no thought removed and every gpt
  turn without tags gets the empty thought as in default, but only the last response is trained.
- `no_thinking` (enable_thinking=false, data_args.py:124-127): every gpt turn has its thoughts
  removed (template.py:448-450); one left with no tags gets the empty thought appended to its
  PROMPT (:467-468), so it is not trained. With mask_history as well only the last turn gets it.
- `train_on_prompt` (data_args.py:50-53): every token is trained (supervised.py:83-84), the system
  block and the human/observation slots included; the rendering is default's.
  mask_history with train_on_prompt is refused by LF (data_args.py:182-183) and by LfMode.

LLaMA-Factory's v1 data engine (`USE_V1=1`, llamafactory/v1/ in the same 0.9.5), mode `v1`:

- v1/plugins/data_plugins/converter.py:103-164 `sharegpt_converter`: reads `conversations` only. The
  `system` column is dropped (a system prompt would have to be a `from: system` message); human ->
  user, observation -> tool, gpt -> assistant with loss weight 1.0, every other message 0.0.
- One training sample per row, every assistant turn trained (v1/core/utils/rendering.py:136-178);
  the v1 renderer never calls the tokenizer's chat template. v1/plugins/model_plugins/templates/
  qwen3.py:110-216 (qwen3_nothink.py:60-166 the same without thoughts): each message is one string
  encoded on its own, all its tokens weighted as the message: `<|im_start|>user\n{}<|im_end|>\n`;
  `<|im_start|>assistant\n{}<|im_end|>\n` (the header is trained); a run of tool messages shares one
  `<|im_start|>user ... <|im_end|>\n` around `\n<tool_response>\n{}\n</tool_response>` each.
- qwen3 only (qwen3.py:165-166): the last message, when it is an assistant turn after the last user
  query (a user message not wrapped in <tool_response>), becomes `<think>\n\n</think>\n\n` + the
  text with leading newlines stripped, even when the text already holds a thought. No thought is
  ever removed (thoughts are plain text to the converter).
- v1/utils/helper.py:92-110: a sample longer than cutoff_len is cut on the right (at collate time;
  v1's own default cutoff_len is 2048), so trained_tokens takes cutoff_len for v1 and counts only
  the labels left.

Truncation is ignored in the v0 modes: LF cuts an example longer than cutoff_len (supervised.py:72-81,
infer_seqlen), but export_sft keeps only rows whose default-mode count fits cutoff_len, so an exported
row is never cut in default mode. The other modes render the same pieces or fewer and shorter ones
(thoughts and leading newlines removed, empty thoughts dropped or moved, never added), so in
practice they fit too; the train_env test runs LF with the export's own cutoff_len in every mode.
Under mask_history a cut would keep the last turns, not the first (supervised.py:69-70).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator, NamedTuple

from tracelake.core.errors import BadParams, check
from tracelake.tokens.special_tokens import ChatMarkup

if TYPE_CHECKING:
    from tracelake.tokens.sharegpt import SharegptRow


@dataclass(frozen=True)
class TemplateSlots:
    """How a LLaMA-Factory 0.9.5 template turns each message into text it encodes on its own."""

    system: str
    human: str
    observation: str
    gpt: str
    empty_thought: str | None  # prepended to a gpt turn with no <think> (ReasoningTemplate)
    # (open, close) thought words of a ReasoningTemplate; None for a plain Template (qwen3_nothink)
    thought_words: tuple[str, str] | None = None
    # what LF's template writes inside a response, for every template (template.py:554-555, the
    # register_template defaults: thought_words and tool_call_words): an assistant turn's own
    # `<think>` and `<tool_call>` are this markup, not hostile literals (tokens/special_tokens.py).
    # Not in the repr, which keys cached token counts: it changes no rendering.
    response_words: tuple[str, ...] = field(
        default=("<think>\n", "\n</think>\n\n", "<tool_call>", "</tool_call>"), repr=False
    )

    def markup(self) -> ChatMarkup:
        """Every string this template writes around or inside messages, in LF v0 and v1 (_v1_pieces)."""
        slots = (self.system, self.human, self.observation, self.gpt, self.empty_thought or "", *_V1_MARKUP)
        return ChatMarkup(tuple(s.replace("{}", "\0") for s in slots), self.response_words)

    def remove_thought(self, content: str) -> str:
        """LF template.py:104-106 `Template.remove_thought`: every `<think>\n...\n</think>\n\n` (the
        thought words around anything, newlines included) cut out, then leading newlines stripped, even
        when nothing was cut. A reasoning template only."""
        check(self.thought_words is not None, "remove_thought on a template without thought words")
        return _thought_pattern(self.thought_words).sub("", content).lstrip("\n")


@functools.cache
def _thought_pattern(words: tuple[str, str]) -> re.Pattern[str]:
    return re.compile(f"{re.escape(words[0])}(.*?){re.escape(words[1])}", re.DOTALL)


_CHATML = dict(
    system="<|im_start|>system\n{}<|im_end|>\n",
    human="<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n",
    observation="<|im_start|>user\n<tool_response>\n{}\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
    gpt="{}<|im_end|>\n",
)
TEMPLATES = {
    # register_template's default thought_words (template.py:554); add_thought() is their concatenation
    "qwen3": TemplateSlots(
        **_CHATML, empty_thought="<think>\n\n</think>\n\n", thought_words=("<think>\n", "\n</think>\n\n")
    ),
    "qwen3_nothink": TemplateSlots(**_CHATML, empty_thought=None),
}


def template_slots(name: str) -> TemplateSlots:
    if name not in TEMPLATES:
        raise BadParams(
            f"params.yaml: train.sft.template {name!r}: export_sft counts tokens exactly for "
            f"{', '.join(TEMPLATES)} only"
        )
    return TEMPLATES[name]


@dataclass(frozen=True)
class Segment:
    """One piece of text LLaMA-Factory encodes on its own; `trained`: its tokens are labels (loss)."""

    text: str
    role: str  # "system", "human", "observation", "gpt" or "empty_thought"
    trained: bool


@dataclass(frozen=True)
class LfMode:
    """A LLaMA-Factory 0.9.5 training mode: the DataArguments (hparams/data_args.py) that change what
    its supervised processor encodes and trains. `lf_args()` are the yaml keys that select it. `v1`:
    the v1 data engine instead (USE_V1=1), which has none of those arguments."""

    name: str
    v1: bool = False
    mask_history: bool = False  # data_args.py:54-57: train on the last turn only
    enable_thinking: bool = True  # data_args.py:124-127 (LF's type allows None; not modelled here)
    train_on_prompt: bool = False  # data_args.py:50-53: prompt tokens get labels too
    preserve_thinking: bool = False  # data_args.py:128-131: keep history thoughts under mask_history

    def __post_init__(self) -> None:
        if self.v1 and (
            self.mask_history or self.train_on_prompt or self.preserve_thinking or not self.enable_thinking
        ):
            raise BadParams(f"LF mode {self.name!r}: the v1 data engine has no v0 training arguments")
        if self.mask_history and self.train_on_prompt:  # data_args.py:182-183 refuses it too
            raise BadParams(f"LF mode {self.name!r}: mask_history is incompatible with train_on_prompt")

    def lf_args(self) -> dict[str, bool]:
        if self.v1:
            return {}
        return {
            "mask_history": self.mask_history,
            "enable_thinking": self.enable_thinking,
            "train_on_prompt": self.train_on_prompt,
            "preserve_thinking": self.preserve_thinking,
        }


DEFAULT = LfMode("default")
MODES = {
    m.name: m
    for m in [
        DEFAULT,
        LfMode("no_thinking", enable_thinking=False),
        LfMode("mask_history", mask_history=True),
        LfMode("mask_history_preserve_thinking", mask_history=True, preserve_thinking=True),
        LfMode("mask_history_no_thinking", mask_history=True, enable_thinking=False),
        LfMode("train_on_prompt", train_on_prompt=True),
        LfMode("train_on_prompt_no_thinking", train_on_prompt=True, enable_thinking=False),
        LfMode("v1", v1=True),
    ]
}
V0_MODES = [name for name, m in MODES.items() if not m.v1]  # what a v0 LLaMA-Factory config can select

# train.sft.mode: which tokens LLaMA-Factory trains on (its loss mask), in plain words.
LOSS_MODES = {
    "default": "every assistant turn (prompts and tool results are context, never trained)",
    "mask_history": "only the last assistant turn of each conversation (LLaMA-Factory's mask_history)",
    "train_on_prompt": "every token, prompts and tool results included (LLaMA-Factory's train_on_prompt)",
}
# train.sft.thinking: what happens to the assistant turns' reasoning (<think>...</think>) with a reasoning
# template (qwen3), in plain words; LLaMA-Factory's enable_thinking / preserve_thinking underneath.
THINKING = {
    "keep": "reasoning is trained as written; an assistant turn without reasoning gets an empty "
    "<think> block before its answer, trained too: the model learns to skip thinking on such turns "
    "(enable_thinking: true; under mask_history, preserve_thinking: true)",
    "drop": "reasoning is removed from every assistant turn and the empty <think> block is part of the "
    "prompt, never trained: the model learns to answer without thinking (enable_thinking: false). LF "
    "removes only a <think>\\n...\\n</think>\\n\\n block: a <think>...</think> without those newlines "
    "(Harbor's) stays and is trained (export_sft counts and warns: rendering.ThoughtCounts)",
    "last_turn": "mask_history only: reasoning is kept on the trained last turn and removed from the "
    "history turns (enable_thinking: true, preserve_thinking: false)",
}
# (train.sft.mode, train.sft.thinking) -> the MODES entry that is LLaMA-Factory's combination of arguments
_CHOICES = {
    ("default", "keep"): "default",
    ("default", "drop"): "no_thinking",
    ("mask_history", "last_turn"): "mask_history",
    ("mask_history", "keep"): "mask_history_preserve_thinking",
    ("mask_history", "drop"): "mask_history_no_thinking",
    ("train_on_prompt", "keep"): "train_on_prompt",
    ("train_on_prompt", "drop"): "train_on_prompt_no_thinking",
}


def lf_mode(name: str) -> LfMode:
    if name not in MODES:
        raise BadParams(f"LF mode {name!r}: one of {', '.join(MODES)}")
    return MODES[name]


def chosen_mode(mode: str, thinking: str) -> LfMode:
    """The LLaMA-Factory mode of train.sft.mode and train.sft.thinking (LOSS_MODES, THINKING)."""
    if (mode, thinking) not in _CHOICES:
        raise BadParams(
            f"train.sft.thinking {thinking!r} with train.sft.mode {mode!r}: "
            + ("last_turn needs mode mask_history" if thinking == "last_turn" else f"one of {', '.join(THINKING)}")
        )
    return MODES[_CHOICES[(mode, thinking)]]


def thinking_of(mode: LfMode) -> str:
    """The train.sft.thinking choice a v0 mode makes (the inverse of chosen_mode)."""
    return next(t for (_, t), name in _CHOICES.items() if name == mode.name)


def render_segments(row: SharegptRow, template: TemplateSlots, mode: LfMode = DEFAULT) -> list[Segment]:
    """The exact text LLaMA-Factory 0.9.5's supervised processor encodes for a sharegpt row, piece by
    piece, in `mode` (see the module docstring for what each mode does and where LF does it).

    `tokenizer.encode(s.text, add_special_tokens=False)` of each segment, concatenated, is LF's
    `input_ids`; the tokens of the `trained` segments are exactly the positions where its `labels`
    are not -100 (and there equal the input ids).
    """
    return [Segment(text, role, trained) for text, role, trained in render_pieces(row, template, mode)]


def render_pieces(row: SharegptRow, template: TemplateSlots, mode: LfMode = DEFAULT) -> Iterator[tuple[str, str, bool]]:
    """render_segments as plain (text, role, trained) tuples: the one home of the rendering, without
    building a dataclass per piece (count_template_tokens renders every exported turn)."""
    if mode.v1:
        yield from _v1_pieces(row, template)
        return
    prompt_trained = mode.train_on_prompt
    last = max((k for k, t in enumerate(row.conversations) if t["from"] == "gpt"), default=-1)
    if row.system:
        yield template.system.format(row.system), "system", prompt_trained
    for k, turn in enumerate(row.conversations):
        role, value = turn["from"], turn["value"]
        if role != "gpt":
            yield getattr(template, role).format(value), role, prompt_trained
            continue
        plan = gpt_turn(template, mode, last=k == last)
        if plan.removes_thoughts:
            value = template.remove_thought(value)
        if plan.empty_thought and not has_thought_tags(value):
            yield template.empty_thought, "empty_thought", plan.empty_thought_trained
        yield template.gpt.format(value), "gpt", plan.trained


class TurnPlan(NamedTuple):
    """What LLaMA-Factory does with one gpt turn (render_pieces): remove its thoughts first; give it
    the empty thought when it has no thought tags; train its response; train that empty thought."""

    removes_thoughts: bool
    empty_thought: bool
    trained: bool
    empty_thought_trained: bool


def has_thought_tags(value: str) -> bool:
    """LF's test for a turn that already has a thought (template.py:460): either tag anywhere."""
    return "<think>" in value or "</think>" in value


def gpt_turn(template: TemplateSlots, mode: LfMode, *, last: bool) -> TurnPlan:
    """The plan of a gpt turn in a v0 mode (the last gpt turn of its row, or one before it)."""
    reasoning = template.thought_words is not None  # ReasoningTemplate: only it reads the thinking args
    discard_history_cot = reasoning and mode.mask_history and not mode.preserve_thinking
    trained = not mode.mask_history or last
    return TurnPlan(
        removes_thoughts=(reasoning and not mode.enable_thinking) or (discard_history_cot and not last),
        empty_thought=bool(template.empty_thought) and (last or not discard_history_cot),
        trained=trained,
        empty_thought_trained=trained if mode.enable_thinking else mode.train_on_prompt,
    )


_TOOL_OPEN, _TOOL_CLOSE = "<tool_response>", "</tool_response>"
_V1_MARKUP = ("<|im_start|>user\n", "<|im_start|>assistant\n", "<|im_end|>\n", _TOOL_OPEN, _TOOL_CLOSE)


def _v1_pieces(row: SharegptRow, template: TemplateSlots) -> Iterator[tuple[str, str, bool]]:
    """The v1 data engine's pieces (module docstring): one per message, the system column dropped."""
    turns = [(t["from"], t["value"]) for t in row.conversations if t["from"] in ("human", "gpt", "observation")]
    last_query = next(
        (
            k
            for k in range(len(turns) - 1, -1, -1)
            if turns[k][0] == "human" and not (turns[k][1].startswith(_TOOL_OPEN) and turns[k][1].endswith(_TOOL_CLOSE))
        ),
        len(turns) - 1,
    )
    reasoning = template.thought_words is not None
    for k, (role, value) in enumerate(turns):
        if role == "human":
            yield f"<|im_start|>user\n{value}<|im_end|>\n", "human", False
        elif role == "gpt":
            if reasoning and k == len(turns) - 1 and k > last_query:
                value = "<think>\n\n</think>\n\n" + value.lstrip("\n")
            yield f"<|im_start|>assistant\n{value}<|im_end|>\n", "gpt", True
        else:
            opens = k == 0 or turns[k - 1][0] != "observation"
            closes = k == len(turns) - 1 or turns[k + 1][0] != "observation"
            yield (
                (
                    ("<|im_start|>user" if opens else "")
                    + f"\n{_TOOL_OPEN}\n{value}\n{_TOOL_CLOSE}"
                    + ("<|im_end|>\n" if closes else "")
                ),
                "observation",
                False,
            )


def trained_tokens(
    row: SharegptRow, template: TemplateSlots, mode: LfMode, count: Callable[[str], int], cutoff_len: int | None = None
) -> int:
    """Tokens of `row` LLaMA-Factory trains on (labels != -100) in `mode`; `count(text)` is the number
    of ids the tokenizer gives a text encoded on its own (no special tokens added). `cutoff_len`: v1
    keeps only the first cutoff_len tokens of a sample (the v0 modes ignore it: module docstring)."""
    if not (mode.v1 and cutoff_len is not None):
        return sum(count(text) for text, _, trained in render_pieces(row, template, mode) if trained)
    return truncated_trained(
        [(count(text), trained) for text, _, trained in render_pieces(row, template, mode)], cutoff_len
    )


def truncated_trained(pieces: list[tuple[int, bool]], cutoff_len: int) -> int:
    """Trained tokens among the first cutoff_len of (tokens, trained) pieces in order."""
    room, total = cutoff_len, 0
    for n, trained in pieces:
        if room <= 0:
            break
        total += min(n, room) if trained else 0
        room -= n
    return total
