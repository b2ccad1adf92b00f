"""The executors against each other on the same corpus, in one run: ingest and the filter's exact
token counting (the two heavy stages of a first run) on `local` (one process), `processes` (this
machine's cores) and a real Ray cluster on this machine (a head node and N worker nodes of one CPU
each, joined through RAY_ADDRESS). Every run must write the same bytes as `local`: the benchmark
stops if one does not.

    uv run python benchmarks/bench_executors.py --rows 20000 [--workers 2] [--json out.json]
    uv run python benchmarks/bench_executors.py --rows 20000 --workers 1,4,16      # scaling, 16 cores

Input: benchmarks/openthoughts.py rows (benchmarks/pipeline.py `synth`, median ~60 KB
a row) and its Qwen-style byte-level BPE. Each measured step starts with empty ingest and token
caches, so it does the whole work; score and dedup run once, on `local`, untimed (the filter reads
their outputs). The Ray cluster is started before its steps and not timed: its start-up is the
cluster's, not the stage's; joining it is (in each step's wall). Wall, CPU and peak RSS per step
come from os.wait4 (benchmarks/pipeline.py `measure`); a Ray step's CPU is the driver's only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import shutil
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pipeline  # noqa: E402

STAGES = {"ingest": ("ingest", pipeline.SOURCE), "filter": ("filter",)}
OUTPUT = {"ingest": "lake/trajectories", "filter": "lake/pool"}


def digest(directory: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(directory.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(directory).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def set_caches(proj: Path, caches: Path, workers: int) -> None:
    """Empty caches for the next step (untracked params: no stage reruns for them), and the workers."""
    shutil.rmtree(caches, ignore_errors=True)
    params = yaml.safe_load((proj / "params.yaml").read_text())
    params["tokenizer"]["cache"] = str(caches / "tokens")
    params["ingest"]["cache"] = str(caches / "ingest")
    params["executor"]["workers"] = workers
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def run_kind(proj: Path, data: Path, log: Path, kind: str, workers: int, env: dict, label: str) -> dict:
    results = {}
    for name, args in STAGES.items():
        set_caches(proj, proj.parent / "caches", workers)
        if name == "ingest":
            pipeline.warm_input(data)
        step = pipeline.measure(
            f"{name} on {label}", [pipeline.PY, "-m", "stages", *args, "--executor", kind], proj, log, env
        )
        results[name] = {**vars(step), "output_sha256": digest(proj / OUTPUT[name])}
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument(
        "--workers", default="2", help="worker counts to measure, comma-separated (processes; Ray worker nodes)"
    )
    ap.add_argument("--work", type=Path, default=Path(".bench"))
    ap.add_argument("--kinds", default="local,processes,ray")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    log = work / "bench_executors.log"
    data = pipeline.synth(work, args.rows, log)
    tok = pipeline.tokenizer(work, data, log)
    proj = pipeline.project(work, "executors", data, tok, count=True, caches=work / "caches")
    for stage_name in ("ingest", "score", "dedup"):  # the filter's inputs, once, untimed
        args_ = STAGES["ingest"] if stage_name == "ingest" else (stage_name,)
        pipeline.measure(
            f"{stage_name} (setup)", [pipeline.PY, "-m", "stages", *args_, "--executor", "local"], proj, log
        )
    kinds = args.kinds.split(",")
    counts = [int(w) for w in args.workers.split(",")]
    runs: list[dict] = []
    if "local" in kinds:
        runs.append({"kind": "local", "workers": 1, **run_kind(proj, data, log, "local", 0, {}, "local")})
    for n in counts:
        if "processes" in kinds:
            runs.append(
                {"kind": "processes", "workers": n, **run_kind(proj, data, log, "processes", n, {}, f"{n} processes")}
            )
        if "ray" in kinds:
            from ray.cluster_utils import Cluster

            cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
            try:
                for _ in range(n):
                    cluster.add_node(num_cpus=1)
                cluster.wait_for_nodes()
                env = {"RAY_ADDRESS": cluster.address}
                runs.append(
                    {
                        "kind": f"ray, {n + 1} nodes",
                        "workers": n,
                        **run_kind(proj, data, log, "ray", 0, env, f"Ray, {n} worker nodes"),
                    }
                )
            finally:
                cluster.shutdown()
    reference = runs[0]
    for r in runs[1:]:
        for name in STAGES:
            if r[name]["output_sha256"] != reference[name]["output_sha256"]:
                raise SystemExit(f"{name} on {r['kind']} wrote other bytes than on {reference['kind']}")
    print(f"\n{args.rows:,} rows, {pipeline.input_mb(data):,.0f} MB of JSONL; every run wrote the same bytes")
    print(
        "| executor | workers | ingest wall s | ingest vs first | filter wall s | filter vs first | filter peak RSS MB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        i, f = r["ingest"], r["filter"]
        print(
            f"| {r['kind']} | {r['workers']} | {i['wall_s']:.1f} | {reference['ingest']['wall_s'] / i['wall_s']:.2f}x | "
            f"{f['wall_s']:.1f} | {reference['filter']['wall_s'] / f['wall_s']:.2f}x | {f['rss_mb']:,.0f} |"
        )
    if args.json:
        machine = {"cpus": pipeline.os.cpu_count(), "machine": platform.machine()}
        args.json.write_text(json.dumps({"rows": args.rows, "machine": machine, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
