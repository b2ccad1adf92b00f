"""The Hugging Face `datasets` way a user would write instead of tracelake, on the same JSONL:
load_dataset('json') -> filter (no timeouts, main traces only, >= 5 assistant turns) -> map to
LLaMA-Factory sharegpt rows -> to_parquet. Runs in its own venv (datasets==4.0.0, orjson).

    python benchmarks/references/hf_datasets.py --num-proc N --cache DIR --out OUT.parquet FILE.jsonl...
"""

from __future__ import annotations

import argparse

from datasets import Dataset, load_dataset

TAGS = {"user": "human", "tool": "observation", "assistant": "gpt"}


def keep(row: dict) -> bool:
    turns = sum(m["role"] == "assistant" for m in row["conversations"])
    return row["result"] != "AgentTimeoutError" and (row["trace_source"] or "main") == "main" and turns >= 5


def to_sharegpt(row: dict) -> dict:
    system = "\n\n".join(m["content"] for m in row["conversations"] if m["role"] == "system")
    turns = [{"from": TAGS[m["role"]], "value": m["content"]} for m in row["conversations"] if m["role"] != "system"]
    return {"conversations": turns, "system": system, "id": row["task"]}


def add_arguments(ap: argparse.ArgumentParser, num_proc: int) -> None:
    """The options this reference and hf_loop.py share: processes, the cache, the output and the input."""
    ap.add_argument("--num-proc", type=int, default=num_proc)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("files", nargs="+")


def load(args: argparse.Namespace) -> tuple[Dataset, int | None]:
    """load_dataset('json') of the input files, and the num_proc to give each step (None: one process)."""
    nproc = args.num_proc if args.num_proc > 1 else None
    return load_dataset("json", data_files=args.files, split="train", cache_dir=args.cache, num_proc=nproc), nproc


def main() -> None:
    ap = argparse.ArgumentParser()
    add_arguments(ap, num_proc=1)
    args = ap.parse_args()
    ds, nproc = load(args)
    ds = ds.filter(keep, num_proc=nproc)
    ds = ds.map(to_sharegpt, remove_columns=ds.column_names, num_proc=nproc)
    ds.to_parquet(args.out)
    print(f"{len(ds)} rows written")


if __name__ == "__main__":
    main()
