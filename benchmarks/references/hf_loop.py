"""The Hugging Face `datasets` way through an iteration loop, for benchmarks/loop.py: the pipeline of
hf_datasets.py (load_dataset json -> filter -> map to sharegpt -> to_parquet) rerun against a warm
cache after the filter's threshold changes, and a new dataset size drawn from it. Runs in the HF venv.

    python benchmarks/references/hf_loop.py --min-turns 5 --cache DIR --out OUT.parquet FILE.jsonl...
    python benchmarks/references/hf_loop.py --min-turns 3 ...             # warm: a changed filter
    python benchmarks/references/hf_loop.py --min-turns 3 --rows N ...    # warm: + shuffle, N rows

`datasets` names a cached result by a fingerprint of the function's code, not of values it reads
from elsewhere: a threshold read from a global or a closure would find the old cache and give the
old answer. So the minimum assistant turns is written into the filter's source as a number literal
(KEEP, compiled per run): a new threshold is new code, a new fingerprint, and the filter and the
map after it run again, as a user editing that number in their script gets. With --rows the
filtered rows are shuffled (seed 0) and the first N taken (cycling when fewer are kept), as
tracelake's select makes a dataset of N rows. Prints the rows written and the fingerprints.
"""

from __future__ import annotations

import argparse

from hf_datasets import add_arguments, load, to_sharegpt  # the cold reference's (this directory)

KEEP = """
def keep(row):
    turns = sum(m["role"] == "assistant" for m in row["conversations"])
    return row["result"] != "AgentTimeoutError" and (row["trace_source"] or "main") == "main" and turns >= {min_turns}
"""


def make_keep(min_turns: int):
    """The filter with `min_turns` as a literal of its code (so in its fingerprint)."""
    namespace: dict = {"__name__": __name__}
    exec(compile(KEEP.format(min_turns=int(min_turns)), "<hf_loop keep>", "exec"), namespace)
    return namespace["keep"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--min-turns", type=int, required=True)
    ap.add_argument("--rows", type=int, help="shuffle (seed 0) and write this many rows")
    add_arguments(ap, num_proc=2)
    args = ap.parse_args()
    ds, nproc = load(args)
    ds = ds.filter(make_keep(args.min_turns), num_proc=nproc)
    filtered = ds._fingerprint
    ds = ds.map(to_sharegpt, remove_columns=ds.column_names, num_proc=nproc)
    if args.rows is not None:
        ds = ds.shuffle(seed=0)
        ds = ds.select([i % len(ds) for i in range(args.rows)] if args.rows > len(ds) else range(args.rows))
    ds.to_parquet(args.out)
    print(f"{len(ds)} rows written; filter fingerprint {filtered}, final {ds._fingerprint}")


if __name__ == "__main__":
    main()
