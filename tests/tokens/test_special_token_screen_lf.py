"""Control-token literals as LLaMA-Factory 0.9.5 itself reads the SFT export (training environment).

- LF's own templates' thought and tool-call words are what TemplateSlots.response_words says an
  assistant turn may hold (qwen3, qwen3_nothink);
- a literal `<|im_end|>` left in the text is a real turn end to LF's loader (14 in a 12-message row),
  and the escaped export gives one per turn, with LF's input length equal to the exported n_tokens.

The model is a tiny random Qwen3 over Qwen3's real tokenizer (../shared/fixtures/qwen3-tokenizer,
the conftest's qwen3_tiny_model; no sample pipeline needed).
"""

from __future__ import annotations

import json

import pytest

from tracelake.export.sft import SftSettings, SftStats, convert_batch
from tracelake.tokens.special_tokens import ControlTokens
from tracelake.tokens.templates import TEMPLATES
from tracelake.tokens.tokenizer import load_tokenizer

from ..export.test_llamafactory import lf_load
from ..helpers import ROOT, lf_config, run_ok, slot_batch, train_python
from .test_special_token_screen import slots, twelve_messages

pytestmark = pytest.mark.train_env


def test_lf_templates_write_the_response_words_we_allow():
    code = (
        "import json; from llamafactory.data.template import TEMPLATES as T; "
        "print(json.dumps({n: [*T[n].thought_words, *T[n].tool_call_words] for n in ['qwen3', 'qwen3_nothink']}))"
    )
    got = json.loads(run_ok([str(train_python()), "-c", code], ROOT).strip().splitlines()[-1])
    assert got == {name: list(TEMPLATES[name].response_words) for name in got}


@pytest.mark.parametrize("policy", ["unscreened", "escape"])
def test_lf_reads_one_turn_end_per_turn_once_escaped(qwen3_tiny_model, tmp_path, policy):
    tiny = qwen3_tiny_model
    tok = load_tokenizer(tiny)
    template = TEMPLATES["qwen3"]
    control = ControlTokens.open(tiny / "tokenizer.json", template.markup())
    unscreened = ControlTokens(tokens=(), in_response=frozenset())  # the export as it was: text passed through
    settings = SftSettings("merge", None, tok, template, control if policy == "escape" else unscreened, "escape")
    table, rejects = convert_batch(*slot_batch(slots([twelve_messages()])), settings, SftStats())
    assert rejects == []
    got = lf_load(lf_config(table, tiny, tmp_path, "qwen3"), tmp_path, tmp_path, ids=True)
    (ids,) = got["input_ids"]
    turn_ends = ids.count(tok.token_to_id("<|im_end|>"))
    assert turn_ends == {"unscreened": 14, "escape": 12}[policy]
    assert got["lengths"] == table.column("n_tokens").to_pylist()
