"""The model's tokenizer for benchmarks: Qwen3's real one (151,669 tokens), read in place from
../shared/fixtures/qwen3-tokenizer beside the project. Speed measured on a small BPE trained here
(benchmarks/qwen_style_tokenizer.py, 32K vocab) hides the real cost of a 151K vocabulary."""

from __future__ import annotations

from pathlib import Path

QWEN3_TOKENIZER = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "qwen3-tokenizer"


def qwen3_tokenizer() -> Path:
    """Qwen3's tokenizer directory; a clear error where it is not beside the project."""
    if not (QWEN3_TOKENIZER / "tokenizer.json").is_file():
        raise SystemExit(
            f"Qwen3's tokenizer is not at {QWEN3_TOKENIZER} (../shared/fixtures/qwen3-tokenizer beside the "
            "project): pass the model's tokenizer directory with --tokenizer DIR"
        )
    return QWEN3_TOKENIZER
