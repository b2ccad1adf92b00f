"""Load exported RL prompt shards with SkyRL's own PromptDataset (run with the TRAINING environment's python).

    python tests/train_env/skyrl_load.py --tokenizer DIR --max-prompt-length N --out RESULT.json SHARD.parquet ...

Writes RESULT.json: {"len": len(dataset), "items": [{"uid", "env_class", "extra", "messages", "n_tokens"}, ...]}
where (messages, env_class, extra, uid) = dataset[i] and n_tokens is the prompt length exactly as
PromptDataset measures it when filtering (the chat template with the generation prompt). The tokenizer
is loaded from a local directory (no hub); set HF_HUB_OFFLINE=1 and HF_DATASETS_CACHE to a scratch dir.
This file imports nothing from tracelake: the training environment does not have it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from skyrl_train.dataset import PromptDataset
from transformers import AutoTokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--max-prompt-length", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("files", nargs="+", help="explicit .parquet shard paths, in order")
    args = parser.parse_args()

    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    ds = PromptDataset(datasets=list(args.files), tokenizer=tok, max_prompt_length=args.max_prompt_length,
                       num_workers=1)
    items = []
    for i in range(len(ds)):
        messages, env_class, extra, uid = ds[i]
        items.append({"uid": uid, "env_class": env_class, "extra": extra, "messages": messages,
                      "n_tokens": len(tok.apply_chat_template(messages, add_generation_prompt=True))})
    result = {"len": len(ds), "tokenizer_class": type(tok).__name__, "items": items}
    Path(args.out).write_text(json.dumps(result, sort_keys=True, default=repr))


if __name__ == "__main__":
    main()
