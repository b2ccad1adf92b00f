"""A Qwen-style tokenizer for benchmarks (no hub here): Qwen2's split regex, NFC, byte-level BPE,
ChatML special tokens, trained on the first rows of the benchmark's own traces.

    python benchmarks/qwen_style_tokenizer.py TRACES_DIR OUT_DIR [--vocab 32768] [--mb 40]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import orjson
from tokenizers import Regex, normalizers, pre_tokenizers

from tracelake.tokens.token_count import SPLIT_PATTERNS
from tracelake.tokens.tokenizer import train_bpe

QWEN2 = next(p for p in SPLIT_PATTERNS if r"\p{N}|" in p)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]


def texts(traces: Path, limit: int):
    seen = 0
    for path in sorted(traces.glob("*.jsonl")):
        with open(path, "rb") as f:
            for line in f:
                for m in orjson.loads(line)["conversations"]:
                    seen += len(m["content"])
                    yield m["content"]
                if seen >= limit:
                    return


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--mb", type=int, default=40)
    args = ap.parse_args()
    split_byte_level = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok = train_bpe(
        texts(args.traces, args.mb << 20),
        args.vocab,
        split_byte_level,
        normalizer=normalizers.NFC(),
        special=SPECIAL,
        added=ADDED,
        min_frequency=2,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    tok.save(str(args.out / "tokenizer.json"))
    print(f"vocab {tok.get_vocab_size()} -> {args.out}")


if __name__ == "__main__":
    main()
