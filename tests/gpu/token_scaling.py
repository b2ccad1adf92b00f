"""Check 4: how the filter's exact token counting scales with the executor (16 cores), same counts out.

    python tests/gpu/token_scaling.py --tokenizer DIR --out OUT [--rows 5000] [--workers local,4,16]
                                      [--work /tmp/gpu-tokens] [--budget-s 300] [--cpu-smoke]

Runs in a python with polars, numpy, orjson and tokenizers (PYTHONPATH with src/): no DuckDB, so that
polars (a 54 MB wheel) fits what a lent machine may carry.

1. The OpenThoughts-style trace table of check 3 (scaling.generate: `--rows` rows, one part
   file per 1/40th), read into conversations. Not timed.
2. The filter's counting loop (curate/filter.py `_count_tokens`, without its DuckDB reads): batches of
   TOKEN_BATCH conversations, each a shard (`count_chatml_shard`) mapped on the executor, the driver's
   counter shared before forking, what the workers encoded absorbed into its cache. Each run starts
   with an empty token cache of its own, so it does the whole work. `local` is one process (whose
   encoder already uses every core); a number is `processes` with that many workers.

PASS when every run gives the same count for every conversation, and 50 of them (spread over the
table) equal `len(tokenizer.encode(render_chatml(c)).ids)` computed directly. Writes
OUT/token_scaling.json: wall, CPU, conversations/s and speed-up against the first run.
`--cpu-smoke`: 300 rows, runs local,2.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import scaling  # tests/gpu/scaling.py: run as a script, this folder is sys.path[0]
from report import report

SPOT = 50
TOKEN_BATCH = 128  # curate/filter.py's (importing it needs DuckDB; test_gpu_checks.py holds them equal)


def conversations(traces: Path) -> list[list[dict]]:
    import orjson

    out = []
    for path in sorted(traces.glob("*.jsonl")):
        with path.open("rb") as f:
            out.extend(orjson.loads(line)["conversations"] for line in f)
    return out


def count(convs: list[list[dict]], tokenizer: str, cache: Path, executor) -> tuple[list[int], dict]:
    """The filter's counting loop over `convs` on `executor`: (counts in order, counter stats)."""
    import pyarrow as pa

    from tracelake.tokens.token_count import ChatmlShard, TokenCounter, absorb, count_chatml_shard, share, unshare

    where = (tokenizer, str(cache))
    totals: list[int] = []
    with TokenCounter.open(tokenizer, str(cache)) as counter:
        shards = (
            ChatmlShard(*where, pa.array(convs[i : i + TOKEN_BATCH]), None) for i in range(0, len(convs), TOKEN_BATCH)
        )
        share(counter, *where)
        try:
            for counted in executor.map(count_chatml_shard, shards):
                absorb(counter, counted.fresh, counted.stats)
                totals.extend(counted.totals)
        finally:
            unshare(*where)
        stats = dict(vars(counter.stats))
    return totals, stats


def check(args: argparse.Namespace, started: float) -> dict:
    from tracelake.core.executor import Executor
    from tracelake.tokens.tokenizer import load_tokenizer, render_chatml

    rows = 300 if args.cpu_smoke and args.rows is None else (args.rows or 5000)
    runs_wanted = (args.workers or ("local,2" if args.cpu_smoke else "local,4,16")).split(",")
    work, result = scaling.start(args, "token_scaling", rows, runs_wanted=runs_wanted)
    convs = conversations(work / "corpus" / "traces")
    result["conversations"] = len(convs)
    result["chars"] = sum(len(m.get("content") or "") for c in convs for m in c)
    tok = load_tokenizer(args.tokenizer)
    spots = sorted({round(i * (len(convs) - 1) / (SPOT - 1)) for i in range(SPOT)})
    direct = {i: len(tok.encode(render_chatml(convs[i]), add_special_tokens=False).ids) for i in spots}
    runs, reference = [], None
    for name in runs_wanted:
        if scaling.over_budget(args, started, runs, run=name):
            continue
        executor = Executor() if name == "local" else Executor("processes", int(name))
        cache = work / f"cache-{name}"
        cpu0, t = scaling.cpu_seconds(), time.perf_counter()
        totals, stats = count(convs, args.tokenizer, cache, executor)
        wall = time.perf_counter() - t
        run = {
            "run": name,
            "executor": executor.kind,
            "workers": executor.workers,
            "shards": executor.shards,
            "wall_s": round(wall, 2),
            "cpu_s": round(scaling.cpu_seconds() - cpu0, 1),
            "conversations_per_s": round(len(totals) / wall, 1),
            "tokens": sum(totals),
            "stats": stats,
        }
        if reference is None:
            reference = totals
        run["same_counts"] = totals == reference
        run["spot_mismatches"] = [i for i in spots if totals[i] != direct[i]]
        runs.append(run)
        shutil.rmtree(cache, ignore_errors=True)

    def problems(done: list[dict]) -> list[str]:
        found = [f"only {len(done)} run(s) finished"] if len(done) < 2 else []
        found += [f"{r['run']}: counts differ from {done[0]['run']}" for r in done if not r["same_counts"]]
        found += [
            f"{r['run']}: {len(r['spot_mismatches'])} of {len(spots)} spot counts differ from the tokenizer"
            for r in done
            if r["spot_mismatches"]
        ]
        if done and done[0]["tokens"] == 0:
            found.append("nothing counted")
        return found

    return scaling.finish(args, work, result, runs, problems)


def main() -> None:
    parser = scaling.arguments(
        __doc__, rows=(5000, 300), workers=("local,4,16", "local,2"), work="/tmp/gpu-tokens", budget_s=300
    )
    parser.add_argument("--tokenizer", required=True, help="a tokenizer directory or tokenizer.json")
    args = parser.parse_args()
    started = time.perf_counter()

    def passed(result: dict, runs: str) -> str:
        return f"{result.get('conversations')} conversations, {result.get('chars', 0) / 1e9:.2f} G chars; {runs}; same counts"

    report(
        "token_scaling",
        args.out,
        "token_scaling.json",
        lambda: check(args, started),
        lambda result: scaling.detail(result, lambda r: r["run"], "conversations_per_s", "conv/s", passed),
    )


if __name__ == "__main__":
    main()
