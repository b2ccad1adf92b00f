"""Embed texts with a transformers encoder from a local directory (no hub): mean of the last hidden
states over the attention mask, scaled to unit length; with sentence-transformers installed and a
sentence-transformers model (modules.json), its own pipeline instead.

Runs in the environment that holds torch and transformers (its own interpreter: they are not
tracelake's dependencies), started by tracelake.curate.dedup.embed; imports only the standard
library, NumPy and the model libraries.

    python encode_worker.py --model DIR --texts IN.jsonl --out OUT.npy [--batch-size 32] [--max-length 512]

IN.jsonl holds one JSON string per line; OUT.npy gets a (texts, dim) float32 array in that order.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def encode(model_dir: str, texts: list[str], batch_size: int, max_length: int) -> np.ndarray:
    import torch

    torch.manual_seed(0)
    if (Path(model_dir) / "modules.json").is_file():
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            pass
        else:
            model = SentenceTransformer(model_dir, device="cpu", local_files_only=True)
            return np.asarray(model.encode(texts, batch_size=batch_size, normalize_embeddings=True), dtype=np.float32)
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    model = AutoModel.from_pretrained(model_dir, local_files_only=True).eval()
    out = []
    with torch.inference_mode():
        for lo in range(0, len(texts), batch_size):
            batch = tokenizer(
                texts[lo : lo + batch_size], padding=True, truncation=True, max_length=max_length, return_tensors="pt"
            )
            hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
            out.append(torch.nn.functional.normalize(mean.float(), dim=-1).numpy())
    return np.concatenate(out) if out else np.zeros((0, model.config.hidden_size), dtype=np.float32)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--texts", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=512)
    args = parser.parse_args()
    texts = [json.loads(line) for line in Path(args.texts).read_text(encoding="utf-8").splitlines() if line]
    np.save(args.out, encode(args.model, texts, args.batch_size, args.max_length).astype(np.float32))


if __name__ == "__main__":
    main()
