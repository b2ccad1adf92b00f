"""The Hugging Face `datasets` way a user would write instead of tracelake, on the same JSONL:
load_dataset('json') -> filter (no timeouts, main traces only, >= 5 assistant turns) -> map to
LLaMA-Factory sharegpt rows -> to_parquet. Runs in its own venv (datasets==4.0.0, orjson).

    python benchmarks/references/hf_datasets.py --num-proc N --cache DIR --out OUT.parquet FILE.jsonl...
"""

from __future__ import annotations

import argparse

from datasets import load_dataset

TAGS = {"user": "human", "tool": "observation", "assistant": "gpt"}


def keep(row: dict) -> bool:
    turns = sum(m["role"] == "assistant" for m in row["conversations"])
    return row["result"] != "AgentTimeoutError" and (row["trace_source"] or "main") == "main" and turns >= 5


def to_sharegpt(row: dict) -> dict:
    system = "\n\n".join(m["content"] for m in row["conversations"] if m["role"] == "system")
    turns = [{"from": TAGS[m["role"]], "value": m["content"]} for m in row["conversations"] if m["role"] != "system"]
    return {"conversations": turns, "system": system, "id": row["task"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--num-proc", type=int, default=1)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    nproc = args.num_proc if args.num_proc > 1 else None
    ds = load_dataset("json", data_files=args.files, split="train", cache_dir=args.cache, num_proc=nproc)
    ds = ds.filter(keep, num_proc=nproc)
    ds = ds.map(to_sharegpt, remove_columns=ds.column_names, num_proc=nproc)
    ds.to_parquet(args.out)
    print(f"{len(ds)} rows written")


if __name__ == "__main__":
    main()
