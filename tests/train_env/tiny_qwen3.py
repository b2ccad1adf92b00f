"""Build a tiny random Qwen3 (no hub) beside a tokenizer, for loader checks and CPU smoke training.

    <training env python> tests/train_env/tiny_qwen3.py TOKENIZER_DIR OUT_DIR

Runs in the training environment (transformers + torch). ~1.3M parameters with the sample's tokenizer.
`tiny_config` is its config alone (benchmarks/references/lf_tokenize.py writes it beside a tokenizer).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM


def tiny_config(vocab_size: int, eos_token_id: int | None, pad_token_id: int | None) -> Qwen3Config:
    """The tiny Qwen3's config: 2 layers, hidden size 64, tied embeddings, no BOS."""
    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=65536,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
    )


def main(tokenizer_dir: str, out: str) -> None:
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    for f in Path(tokenizer_dir).iterdir():
        if f.is_file():
            shutil.copy(f, out_dir / f.name)
    tok = AutoTokenizer.from_pretrained(out_dir)
    torch.manual_seed(0)
    Qwen3ForCausalLM(tiny_config(len(tok), tok.eos_token_id, tok.pad_token_id)).save_pretrained(out_dir)


if __name__ == "__main__":
    main(*sys.argv[1:])
