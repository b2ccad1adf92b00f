"""SFT export throughput: selection rows -> sharegpt_v1 rows with exact template token counts -> shards.

    uv run dvc repro && uv run python benchmarks/bench_export_sft.py --rows 100000

Uses the built lake (trajectories) and tokenizer: N rows cycle through the pool's trajectories (as
upsampling does), then the same code as the export_sft stage converts, counts tokens and writes
zstd shards into a temporary directory. Reference measured in the same run: streaming the joined
rows (selection -> messages) out of DuckDB into Python, which any exporter has to pay.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tracelake.config import load_params
from tracelake.lake import ShardWriter
from tracelake.lakedb import connect
from tracelake.schema import load_schema
from tracelake.sft_export import SftStats, convert_batch, template_slots
from tracelake.tokenizer import load_tokenizer

QUERY = """
SELECT s.slot_id, s.trajectory_id, s.task_id, s.source, s.task, s.copy, s.name, t.messages
FROM read_parquet($selection, file_row_number = true) s JOIN trajectories t USING (trajectory_id)
ORDER BY s.file_row_number
"""


def fake_selection(pool: Path, rows: int, out: Path) -> Path:
    ids = pq.read_table(pool, columns=["trajectory_id", "task_id", "source", "task"]).to_pylist()
    sel = [{"slot_id": f"{i:016x}", **ids[i % len(ids)], "copy": i // len(ids), "name": f"{ids[i % len(ids)]['task']}_copy{i // len(ids):04d}"}
           for i in range(rows)]
    path = out / "selection.parquet"
    pq.write_table(pa.Table.from_pylist(sel), path)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100000)
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args()
    params = load_params(args.params)
    lake = Path(params.lake)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sel = fake_selection(lake / "pool" / "pool.parquet", args.rows, tmp)
        con = connect(lake, list(params.sources), tables=("trajectories",))

        t = time.perf_counter()
        n = 0
        for batch in con.sql(QUERY, params={"selection": str(sel)}).to_arrow_reader(256):
            n += len(batch.to_pylist())
        floor = time.perf_counter() - t

        tokenizer, stats, cache = load_tokenizer(params.export_sft.tokenizer), SftStats(), {}
        template = template_slots(params.train.sft.template)
        t = time.perf_counter()
        writer = ShardWriter(tmp / "shards", load_schema("sft_rows"), params.export_sft.rows_per_shard)
        for batch in con.sql(QUERY, params={"selection": str(sel)}).to_arrow_reader(256):
            rows, _ = convert_batch(batch.to_pylist(), same_role=params.export_sft.same_role,
                                    cutoff_len=params.train.sft.cutoff_len, tokenizer=tokenizer,
                                    template=template, stats=stats, token_cache=cache)
            for row in rows:
                writer.write(row)
        info = writer.close()
        export = time.perf_counter() - t
        size = sum(f.stat().st_size for f in (tmp / "shards").iterdir())
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"rows: {n:,} ({info.rows:,} exported, {len(writer.files)} shards, {size / 1e6:.0f} MB zstd)")
    print(f"reference (stream joined rows into Python): {floor:.1f} s ({n / floor:,.0f} rows/s)")
    print(f"export_sft (convert + count tokens + write): {export:.1f} s ({n / export:,.0f} rows/s), "
          f"{export / floor:.1f}x the reference; peak RSS {rss:,.0f} MB")


if __name__ == "__main__":
    main()
