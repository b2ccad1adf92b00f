"""`tracelake diff` on two 100K-row versions: pool, selection and SFT export.

    uv run dvc repro && uv run python benchmarks/bench_diff.py --rows 100000

Builds two lakes in a temporary directory from the built sample: version A has --rows distinct
trajectories (the sample's pool rows tiled under new ids, each selected once, each exported as a
full sharegpt row taken from the sample's SFT export); version B is the ablation
min_assistant_turns = 7 (those rows dropped by the filter, recorded in B's dropped table) with the
selection refilled to --rows by giving the survivors more copies. Then times diff_versions on each
kind. Reference measured in the same run: one DuckDB scan of the columns a diff has to read from both
sides (ids, turns, tokens, and for the SFT rows a hash of every conversation).
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import duckdb
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracelake.core.outputs import read_manifest
from tracelake.explore.diff import diff_versions, resolve_version
from tracelake.explore.diff_html import render_html
from tracelake.params import load_params

NEW_MIN_TURNS = 7
SHARD_ROWS = 5000


def manifest(directory: Path, kind: str, dataset_id: str, version_id: str, **extra) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "manifest.json").write_bytes(
        orjson.dumps({"kind": kind, "dataset_id": dataset_id, "version_id": version_id, **extra})
    )


def build_version(
    root: Path,
    name: str,
    pool: pa.Table,
    dropped: pa.Table,
    slots: pa.Array,
    sft_source: pa.Table,
    funnel: dict,
    min_turns: int,
) -> None:
    """One lake: pool (+ dropped), a selection whose rows are pool rows `slots`, and its SFT export."""
    lake = root / name / "lake"
    (lake / "pool").mkdir(parents=True)
    pq.write_table(pool, lake / "pool" / "pool.parquet")
    pq.write_table(dropped, lake / "pool" / "dropped.parquet")
    manifest(lake / "pool", "pool", None, f"{name}pool", params={"min_assistant_turns": min_turns}, counts=funnel)
    picked = pool.take(slots)
    selection = pa.table(
        {
            "slot_id": pa.array([f"{name}{i:015x}" for i in range(len(slots))]),
            "trajectory_id": picked["trajectory_id"],
            "task_id": picked["task_id"],
            "source": picked["source"],
            "task": picked["task"],
            "copy": pa.array([0] * len(slots), pa.int32()),
            "name": picked["task"],
            "score": pa.array([0.0] * len(slots)),
        }
    )
    sel = lake / "selections" / "100k"
    sel.mkdir(parents=True)
    pq.write_table(selection, sel / "selection.parquet")
    manifest(
        sel,
        "selection",
        f"sel-100k-{name * 12}",
        f"{name}sel",
        inputs={"pool": f"{name}pool"},
        params={"scale": "100k", "rows": len(slots)},
    )
    export = lake / "exports" / "sft" / "100k"
    shard_dir = export / "shards"
    shard_dir.mkdir(parents=True)
    files = []
    for start in range(0, len(slots), SHARD_ROWS):
        part = selection.slice(start, SHARD_ROWS)
        rows = picked["bench_row"].slice(start, SHARD_ROWS).to_pylist()
        body = sft_source.take(pa.array([r % len(sft_source) for r in rows]))
        shard = pa.table(
            {
                "id": part["slot_id"],
                "conversations": body["conversations"],
                "system": body["system"],
                "slot_id": part["slot_id"],
                "trajectory_id": part["trajectory_id"],
                "task_id": part["task_id"],
                "source": part["source"],
                "task": part["task"],
                "copy": part["copy"],
                "n_tokens": body["n_tokens"],
            }
        )
        files.append(f"shards/train-{start // SHARD_ROWS:05d}.parquet")
        pq.write_table(shard, export / files[-1], compression="zstd")
    manifest(
        export,
        "export_sft",
        f"sft-100k-{name * 12}",
        f"{name}sft",
        inputs={"selection": f"{name}sel"},
        params={"scale": "100k"},
        counts={"files": files},
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100000)
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args()
    lake = Path(load_params(args.params).lake)
    sample_pool = pq.read_table(lake / "pool" / "pool.parquet")
    sft_dir = max(
        (d for d in (lake / "exports" / "sft").iterdir() if (d / "manifest.json").is_file()),
        key=lambda d: read_manifest(d)["counts"]["rows_out"],
    )
    sft_source = pq.read_table(
        [str(sft_dir / f) for f in read_manifest(sft_dir)["counts"]["files"]],
        columns=["conversations", "system", "n_tokens"],
    )
    n = args.rows
    pool_a = sample_pool.take(pa.array([i % len(sample_pool) for i in range(n)]))
    pool_a = pool_a.set_column(0, "trajectory_id", pa.array([f"{i * 2654435761 % (1 << 64):016x}" for i in range(n)]))
    pool_a = pool_a.append_column("bench_row", pa.array(range(n)))  # which SFT body the trajectory exports as
    keep = pc.greater_equal(pool_a["n_assistant_turns"], NEW_MIN_TURNS)
    pool_b = pool_a.filter(keep)
    gone = pool_a.filter(pc.invert(keep))
    dropped_b = pa.table(
        {
            "trajectory_id": gone["trajectory_id"],
            "task_id": gone["task_id"],
            "source": gone["source"],
            "rule": pa.array(["min_assistant_turns_v1"] * len(gone)),
            "detail": pc.binary_join_element_wise(
                pc.cast(gone["n_assistant_turns"], pa.string()), f" assistant turns < {NEW_MIN_TURNS}", ""
            ),
        }
    )
    dropped_a = dropped_b.slice(0, 0)

    def funnel(dropped: int, kept: int) -> dict:
        return {"total": {"in": n, "kept": kept, "dropped": {"min_assistant_turns_v1": dropped}}, "sources": {}}

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        build_version(root, "a", pool_a, dropped_a, pa.array(range(n)), sft_source, funnel(0, n), 5)
        build_version(
            root,
            "b",
            pool_b,
            dropped_b,
            pa.array([i % len(pool_b) for i in range(n)]),
            sft_source,
            funnel(len(gone), len(pool_b)),
            NEW_MIN_TURNS,
        )
        print(
            f"built two versions of {n:,} rows in {time.perf_counter() - t:.1f} s "
            f"(B drops {len(gone):,} trajectories; SFT shards "
            f"{sum(f.stat().st_size for f in root.rglob('*.parquet')) / 1e6:.0f} MB in all)"
        )
        for kind, rel in (
            ("pool", "lake/pool"),
            ("selection", "lake/selections/100k"),
            ("export_sft", "lake/exports/sft/100k"),
        ):
            with ExitStack() as stack:
                a = resolve_version(str(root / "a" / rel), stack)
                b = resolve_version(str(root / "b" / rel), stack)
                files = a.files() + b.files()
                cols = (
                    "trajectory_id, n_tokens, hash(system, conversations)"
                    if kind == "export_sft"
                    else (
                        "trajectory_id, n_tokens, n_assistant_turns"
                        if kind == "pool"
                        else "trajectory_id, task_id, source"
                    )
                )
                t = time.perf_counter()
                duckdb.execute(
                    f"SELECT count(*), sum(hash({cols})) FROM read_parquet($f, union_by_name := true)", {"f": files}
                ).fetchall()
                floor = time.perf_counter() - t
                t = time.perf_counter()
                report = diff_versions(a, b)
                took = time.perf_counter() - t
                t = time.perf_counter()
                size = len(orjson.dumps(report)) + len(render_html(report))
                rendered = time.perf_counter() - t
            s = report["summary"]["trajectories"]
            print(
                f"{kind:<11} diff {took:5.2f} s  (reference scan {floor:.2f} s, {took / floor:.1f}x)  "
                f"rows {report['summary']['rows_a']:,} -> {report['summary']['rows_b']:,}; "
                + ", ".join(f"{k} {v['trajectories']:,}" for k, v in s.items())
                + f"; JSON + HTML {rendered:.2f} s ({size / 1e6:.1f} MB)"
            )
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")


if __name__ == "__main__":
    main()
