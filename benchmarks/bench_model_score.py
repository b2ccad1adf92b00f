"""The model scorer's own cost at 100K tasks: llm_response_length_v1 through the openai engine against
a local OpenAI-compatible server (tests/chat_server.py in its own process, answers of about
--answer-chars characters), then the rerun that finds every answer cached.

    uv run python benchmarks/bench_model_score.py --tasks 100000

Each phase runs in a fresh process (its peak RSS is its own):
- plain: the reference, measured in the same run: a bare httpx client on the same number of
  threads sends the same requests and keeps the answers' texts (what any client must do);
- answer: run_model_scorer with an empty cache (every answer flushed to the cache as it arrives),
  then the scores and responses tables written as the score stage writes them;
- cached: the same with every answer cached: no request is sent.
"""

from __future__ import annotations

import argparse
import json
import resource
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
MODEL = "bench-model"


def instructions(n: int, chars: int) -> list[tuple[str, str]]:
    """(task_id, instruction) pairs: distinct, deterministic, about `chars` characters each."""
    filler = "Fix the failing build and make every test pass. " * (chars // 48 + 1)
    return [(f"task-{i:07d}", f"Task {i}. {filler[:chars]}") for i in range(n)]


def tables(n: int, chars: int, directory: Path) -> duckdb.DuckDBPyConnection:
    """The two views the model scorer reads, over Parquet files as in the lake: tasks (instruction)
    and trajectories (one per task)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    if not (directory / "tasks.parquet").exists():
        ids, texts = zip(*instructions(n, chars))
        pq.write_table(pa.table({"task_id": list(ids), "instruction": list(texts)}), directory / "tasks.parquet")
        pq.write_table(pa.table({"task_id": list(ids)}), directory / "trajectories.parquet")
    con = duckdb.connect()
    for name in ("tasks", "trajectories"):
        con.read_parquet(str(directory / f"{name}.parquet")).create_view(name)
    return con


def model_params(base_url: str, concurrency: int):
    from tracelake.curate.score_params import ModelParams

    return ModelParams(
        backend="openai",
        name=MODEL,
        base_url=base_url,
        api_key_env=None,
        concurrency=concurrency,
        max_tokens=100_000,
        temperature=1.0,
        seed=0,
    )


def phase_plain(args, base_url: str) -> dict:
    import httpx

    from tracelake.curate.scoring.scorers import LlmResponseLength

    scorer = LlmResponseLength()
    prompts = [scorer.messages_of(scorer.render(text)) for _, text in instructions(args.tasks, args.instruction_chars)]
    client = httpx.Client(timeout=300, limits=httpx.Limits(max_connections=args.concurrency))

    def ask(messages):
        r = client.post(base_url + "/chat/completions", json={"model": MODEL, "messages": messages, "seed": 0})
        r.raise_for_status()
        return r.json()["choices"][0]["message"]["content"]

    start = time.perf_counter()
    with ThreadPoolExecutor(args.concurrency) as pool:
        texts = list(pool.map(ask, prompts))
    return {"seconds": time.perf_counter() - start, "answered": len(texts), "answer_chars": sum(map(len, texts))}


def phase_scorer(args, base_url: str) -> dict:
    from tracelake.core.outputs import output_dir
    from tracelake.core.schema import load_schema
    from tracelake.core.tables import TableWriter
    from tracelake.curate.scoring.answers import run_model_scorer
    from tracelake.curate.scoring.scorers import LlmResponseLength

    con = tables(args.tasks, args.instruction_chars, Path(args.cache).parent / "lake")
    start = time.perf_counter()
    run = run_model_scorer(LlmResponseLength(), con, model_params(base_url, args.concurrency), args.cache)
    scored = time.perf_counter()
    with output_dir(Path(args.out)) as tmp:  # as stages/score.py writes them
        scores, answers = TableWriter(tmp, load_schema("scores")), TableWriter(tmp, load_schema("responses"))
        for row in sorted(run.rows, key=lambda r: r["task_id"]):
            scores.write(row)
        for batch in run.answer_batches():
            answers.write_batch(batch)
        scores.close(), answers.close()
    end = time.perf_counter()
    return {
        "seconds": end - start,
        "scoring_seconds": scored - start,
        "writing_seconds": end - scored,
        "answered": run.computed,
        "cached": run.cached,
        "scored": len(run.rows),
        "failed": len(run.failures),
        "cache_parts": len(list(Path(args.cache).rglob("part-*.parquet"))),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--instruction-chars", type=int, default=1500)
    ap.add_argument("--answer-chars", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--phase", choices=["plain", "answer", "cached"], help=argparse.SUPPRESS)
    ap.add_argument("--base-url", help=argparse.SUPPRESS)
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.phase:  # one phase, in this fresh process
        result = phase_plain(args, args.base_url) if args.phase == "plain" else phase_scorer(args, args.base_url)
        result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(result))
        return

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.chat_server", str(port), str(args.answer_chars)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    base_url = server.stdout.readline().strip()
    results = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tables(args.tasks, args.instruction_chars, Path(tmp) / "lake").close()  # the lake files, made here
            common = [
                sys.executable,
                __file__,
                "--tasks",
                str(args.tasks),
                "--instruction-chars",
                str(args.instruction_chars),
                "--concurrency",
                str(args.concurrency),
                "--base-url",
                base_url,
                "--cache",
                f"{tmp}/cache",
                "--out",
                f"{tmp}/scores",
            ]
            for phase in ("plain", "answer", "cached"):
                out = subprocess.run([*common, "--phase", phase], capture_output=True, text=True)
                if out.returncode:
                    sys.exit(f"phase {phase} failed:\n{out.stderr[-3000:]}")
                results[phase] = json.loads(out.stdout.strip().splitlines()[-1])
                print(phase, results[phase], flush=True)
    finally:
        server.kill()
    ratio = results["answer"]["scoring_seconds"] / results["plain"]["seconds"]
    print(
        f"\n{args.tasks} tasks, instructions {args.instruction_chars} chars, answers ~{args.answer_chars} chars, "
        f"concurrency {args.concurrency}:"
    )
    print(
        f"  plain httpx client (reference): {results['plain']['seconds']:.1f} s, "
        f"peak {results['plain']['peak_rss_mb']:.0f} MB"
    )
    print(
        f"  answer (empty cache): {results['answer']['scoring_seconds']:.1f} s scoring "
        f"({ratio:.2f}x the reference) + {results['answer']['writing_seconds']:.1f} s writing the tables, "
        f"peak {results['answer']['peak_rss_mb']:.0f} MB, {results['answer']['cache_parts']} cache parts"
    )
    print(
        f"  cached (no request): {results['cached']['seconds']:.1f} s, peak {results['cached']['peak_rss_mb']:.0f} MB"
    )


if __name__ == "__main__":
    main()
