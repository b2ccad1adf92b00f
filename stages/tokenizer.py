"""DVC stage `tokenizer`: build the project's own small byte-level BPE tokenizer (an HF tokenizer
directory) for counting tokens on the sample and for tiny test models. No hub download: point
filter.tokenizer at your model's tokenizer directory to count with the real one.

    python stages/tokenizer.py [--params params.yaml]
"""

from __future__ import annotations

from pathlib import Path

from tracelake.core.stage import run_stage
from tracelake.core.tokens import build_tokenizer
from tracelake.params import stage_args


def main(argv: list[str] | None = None) -> None:
    params = stage_args(__doc__, argv)[0].tokenizer
    out = build_tokenizer(Path(params.out), vocab_size=params.vocab_size)
    print(f"tokenizer: byte-level BPE, vocab {params.vocab_size} -> {out}")


if __name__ == "__main__":
    run_stage(main)
