"""Pre-tokenized SFT datasets (export/pretokenized.py): seconds and memory to write N real-sized rows.

    uv run python benchmarks/bench_pretokenized.py [--rows 1000] [--tokenizer DIR] [--lf] [--json OUT]

Rows: OpenThoughts-Agent-style traces at realistic size (benchmarks/openthoughts.py: median ~64 KB per row,
every row's text drawn fresh but the shared preamble), converted as export_sft converts them
(to_sharegpt, merge). Each run writes the directory LLaMA-Factory loads through tokenized_path, in a
fresh process so its peak RSS is its own:

- cold: N rows, an empty token-id cache (every distinct segment encoded);
- warm: the same rows again (every segment from the cache);
- grown: a larger scale, N + N/5 rows over the warm cache (only the new rows' segments are encoded);
- packing: the N rows neat-packed, over the warm cache.

`--lf`: LLaMA-Factory's own tokenization of the same rows in the training environment (get_dataset with
preprocessing_num_workers 2 and no cache), the launch-time cost the directory replaces.
Tokenizer: Qwen3's real one by default (benchmarks/model_tokenizer.py).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_tokenizer import qwen3_tokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

WRITE = """
import json, sys, time
import pyarrow.parquet as pq
from tracelake.export.pretokenized import LfData, sharegpt_rows, write_pretokenized
rows, out, tokenizer, cache, mode, packing = sys.argv[1:7]
n = pq.ParquetFile(rows).metadata.num_rows
data = LfData(32768, neat_packing=packing == "neat")
t = time.perf_counter()
stats = write_pretokenized(sharegpt_rows([rows]), out, template="qwen3", mode=mode, data=data, tokenizer=tokenizer,
                           cache_dir=cache, n_rows=n)
# VmHWM: this process's own peak (ru_maxrss would carry the parent's across fork and exec)
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
print(json.dumps({"wall_s": time.perf_counter() - t, "peak_rss_mb": hwm / 1024, **stats.as_json()}))
"""

LF_TOKENIZE = """
import json, resource, sys, time
from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
from llamafactory.hparams import get_train_args
from llamafactory.model import load_tokenizer
data_dir, model, out = sys.argv[1:4]
args = dict(model_name_or_path=model, stage="sft", do_train=True, finetuning_type="full", dataset="d", dataset_dir=data_dir,
            template="qwen3", cutoff_len=32768, overwrite_cache=True, preprocessing_num_workers=2, report_to="none",
            bf16=False, output_dir=out)
model_args, data_args, training_args, _, _ = get_train_args(args)
tm = load_tokenizer(model_args)
template = get_template_and_fix_tokenizer(tm["tokenizer"], data_args)
t = time.perf_counter()
ds = get_dataset(template, model_args, data_args, training_args, "sft", **tm)["train_dataset"]
print(json.dumps({"wall_s": time.perf_counter() - t, "examples": len(ds)}))
"""


def run_json(cmd: list[str], env: dict | None = None) -> dict:
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=ROOT)
    if proc.returncode:
        raise SystemExit(proc.stdout[-2000:] + proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--tokenizer", type=Path)
    ap.add_argument("--lf", action="store_true", help="also LLaMA-Factory's own tokenization (training environment)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    tokenizer = args.tokenizer or qwen3_tokenizer()

    import pyarrow as pa
    import pyarrow.parquet as pq
    from openthoughts import openthoughts_rows

    from tracelake.tokens.sharegpt import ExportReject, dataset_info_entry, to_sharegpt

    result: dict = {"rows_asked": args.rows, "tokenizer": Path(tokenizer).name, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t = time.perf_counter()
        systems, conversations = [], []
        for r in openthoughts_rows(rows=args.rows + args.rows // 5, seed=0):
            try:
                s = to_sharegpt(r["conversations"])
            except ExportReject:
                continue
            systems.append(s.system)
            conversations.append(s.conversations)
        n = args.rows
        (tmp / "data" / "d").mkdir(parents=True)
        rows = tmp / "data" / "d" / "train-00000.parquet"
        pq.write_table(pa.table({"system": systems[:n], "conversations": conversations[:n]}), rows, row_group_size=256)
        grown = tmp / "grown.parquet"
        pq.write_table(pa.table({"system": systems, "conversations": conversations}), grown, row_group_size=256)
        (tmp / "data" / "dataset_info.json").write_text(json.dumps({"d": dataset_info_entry("d")}))
        chars = sum(len(m["value"]) for c in conversations[:n] for m in c)
        result["rows"], result["chars"] = min(n, len(systems)), chars
        print(f"{result['rows']:,} rows, {chars / 1e6:.1f} M characters ({time.perf_counter() - t:.1f} s to make)")
        for name, source, packing in [
            ("cold", rows, ""),
            ("warm", rows, ""),
            ("grown", grown, ""),
            ("packing", rows, "neat"),
        ]:
            out = tmp / f"out-{name}"
            r = run_json(
                [
                    sys.executable,
                    "-c",
                    WRITE,
                    str(source),
                    str(out),
                    str(tokenizer),
                    str(tmp / "cache"),
                    "default",
                    packing,
                ]
            )
            r["bytes"] = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
            result[name] = r
            print(
                f"{name:9s} {r['wall_s']:6.1f} s  peak {r['peak_rss_mb']:6.0f} MB  {r['examples']:,} examples, "
                f"{r['tokens']:,} tokens, {r['ids']['encoded']:,} segments encoded "
                f"({r['ids']['encoded_chars'] / 1e6:.1f} M chars), {r['bytes'] / 1e6:.0f} MB written"
            )
        if args.lf:
            train_py = Path(os.environ.get("TRACELAKE_TRAIN_ENV") or ROOT / ".venv-train") / "bin" / "python"
            model = tmp / "model"
            subprocess.run(
                [str(train_py), str(ROOT / "tests" / "train_env" / "tiny_qwen3.py"), str(tokenizer), str(model)],
                check=True,
                capture_output=True,
            )
            env = {"HF_DATASETS_CACHE": str(tmp / "hf"), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
            r = run_json([str(train_py), "-c", LF_TOKENIZE, str(tmp / "data"), str(model), str(tmp / "lf-out")], env)
            result["llamafactory_2_workers"] = r
            print(f"LLaMA-Factory's own tokenization (2 workers): {r['wall_s']:.1f} s, {r['examples']:,} examples")
    result["peak_rss_mb_driver"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
