"""SFT export throughput and memory: selection slots -> sharegpt_v1 rows with exact template token
counts -> zstd shards.

    uv run dvc repro && uv run python benchmarks/bench_export_sft.py --rows 100000 [--tokenizer DIR|params]

Uses the built lake (trajectories, pool): N slots cycle through the pool's rollouts (as upsampling
does), then the export_sft stage's own functions stream, convert, count and write shards into a
temporary directory. The tokens are counted with the model's tokenizer: by default Qwen3's real one
(../shared/fixtures/qwen3-tokenizer beside the project, benchmarks/model_tokenizer.py), `params` for
the project's own (export_sft.tokenizer), or any tokenizer directory. Reference measured in the
same run: streaming the selected rollouts' messages out of the trajectories Parquet into Python,
which any exporter has to pay.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from tracelake.core.lake import Lake
from tracelake.core.schema import load_schema
from tracelake.core.tables import ShardWriter
from tracelake.export.sft import SftSettings, SftStats, convert_batch, trajectories_with_slots
from tracelake.params import load_params
from tracelake.tokens.special_tokens import ControlTokens
from tracelake.tokens.templates import template_slots
from tracelake.tokens.token_count import TokenCounter
from tracelake.tokens.tokenizer import tokenizer_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_tokenizer import qwen3_tokenizer  # noqa: E402


def fake_slots(pool: Path, rows: int) -> list[dict]:
    ids = pq.read_table(pool, columns=["trajectory_id", "task_id", "source", "task"]).to_pylist()
    return [
        {
            "slot_id": f"{i:016x}",
            **ids[i % len(ids)],
            "copy": i // len(ids),
            "name": f"{ids[i % len(ids)]['task']}_copy{i // len(ids):04d}",
        }
        for i in range(rows)
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100000)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument(
        "--tokenizer",
        help="the model's tokenizer directory; default: Qwen3's (../shared/fixtures/qwen3-tokenizer); "
        "'params': the project's export_sft.tokenizer",
    )
    args = ap.parse_args()
    params = load_params(args.params)
    if args.tokenizer == "params":
        model_tokenizer = params.export_sft.tokenizer
    else:
        model_tokenizer = args.tokenizer or qwen3_tokenizer()
    lake = Path(params.lake)
    slots = fake_slots(lake / "pool" / "pool.parquet", args.rows)
    files = Lake(lake).table_files("trajectories", list(params.sources))
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    t = time.perf_counter()
    n = 0
    for trajectories, by_id in trajectories_with_slots(slots, files):
        n += sum(len(by_id[t]) for t in trajectories.column("trajectory_id").to_pylist())
        trajectories.column("messages").to_pylist()
    floor = time.perf_counter() - t

    # one counter for the run, as the stage opens it (no disk cache here: every segment is encoded; a
    # plain Tokenizer would be parsed into a new counter at every batch, ~0.5 s each for Qwen3's)
    tokenizer, stats = TokenCounter.open(model_tokenizer), SftStats()
    template = template_slots(params.train.sft.template)
    control = ControlTokens.open(tokenizer_file(model_tokenizer), template.markup())  # as export_sft does
    cutoff_len, special_tokens = params.train.sft.cutoff_len, params.filter.special_tokens
    settings = SftSettings(params.export_sft.same_role, cutoff_len, tokenizer, template, control, special_tokens)
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        writer = ShardWriter(Path(tmp) / "shards", load_schema("sft_rows"), params.export_sft.rows_per_shard)
        for trajectories, by_id in trajectories_with_slots(slots, files):
            rows, _ = convert_batch(trajectories, by_id, settings, stats)
            writer.write_batch(rows)
        info = writer.close()
        export = time.perf_counter() - t
        size = sum(f.stat().st_size for f in (Path(tmp) / "shards").iterdir())
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"tokenizer: {Path(model_tokenizer).name}")
    print(f"rows: {n:,} ({info.rows:,} exported, {len(writer.files)} shards, {size / 1e6:.0f} MB zstd)")
    print(f"reference (stream the selected rollouts' messages into Python): {floor:.1f} s ({n / floor:,.0f} rows/s)")
    print(
        f"export_sft (convert + count tokens + write): {export:.1f} s ({n / export:,.0f} rows/s), "
        f"{export / floor:.1f}x the reference"
    )
    print(f"peak RSS {rss:,.0f} MB ({rss_before:,.0f} MB before streaming: interpreter, libraries, the slots)")


if __name__ == "__main__":
    main()
