"""Load exported RL prompt shards with SkyRL's own PromptDataset (run with the python of the environment
holding skyrl 0.4 or skyrl-train 0.3.x).

    python tests/train_env/skyrl_load.py --tokenizer DIR --max-prompt-length N --out RESULT.json SHARD.parquet ...

Writes RESULT.json: {"len": len(dataset), "package": PromptDataset's module, "items": [{"uid", "env_class", "extra", "messages", "n_tokens"}, ...]}
where (messages, env_class, extra, uid) = dataset[i] and n_tokens is the prompt length exactly as
PromptDataset measures it when filtering (the chat template with the generation prompt). The tokenizer
is loaded from a local directory (no hub); set HF_HUB_OFFLINE=1 and HF_DATASETS_CACHE to a scratch dir.
This file imports nothing from tracelake: the trainers' environments do not have it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from transformers import AutoTokenizer

try:  # skyrl 0.4+ (the unified package), else skyrl-train 0.3.x
    from skyrl.train.dataset import PromptDataset
except ImportError:
    from skyrl_train.dataset import PromptDataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--max-prompt-length", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("files", nargs="+", help="explicit .parquet shard paths, in order")
    args = parser.parse_args()

    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    ds = PromptDataset(
        datasets=list(args.files), tokenizer=tok, max_prompt_length=args.max_prompt_length, num_workers=1
    )
    items = []
    for i in range(len(ds)):
        messages, env_class, extra, uid = ds[i]
        items.append(
            {
                "uid": uid,
                "env_class": env_class,
                "extra": extra,
                "messages": messages,
                "n_tokens": len(
                    tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
                ),
            }
        )
    result = {
        "len": len(ds),
        "tokenizer_class": type(tok).__name__,
        "package": PromptDataset.__module__,
        "items": items,
    }
    Path(args.out).write_text(json.dumps(result, sort_keys=True, default=repr))


if __name__ == "__main__":
    main()
