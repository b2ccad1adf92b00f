"""Segment encoders compared: characters per second counting the segments the token counter encodes.

    uv run python benchmarks/bench_encoders.py TRACES_DIR [--tokenizer DIR ...] [--rows 2000] [--json OUT]

TRACES_DIR holds JSONL traces with a `conversations` list (benchmarks/openthoughts.py writes them). Their
ChatML renderings are cut into segments as TokenCounter cuts them (SegmentRule.segments), each
distinct segment once, sampled down to --chars characters. Each tokenizer (the project's builtin
one, and each --tokenizer; by default Qwen3's real tokenizer, read from
../shared/fixtures/qwen3-tokenizer beside the project: the model's tokenizer, whose 151K vocabulary
is what the speed is about) counts them with:

- `tokenizers`: `encode_batch_fast`, the reference every count must equal (1 thread:
  TOKENIZERS_PARALLELISM=false; N threads: a Rayon pool of N, RAYON_NUM_THREADS);
- `tiktoken (tracelake)`: tokens/fast_bpe.py's TiktokenCounts, as the counter runs it (its own NFC, a
  thread pool over strided slices);
- `tiktoken encode_ordinary_batch`: tiktoken's own batch call on the same encoding (NFC first);
- `bpe-qwen`: where installed, and only for Qwen's split pattern (the one it implements), from
  vocab.json and merges.txt written out of the tokenizer.json.

The table gives chars/s (wall), the speed-up over `tokenizers` at the same thread count, chars per
CPU second (all threads of the process: steadier than wall time where other work shares the cores),
and whether every segment's count equals the reference. Timings on a shared machine are noisy:
compare rows of one run.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "2")  # before tokenizers starts its pool: the largest N
import orjson  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

from tracelake.tokens import fast_bpe  # noqa: E402
from tracelake.tokens.token_count import SPLIT_PATTERNS, SegmentRule, split_pattern, split_regex  # noqa: E402
from tracelake.tokens.tokenizer import build_tokenizer, render_chatml, tokenizer_file  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_tokenizer import qwen3_tokenizer  # noqa: E402

QWEN2 = next(p for p in SPLIT_PATTERNS if r"\p{N}|" in p)


def segments(traces: Path, rows: int, rule: SegmentRule, chars: int) -> list[str]:
    """Distinct segments of the first rows of every file (rows in all), every k-th kept to fit `chars`."""
    files = sorted(traces.glob("*.jsonl"))
    per_file = max(1, -(-rows // len(files)))
    out: list[str] = []
    for path in files:
        with open(path, "rb") as f:
            for _, line in zip(range(per_file), f):
                rule.segments(render_chatml(orjson.loads(line)["conversations"]), out)
    distinct = list(dict.fromkeys(out))
    step = max(1, -(-sum(map(len, distinct)) // chars))
    return distinct[::step]


def hf_counts(tok: Tokenizer, threads: int) -> Callable[[list[str]], list[int]]:
    def run(texts: list[str]) -> list[int]:
        os.environ["TOKENIZERS_PARALLELISM"] = "true" if threads > 1 else "false"  # read at each call
        return [len(e) for e in tok.encode_batch_fast(texts, add_special_tokens=False)]

    return run


def tiktoken_batch(counts: fast_bpe.TiktokenCounts, threads: int) -> Callable[[list[str]], list[int]]:
    import tiktoken

    enc = tiktoken.Encoding.__new__(tiktoken.Encoding)
    enc._core_bpe = counts._bpe  # the same encoding; tiktoken's own batch call around it
    normalize = counts._normalize or (lambda t: t)

    def run(texts: list[str]) -> list[int]:
        normal = [t if t.isascii() else normalize(t) for t in texts]
        return [len(ids) for ids in enc.encode_ordinary_batch(normal, num_threads=threads)]

    return run


def bpe_qwen(config: dict, workdir: Path):
    """bpe-qwen's tokenizer for this vocabulary, or None where it is not installed. Its package
    imports transformers on import: the compiled module is loaded on its own."""
    spec = importlib.util.find_spec("bpe_qwen")
    if spec is None or not spec.submodule_search_locations:
        return None
    so = next(Path(spec.submodule_search_locations[0]).glob("bpe_qwen*.so"), None)
    if so is None:
        return None
    ext_spec = importlib.util.spec_from_file_location("bpe_qwen.bpe_qwen", so)
    ext = importlib.util.module_from_spec(ext_spec)
    ext_spec.loader.exec_module(ext)
    model = config["model"]
    (workdir / "vocab.json").write_text(json.dumps(model["vocab"], ensure_ascii=False))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    (workdir / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    return ext.QwenTokenizer(str(workdir))


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime


def measure(run: Callable[[list[str]], list[int]], texts: list[str], repeat: int) -> tuple[float, float, list[int]]:
    """(wall seconds, CPU seconds, counts) of the fastest of `repeat` runs."""
    best, cpu, counts = float("inf"), 0.0, []
    for _ in range(repeat):
        t, c = time.perf_counter(), cpu_seconds()
        counts = run(texts)
        wall, used = time.perf_counter() - t, cpu_seconds() - c
        if wall < best:
            best, cpu = wall, used
    return best, cpu, counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", type=Path)
    ap.add_argument(
        "--tokenizer",
        action="append",
        default=[],
        help="a tokenizer.json or its directory (repeatable); default: Qwen3's, ../shared/fixtures/qwen3-tokenizer",
    )
    ap.add_argument("--no-builtin", action="store_true", help="leave out the project's builtin tokenizer")
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--chars", type=int, default=16_000_000, help="sample the distinct segments down to this")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each fast engine; the best counts")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    threads = [int(n) for n in args.threads.split(",")]
    tokenizers = args.tokenizer or [str(qwen3_tokenizer())]
    os.environ["RAYON_NUM_THREADS"] = str(max(threads))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = [] if args.no_builtin else [("builtin", build_tokenizer(Path(tmp) / "builtin") / "tokenizer.json")]
        paths += [(Path(p).parent.name if Path(p).is_file() else Path(p).name, tokenizer_file(p)) for p in tokenizers]
        for name, path in paths:
            config = json.loads(path.read_text())
            tok = Tokenizer.from_file(str(path))
            texts = segments(args.traces, args.rows, SegmentRule.of(config), args.chars)
            chars = sum(map(len, texts))
            t = time.perf_counter()
            fast, why = fast_bpe.engine(tok, split_pattern)
            setup = time.perf_counter() - t
            print(f"{name}: {len(texts):,} segments, {chars / 1e6:.1f} M characters; tiktoken engine: {why or 'yes'}")
            engines: list[tuple[str, int, Callable]] = [("tokenizers", n, hf_counts(tok, n)) for n in threads]
            if fast is not None:
                for n in threads:
                    engines.append(("tiktoken (tracelake)", n, with_threads(fast, n).counts))
                    engines.append(("tiktoken encode_ordinary_batch", n, tiktoken_batch(fast, n)))
            qwen = bpe_qwen(config, Path(tmp)) if split_regex(config["pre_tokenizer"]) == QWEN2 else None
            if qwen is not None:
                for n in threads:
                    engines.append(
                        ("bpe-qwen", n, lambda texts, n=n: list(map(len, qwen.encode_batch_parallel(texts, n))))
                    )
            reference: list[int] | None = None
            base: dict[int, float] = {}
            for engine, n, run in engines:
                seconds, cpu, counts = measure(run, texts, 1 if engine == "tokenizers" else args.repeat)
                reference = reference or counts
                base.setdefault(n, seconds)
                row = {
                    "tokenizer": name,
                    "engine": engine,
                    "threads": n,
                    "segments": len(texts),
                    "chars": chars,
                    "seconds": round(seconds, 3),
                    "chars_per_s": round(chars / seconds),
                    "cpu_s": round(cpu, 3),
                    "chars_per_cpu_s": round(chars / cpu) if cpu else None,
                    "vs_tokenizers": round(base[n] / seconds, 2),
                    "equal": counts == reference,
                    "differing_segments": sum(a != b for a, b in zip(counts, reference)),
                    "setup_s": round(setup, 3) if engine.startswith("tiktoken") else None,
                }
                results.append(row)
                print(
                    f"  {engine:32} {n} thread{'s' if n > 1 else ' '} {chars / seconds / 1e6:8.2f} M chars/s"
                    f"  {row['vs_tokenizers']:6.2f}x  {chars / max(cpu, 1e-9) / 1e6:8.2f} M chars/CPU s  equal: {row['equal']}"
                    + ("" if row["equal"] else f" ({row['differing_segments']} segments differ)"),
                    flush=True,
                )
    print(f"load average at the end: {os.getloadavg()[0]:.2f} (2 cores: above 2 the numbers are shared)")
    if args.json:
        args.json.write_text(json.dumps({"rows": args.rows, "chars": args.chars, "results": results}, indent=2) + "\n")


def with_threads(fast: fast_bpe.TiktokenCounts, threads: int) -> fast_bpe.TiktokenCounts:
    counts = copy.copy(fast)
    counts.threads = threads
    return counts


if __name__ == "__main__":
    main()
