"""Stage `tokenizer`: the project's own small byte-level BPE tokenizer (an HF tokenizer directory),
for counting tokens on the sample and for tiny test models. No hub download: point filter.tokenizer
at your model's tokenizer directory to count with the real one."""

from __future__ import annotations

from pathlib import Path

from tracelake.core.stage import Context, Result, Stage
from tracelake.core.tokenizer import build_tokenizer


def run(ctx: Context) -> Result:
    p = ctx.params.tokenizer
    out = build_tokenizer(Path(p.out), vocab_size=p.vocab_size)
    return Result(summary=[f"tokenizer: byte-level BPE, vocab {p.vocab_size} -> {out}"])


STAGE = Stage("tokenizer", __doc__, run, params=("tokenizer",), outs=("${tokenizer.out}",))
