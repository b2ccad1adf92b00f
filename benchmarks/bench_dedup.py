"""The dedup stage's work at scale: N task instructions of real size (median about 1,500
characters) with planted near-duplicates and benchmark copies, through run_dedup (exact, MinHash,
hashed-n-gram embeddings in LanceDB with the IVF_FLAT index, decontamination).

    uv run python benchmarks/bench_dedup.py --tasks 100000 [--work .bench/dedup] [--json out.json]

Each phase runs in a fresh process (its peak RSS is its own):
- full: empty embedding cache;
- cached: the same tasks again, every vector from the cache;
- add_source: 1% more tasks as a new source, cache warm (only their texts are embedded);
- one_thread: `full` again with one thread everywhere (OMP, LanceDB, Rayon): the tables must be equal;
- minhash: our NumPy signatures against datasketch 2.0.0 (`MinHash.update_batch`, 112 permutations)
  on the same shingles: the reference, measured in the same run (datasketch is not a dependency: it
  runs under `uv run --with datasketch==2.0.0`; skipped when that cannot be installed).
Quality at scale: recall of the planted variants per kind, precision of the clustered pairs, and
recall of the planted benchmark copies.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
ONE_THREAD = {
    "OMP_NUM_THREADS": "1",
    "LANCE_CPU_THREADS": "1",
    "RAYON_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
VARIANT_RATE = 0.10
BENCHMARK_ITEMS = 50
BENCHMARK_COPIES = 20


# --- the data -------------------------------------------------------------------------------


def vocabulary(rng: random.Random, n: int = 20000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(2, 10))) for _ in range(n)]


def original(rng: random.Random, vocab: list[str]) -> str:
    """A title and 3 to 10 paragraphs of Zipf-distributed words, paths and numbers."""

    def word() -> str:
        r = rng.random()
        if r < 0.04:
            return f"{rng.choice(vocab)}/{rng.choice(vocab)}.{rng.choice(['py', 'sh', 'json', 'toml'])}"
        if r < 0.08:
            return str(rng.randint(10, 99999))
        return vocab[
            min(int(rng.paretovariate(0.9)) - 1, len(vocab) - 1) if rng.random() < 0.6 else rng.randrange(len(vocab))
        ]

    def sentence() -> str:
        words = [word() for _ in range(rng.randint(6, 18))]
        return " ".join(words).capitalize() + "."

    title = " ".join(word() for _ in range(rng.randint(4, 9))).capitalize()
    paragraphs = [" ".join(sentence() for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(3, 10))]
    return "\n\n".join([title, *paragraphs])


def build(n: int, work: Path) -> dict:
    """tasks.parquet, benchmark/<item>/instruction.md and truth.json under `work`."""
    sys.path.insert(0, str(ROOT / "src"))
    from tracelake.sample.near_duplicates import exact, near_exact, paraphrase

    rng = random.Random(0)
    vocab = vocabulary(rng)
    bench = [original(rng, vocab) for _ in range(BENCHMARK_ITEMS)]
    for k, text in enumerate(bench):
        (work / "benchmark" / f"item-{k:03d}").mkdir(parents=True, exist_ok=True)
        (work / "benchmark" / f"item-{k:03d}" / "instruction.md").write_text(text)
    texts, variants, copies, originals = [], [], [], []
    copy_at = set(rng.sample(range(1, n), BENCHMARK_COPIES))
    for i in range(n):
        if i in copy_at:
            k = rng.randrange(BENCHMARK_ITEMS)
            texts.append(rng.choice([exact, near_exact])(rng, bench[k]))
            copies.append({"task": i, "item": f"item-{k:03d}"})
        elif originals and rng.random() < VARIANT_RATE:
            j = rng.choice(originals)  # a variant of an original (never of a variant or a copy)
            kind = rng.choices(["exact", "near_exact", "paraphrase"], [0.25, 0.35, 0.40])[0]
            make = {"exact": exact, "near_exact": near_exact, "paraphrase": paraphrase}[kind]
            texts.append(make(rng, texts[j]))
            variants.append({"task": i, "of": j, "kind": kind})
        else:
            originals.append(i)
            texts.append(original(rng, vocab))
    table = pa.table(
        {
            "task_id": [f"t{i:07d}" for i in range(n)],
            "source": ["bench"] * n,
            "task": [f"task-{i:07d}" for i in range(n)],
            "instruction": texts,
            "n_trajectories": [1 + (i % 7) for i in range(n)],
        }
    )
    pq.write_table(table, work / "tasks.parquet")
    truth = {"variants": variants, "copies": copies}
    (work / "truth.json").write_text(json.dumps(truth))
    sizes = sorted(len(t) for t in texts)
    return {
        "tasks": n,
        "median_chars": sizes[n // 2],
        "p90_chars": sizes[int(n * 0.9)],
        "mb": round(sum(sizes) / 1e6, 1),
        "variants": len(variants),
        "benchmark_copies": len(copies),
    }


# --- the phases (each in its own process) -----------------------------------------------------


def phase_dedup(work: Path, name: str, extra: int) -> dict:
    from tracelake.curate.dedup.run import run_dedup
    from tracelake.curate.params import DecontaminateParams, DedupParams

    tasks = pq.read_table(work / "tasks.parquet")
    if extra:  # a new source: copies of the first `extra` texts with one new word each
        new = tasks.slice(0, extra).to_pylist()
        for k, r in enumerate(new):
            r.update(task_id=f"u{k:07d}", source="new", task=f"new-{k:07d}", instruction=f"{r['instruction']} extra{k}")
        tasks = pa.concat_tables([tasks, pa.Table.from_pylist(new, schema=tasks.schema)]).sort_by("task_id")
    steps: dict[str, list[float]] = {}

    def progress(what: str, n: int) -> None:
        now = time.perf_counter()
        steps.setdefault(what, [now, now])[1] = now

    decon = DecontaminateParams(root=str(work), benchmarks={"bench": str(work / "benchmark")})
    start = time.perf_counter()
    result = run_dedup(
        tasks,
        DedupParams(cache=None),
        decon,
        lance_dir=work / f"lance-{name}",
        cache_root=work / "cache",
        progress=progress,
    )
    wall = time.perf_counter() - start
    pq.write_table(result.task_clusters, work / f"clusters-{name}.parquet")
    pq.write_table(result.contamination, work / f"contamination-{name}.parquet")
    return {
        "wall_s": round(wall, 1),
        "counts": result.counts,
        "cache": result.cache.__dict__,
        "last_tick_s": {k: round(v[1] - start, 1) for k, v in steps.items()},
    }


def phase_minhash(work: Path, which: str) -> dict:
    from tracelake.curate.dedup.minhash import signatures
    from tracelake.curate.dedup.shingles import WordHasher, shingle_set, words

    texts = pq.read_table(work / "tasks.parquet", columns=["instruction"]).column(0).to_pylist()
    hasher = WordHasher()
    sets = [shingle_set(hasher.hashes(words(t)), 5) for t in texts]
    start = time.perf_counter()
    if which == "ours":
        signatures(sets, 112, 0)
    else:
        from datasketch import MinHash

        for s in sets:
            m = MinHash(num_perm=112, seed=0)
            m.update_batch([int(x).to_bytes(8, "little") for x in s])
    return {"signatures_s": round(time.perf_counter() - start, 1), "texts": len(sets)}


def run_phase(args: list[str], env: dict[str, str] | None = None, with_datasketch: bool = False) -> dict:
    prefix = ["uv", "run", "--frozen", "--with", "datasketch==2.0.0", "python"] if with_datasketch else [sys.executable]
    start = time.perf_counter()
    proc = subprocess.run(
        [*prefix, __file__, *args], capture_output=True, text=True, cwd=ROOT, env={**os.environ, **(env or {})}
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_wall_s"] = round(wall, 1)
    return out


def quality(work: Path, name: str) -> dict:
    truth = json.loads((work / "truth.json").read_text())
    clusters = pq.read_table(work / f"clusters-{name}.parquet").to_pylist()
    cluster_of = {r["task_id"]: r["cluster_id"] for r in clusters}
    by_kind: dict[str, list[bool]] = {}
    for v in truth["variants"]:
        by_kind.setdefault(v["kind"], []).append(cluster_of[f"t{v['task']:07d}"] == cluster_of[f"t{v['of']:07d}"])
    group = {}
    for v in truth["variants"]:  # a variant's group is its original's (chains follow)
        group[v["task"]] = group.get(v["of"], v["of"])
    members: dict[str, list[int]] = {}
    for r in clusters:
        members.setdefault(r["cluster_id"], []).append(int(r["task_id"][1:]))
    pairs = [p for m in members.values() for p in itertools.combinations(sorted(m), 2)]
    true = sum(1 for a, b in pairs if group.get(a, a) == group.get(b, b))
    found = {
        r["task_id"]: r["benchmark_item"] for r in pq.read_table(work / f"contamination-{name}.parquet").to_pylist()
    }
    hits = sum(1 for c in truth["copies"] if found.get(f"t{c['task']:07d}") == c["item"])
    return {
        "recall_by_kind": {k: round(sum(v) / len(v), 4) for k, v in sorted(by_kind.items())},
        "n_by_kind": {k: len(v) for k, v in sorted(by_kind.items())},
        "clustered_pairs": len(pairs),
        "pair_precision": round(true / len(pairs), 4) if pairs else None,
        "decontamination_recall": round(hits / len(truth["copies"]), 4),
        "flagged": len(found),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=100000)
    parser.add_argument("--work", type=Path, default=ROOT / ".bench" / "dedup")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--extra", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    work = args.work.resolve()
    if args.phase:  # a child process: one phase, its result as the last line, with its peak RSS
        sys.path.insert(0, str(ROOT / "src"))
        kind, _, name = args.phase.partition(":")
        out = phase_dedup(work, name, args.extra) if kind == "dedup" else phase_minhash(work, name)
        out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        print(json.dumps(out))
        return
    import shutil

    if work.is_dir() and any(work.iterdir()) and not (work / "truth.json").is_file():
        sys.exit(f"{work} is not empty and not this benchmark's work directory: pass another --work")
    shutil.rmtree(work, ignore_errors=True)  # a previous run of this benchmark
    work.mkdir(parents=True)
    result: dict = {"data": build(args.tasks, work)}
    print(f"data: {result['data']}", flush=True)
    base = ["--work", str(work), "--tasks", str(args.tasks)]
    for name, phase, env, extra in (
        ("full", "dedup:full", None, 0),
        ("cached", "dedup:cached", None, 0),
        ("add_source", "dedup:add", None, args.tasks // 100),
        ("one_thread", "dedup:one", ONE_THREAD, 0),
    ):
        if name == "one_thread":
            shutil.rmtree(work / "cache", ignore_errors=True)  # recompute every vector with one thread
        result[name] = run_phase([*base, "--phase", phase, "--extra", str(extra)], env)
        print(f"{name}: {result[name]}", flush=True)
    same = all(
        (work / f"{t}-full.parquet").read_bytes() == (work / f"{t}-one.parquet").read_bytes()
        for t in ("clusters", "contamination")
    )
    result["one_thread"]["same_tables_as_full"] = same
    result["quality"] = quality(work, "full")
    print(f"quality: {result['quality']}\none thread, same tables: {same}", flush=True)
    result["minhash_ours"] = run_phase([*base, "--phase", "minhash:ours"])
    result["minhash_datasketch"] = run_phase([*base, "--phase", "minhash:datasketch"], with_datasketch=True)
    print(f"minhash signatures: ours {result['minhash_ours']}, datasketch {result['minhash_datasketch']}")
    out = args.json or ROOT / "benchmarks" / "results" / f"dedup-{args.tasks // 1000}k.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"-> {out}")


if __name__ == "__main__":
    main()
