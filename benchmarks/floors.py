"""The floors any ingest pays, on the same JSONL files as the pipeline benchmark.

python benchmarks/floors.py orjson TRACES_DIR            # parse every line, 2 processes
python benchmarks/floors.py duckdb TRACES_DIR OUT.parquet  # read_json -> COPY, 1,000-row groups
"""

from __future__ import annotations

import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path


def _parse(path: str) -> int:
    import orjson

    n = 0
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                orjson.loads(line)
                n += 1
    return n


def orjson_floor(traces: Path) -> None:
    files = sorted(map(str, traces.glob("*.jsonl")))
    with ProcessPoolExecutor(2) as pool:
        print(f"{sum(pool.map(_parse, files))} rows parsed")


def duckdb_floor(traces: Path, out: Path) -> None:
    import duckdb

    con = duckdb.connect()
    con.execute(f"""COPY (SELECT * FROM read_json('{traces}/*.jsonl', format='newline_delimited',
                                                  maximum_object_size=67108864))
                    TO '{out}' (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 1000)""")
    print(con.execute(f"SELECT count(*) FROM '{out}'").fetchone()[0], "rows written")


if __name__ == "__main__":
    kind, traces = sys.argv[1], Path(sys.argv[2])
    orjson_floor(traces) if kind == "orjson" else duckdb_floor(traces, Path(sys.argv[3]))
