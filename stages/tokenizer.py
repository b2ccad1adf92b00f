"""Stage `tokenizer`: the tokenizer every stage counts with, as an HF tokenizer directory at
tokenizer.out. `tokenizer.source: model` (the default) copies the tokenizer of train.sft.model (a
local directory, the HF hub cache, or a download where the hub is reachable) with
tokenizer_source.json naming it; `builtin` trains the project's own small byte-level BPE (the
embedded sample and tiny test models: no hub needed)."""

from __future__ import annotations

from pathlib import Path

from tracelake.core.model_tokenizer import copy_tokenizer, resolve
from tracelake.core.outputs import output_dir
from tracelake.core.stage import Context, Result, Stage
from tracelake.core.tokenizer import build_tokenizer, tokenizer_fingerprint


def run(ctx: Context) -> Result:
    p = ctx.params.tokenizer
    if p.source == "builtin":
        out = build_tokenizer(Path(p.out), vocab_size=p.vocab_size)
        return Result(summary=[f"tokenizer: byte-level BPE, vocab {p.vocab_size} -> {out}"])
    model = ctx.params.train.sft.model
    found = resolve(model)
    with output_dir(Path(p.out)) as tmp:
        copied = copy_tokenizer(found, model, tmp)
    return Result(
        summary=[
            f"tokenizer: {model}'s ({found.how}, {len(copied)} files, sha256 "
            f"{tokenizer_fingerprint(p.out)[:12]}) -> {p.out}"
        ]
    )


STAGE = Stage("tokenizer", __doc__, run, params=("tokenizer", "train.sft.model"), outs=("${tokenizer.out}",))
