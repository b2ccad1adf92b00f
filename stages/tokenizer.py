"""Stage `tokenizer`: the tokenizer every stage counts with, as an HF tokenizer directory at
tokenizer.out. `tokenizer.source: model` (the default) copies the tokenizer of train.sft.model (a
local directory, the HF hub cache, or a download where the hub is reachable) with
tokenizer_source.json naming it; `builtin` trains the project's own small byte-level BPE (the
embedded sample and tiny test models: no hub needed)."""

from __future__ import annotations

from pathlib import Path

from tracelake.core.stage import Context, Result, Stage, Streamed
from tracelake.tokens.model_tokenizer import copy_tokenizer, resolve
from tracelake.tokens.tokenizer import tokenizer_fingerprint, tokenizer_output


def run(ctx: Context) -> Result:
    p = ctx.params.tokenizer
    if p.source == "builtin":
        out = tokenizer_output(Path(p.out), vocab_size=p.vocab_size)
        return Result([out], summary=[f"tokenizer: byte-level BPE, vocab {p.vocab_size} -> {out.path}"])
    model = ctx.params.train.sft.model
    found = resolve(model)
    copied: list[str] = []

    def write(tmp: Path) -> None:
        copied.extend(copy_tokenizer(found, model, tmp))

    return Result(
        [Streamed(Path(p.out), write)],
        summary=lambda _: [
            f"tokenizer: {model}'s ({found.how}, {len(copied)} files, sha256 "
            f"{tokenizer_fingerprint(p.out)[:12]}) -> {p.out}"
        ],
    )


STAGE = Stage("tokenizer", __doc__, run, params=("tokenizer", "train.sft.model"), outs=("${tokenizer.out}",))
