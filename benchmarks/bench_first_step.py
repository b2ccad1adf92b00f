"""LLaMA-Factory's time to its first training step, with and without the pre-tokenized export.

    uv run python benchmarks/exact_rows.py --rows 20000             # the project (once)
    uv run python benchmarks/bench_first_step.py --rows 20000 --scale 20k=20000 [--work .bench]
    uv run python benchmarks/bench_first_step.py --rows 20000 --scale 100k=100000 --free-tokenized

In the project benchmarks/exact_rows.py built (real-sized OpenThoughts-style traces counted with
Qwen3's real tokenizer), one more scale is selected and exported with `export_sft.pretokenize: always`
(timed: the export now also writes <export>/tokenized from the token cache), train_config generates
its LLaMA-Factory config, and `llamafactory-cli train` is started on it twice, in the training
environment, on a tiny random Qwen3 over Qwen3's tokenizer (the data path is the model's; a real
model adds the same load time to both): once as generated (tokenized_path: LLaMA-Factory loads the
tokenized dataset) and once without tokenized_path (LLaMA-Factory tokenizes the shards itself, with
preprocessing_num_workers 2 on this 2-core machine, a cold datasets cache). The time to the first step is the wall
time until the HF Trainer prints `***** Running training *****` (the dataset is built, the model
loaded, the first step starts); the process is then stopped (a 32K-token step of a 151K-vocabulary
model would need ~20 GB for its logits on CPU, and is the same in both).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from exact_rows import QWEN3  # noqa: E402
from pipeline import ROOT, stage  # noqa: E402

STARTED = "***** Running training *****"
LOADED = "Loaded tokenized dataset"


def first_step(train_py: Path, config: dict, scratch: Path, project: Path, log: Path) -> dict:
    """Start LLaMA-Factory on `config`, stop it when its first step starts: (seconds, loaded from disk)."""
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    path = scratch / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    env = {
        **os.environ,
        "HF_DATASETS_CACHE": str(scratch / "hf-datasets"),
        "HF_HUB_OFFLINE": "1",
        "CUDA_VISIBLE_DEVICES": "",
        "TOKENIZERS_PARALLELISM": "false",
    }
    cli = train_py.parent / "llamafactory-cli"
    start = time.perf_counter()
    seen_loaded, seconds = False, None
    with open(log, "a") as out:
        proc = subprocess.Popen(
            [str(cli), "train", str(path)],
            cwd=project,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
        for line in proc.stdout:
            out.write(line)
            seen_loaded = seen_loaded or LOADED in line
            if STARTED in line:
                seconds = time.perf_counter() - start
                break
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if seconds is None:
        raise SystemExit(f"LLaMA-Factory ended before its first step (exit {proc.returncode}): see {log}")
    cache_mb = sum(f.stat().st_size for f in scratch.rglob("*") if f.is_file()) / 1e6
    shutil.rmtree(scratch, ignore_errors=True)
    return {"seconds": round(seconds, 1), "loaded_tokenized_dataset": seen_loaded, "datasets_cache_mb": round(cache_mb)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20000, help="the exact_rows project's trace rows")
    ap.add_argument("--work", type=Path, default=ROOT / ".bench")
    ap.add_argument("--scale", default="20k=20000", help="NAME=ROWS: the dataset to export and launch")
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--free-tokenized",
        action="store_true",
        help="delete the export's tokenized/ before the run without it (a 100K run's tokenized/ and "
        "LLaMA-Factory's own datasets cache do not fit a small disk together)",
    )
    args = ap.parse_args()
    work = args.work.resolve()
    project = work / f"exact-rows-{args.rows}"
    if not (project / "metrics" / "filter.json").is_file():
        raise SystemExit(f"{project} is not built: uv run python benchmarks/exact_rows.py --rows {args.rows}")
    train_py = ROOT / ".venv-train" / "bin" / "python"
    if not train_py.is_file():
        raise SystemExit("no .venv-train: bash training/setup-env.sh")
    name, rows = args.scale.split("=")
    log = work / f"first-step-{args.rows}-{name}.log"
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["scales"][name] = int(rows)
    params["export_sft"]["pretokenize"] = "always"
    params["export_rl"]["tokenizer"] = params["export_sft"]["tokenizer"]  # train_config reads the RL export too
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    steps = [stage(project, log, f"select {name}", "select", name)]
    steps.append(stage(project, log, f"export_sft {name} (with tokenized/)", "export_sft", name))
    if not (project / "lake" / "exports" / "rl" / "manifest.json").is_file():  # train_config reads it too
        steps.append(stage(project, log, "export_rl", "export_rl"))
    steps.append(stage(project, log, "train_config", "train_config"))
    export = project / "lake" / "exports" / "sft" / name
    manifest = json.loads((export / "manifest.json").read_text())
    tokenized_mb = sum(f.stat().st_size for f in (export / "tokenized").rglob("*") if f.is_file()) / 1e6
    model = work / "tiny-qwen3-real-tokenizer"
    if not (model / "config.json").is_file():
        subprocess.run([str(train_py), str(ROOT / "tests/train_env/tiny_qwen3.py"), str(QWEN3), str(model)], check=True)
    config = yaml.safe_load((project / "training" / "configs" / f"sft-{name}.yaml").read_text())
    config.update(
        model_name_or_path=str(model),
        bf16=False,
        preprocessing_num_workers=2,
        output_dir=str(work / "first-step-out"),
        report_to="none",
        max_steps=1,
        overwrite_cache=True,
    )
    config.pop("deepspeed", None)
    with_tokenized = first_step(train_py, config, work / "first-step-with", project, log)
    if args.free_tokenized:
        shutil.rmtree(export / "tokenized")
    without = first_step(
        train_py, {k: v for k, v in config.items() if k != "tokenized_path"}, work / "first-step-without", project, log
    )
    result = {
        "rows": manifest["counts"]["rows_out"],
        "dataset_id": manifest["dataset_id"],
        "pretokenized": manifest["counts"]["pretokenized"],
        "tokenized_mb": round(tokenized_mb),
        "export_sft": vars(steps[1]),
        "first_step_with_tokenized_path": with_tokenized,
        "first_step_without": without,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
