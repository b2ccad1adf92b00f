"""Check 1: LLaMA-Factory full SFT of a tiny random Qwen3 on the project's real SFT export, on a GPU.

    python tests/gpu/lf_check.py --export lake/exports/sft/316 --out OUT [--config training/configs/sft-316.yaml]
                                 [--tokenizer data/tokenizer] [--steps 30] [--python PY] [--cpu-smoke]

Runs with any python that has PyYAML (it imports nothing from tracelake and no engine); the work runs
in subprocesses of `--python` (default: this one), which must hold torch, transformers and
LLaMA-Factory 0.9.5:

1. tests/train_env/tiny_qwen3.py builds the tiny random Qwen3 (the tests' own builder) beside the
   project's tokenizer (data/tokenizer, built by the pipeline);
2. the LLaMA-Factory config is the one the pipeline generated for that scale (training/configs/
   sft-<scale>.yaml, stage train_config) with only what a one-GPU check must change: the model, the
   export directory, no DeepSpeed, `--steps` steps, a loss line every step, no checkpoint, and a
   learning rate of 1e-3 without warm-up (the recipe's 4e-5 barely moves a random model in 30 steps);
   the dataset names are the export's own per-shard entries (its dataset_info.json);
3. tests/gpu/lf_train.py runs `llamafactory-cli train` (LLaMA-Factory's own entry) on it. When the
   export holds a pre-tokenized dataset made with that tokenizer (<export>/tokenized: build the
   project with `export_sft.pretokenize: always`), the config names it as tokenized_path and
   LLaMA-Factory trains from it without tokenizing (OUT/lf_check.json: tokenized_path,
   loaded_tokenized_dataset).

PASS when the run finishes on CUDA with `--steps` steps, every loss is finite and the mean of the last
five losses is below the mean of the first five. Writes OUT/lf_check.json (steps, losses, samples/s,
GPU, peak GPU memory, versions) and OUT/lf/ (config, logs, LLaMA-Factory's trainer_log.jsonl); the
model, the datasets cache and the run directory stay in --work (/tmp/gpu-work/lf). `--cpu-smoke`: 3 steps on the CPU, fp32,
the same code path (PASS needs finite losses only), for machines without a GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml
from report import report  # tests/gpu/report.py: run as a script, this folder is sys.path[0]

ROOT = Path(__file__).resolve().parents[2]
TINY_QWEN3 = ROOT / "tests" / "train_env" / "tiny_qwen3.py"
LF_TRAIN = ROOT / "tests" / "gpu" / "lf_train.py"


def dataset_names(export: Path, wanted: str | None) -> str:
    """The config's dataset list when the export's dataset_info.json has every name in it, else the
    export's per-shard entries in shard order (<dataset_id>.<00000>: the project's shard_entry_name)."""
    info = json.loads((export / "dataset_info.json").read_text())
    if wanted and all(name in info for name in wanted.split(",")):
        return wanted
    manifest_file = export / "manifest.json"
    if manifest_file.is_file():
        manifest = json.loads(manifest_file.read_text())
        names = [f"{manifest['dataset_id']}.{i:05d}" for i in range(manifest["counts"]["shards"])]
        if all(n in info for n in names):
            return ",".join(names)
    shards = sorted(k for k in info if k.rsplit(".", 1)[-1].isdigit())
    return ",".join(shards or list(info)[:1])


def pretokenized_for(export: Path, tokenizer: Path) -> Path | None:
    """The export's pre-tokenized dataset (<export>/tokenized, with its pretokenized.json) when it was
    tokenized with this tokenizer (the tiny model's): LLaMA-Factory then trains from it (tokenized_path)."""
    import hashlib

    meta = export / "tokenized" / "pretokenized.json"
    if not meta.is_file():
        return None
    sha = hashlib.sha256((tokenizer / "tokenizer.json").read_bytes()).hexdigest()
    return meta.parent if json.loads(meta.read_text()).get("tokenizer_sha256") == sha else None


def lf_config(base: dict, *, model: Path, export: Path, out: Path, steps: int, cpu: bool, lr: float) -> dict:
    config = dict(base)
    config.pop("deepspeed", None)
    config.update(
        {
            "model_name_or_path": str(model),
            "dataset_dir": str(export),
            "dataset": dataset_names(export, base.get("dataset")),
            "output_dir": str(out),
            "overwrite_output_dir": True,
            "max_steps": steps,
            "logging_steps": 1,
            "save_strategy": "no",
            "plot_loss": False,
            "report_to": "none",
            "learning_rate": lr,
            "warmup_ratio": 0.0,
            "overwrite_cache": True,
        }
    )
    if cpu:
        config.update(
            {
                "bf16": False,
                "use_cpu": True,
                "optim": "adamw_torch",
                "preprocessing_num_workers": 1,
                "dataloader_num_workers": 0,
            }
        )
    else:
        config["bf16"] = True
    return config


MINIMAL = {  # when the generated config is not there: the same recipe keys, stated here
    "trust_remote_code": True,
    "stage": "sft",
    "do_train": True,
    "finetuning_type": "full",
    "template": "qwen3",
    "cutoff_len": 32768,
    "preprocessing_num_workers": 16,
    "dataloader_num_workers": 4,
    "per_device_train_batch_size": 1,
    "gradient_accumulation_steps": 2,
    "lr_scheduler_type": "cosine",
    "optim": "adamw_torch_fused",
    "seed": 42,
    "bf16": True,
    "ddp_timeout": 180000000,
}


def run(cmd: list[str], log: Path, env: dict[str, str], timeout: float) -> int:
    with log.open("w") as f:
        try:
            return subprocess.run(
                cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT, timeout=timeout, check=False
            ).returncode
        except subprocess.TimeoutExpired:
            f.write(f"\n[lf_check] timed out after {timeout:.0f} s\n")
            return 124


def tail(path: Path, n: int = 25) -> list[str]:
    if not path.is_file():
        return []
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-n:]


def check(args: argparse.Namespace) -> dict:
    out = Path(args.out).resolve() / "lf"  # logs, config, results: small, they come back
    work = Path(args.work).resolve()  # model, datasets cache, run directory: big, they stay
    for d in (out, work):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
    export = Path(args.export).resolve()
    python = args.python or sys.executable
    steps = 3 if args.cpu_smoke and args.steps is None else (args.steps or 30)
    result: dict = {
        "check": "lf_sft",
        "export": str(export),
        "steps_wanted": steps,
        "cpu_smoke": args.cpu_smoke,
        "python": python,
    }
    if not (export / "dataset_info.json").is_file():
        result["error"] = f"no SFT export at {export} (dataset_info.json missing): run `dvc repro` and carry it"
        return result
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        HF_DATASETS_CACHE=str(work / "hf-datasets"),
        HF_HOME=str(work / "hf-home"),
        WANDB_DISABLED="true",
    )
    if args.cpu_smoke:
        env["CUDA_VISIBLE_DEVICES"] = ""

    tokenizer = Path(args.tokenizer).resolve()
    if not (tokenizer / "tokenizer.json").is_file():  # build the project's tokenizer where tracelake imports
        tokenizer = work / "tokenizer"
        code = (
            "import sys; from pathlib import Path\n"
            "try:\n    from tracelake.tokens.tokenizer import build_tokenizer\n"
            "except ImportError:\n    from tracelake.core.tokens import build_tokenizer\n"
            "build_tokenizer(Path(sys.argv[1]))"
        )
        penv = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [env.get("PYTHONPATH"), str(ROOT / "src")])))
        if run([python, "-c", code, str(tokenizer)], out / "tokenizer.log", penv, 120) != 0:
            result["error"] = (
                f"no tokenizer at {args.tokenizer} and building one failed: {tail(out / 'tokenizer.log', 3)}"
            )
            return result
    model = work / "tiny-qwen3"
    t = time.perf_counter()
    if run([python, str(TINY_QWEN3), str(tokenizer), str(model)], out / "model.log", env, 180) != 0:
        result["error"] = "building the tiny Qwen3 failed: " + " | ".join(tail(out / "model.log", 5))
        return result
    result["model_build_s"] = round(time.perf_counter() - t, 2)

    config_path = Path(args.config)
    if config_path.is_file():
        base = yaml.safe_load(config_path.read_text())
        result["config_from"] = str(config_path)
    else:
        base = dict(MINIMAL)
        result["config_from"] = "minimal (no generated config at " + str(config_path) + ")"
    config = lf_config(base, model=model, export=export, out=work / "run", steps=steps, cpu=args.cpu_smoke, lr=args.lr)
    config.pop("tokenized_path", None)  # the generated one is relative to the project: the export's own, if any
    tokenized = pretokenized_for(export, tokenizer)
    if tokenized is not None:
        config["tokenized_path"] = str(tokenized)
    result["tokenized_path"] = config.get("tokenized_path")
    (out / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    result["config"] = {
        k: config[k]
        for k in (
            "dataset",
            "template",
            "cutoff_len",
            "bf16",
            "learning_rate",
            "per_device_train_batch_size",
            "gradient_accumulation_steps",
            "optim",
            "preprocessing_num_workers",
        )
        if k in config
    }

    t = time.perf_counter()
    rc = run(
        [
            python,
            str(LF_TRAIN),
            str(out / "config.yaml"),
            str(out / "train_result.json"),
            "--modules",
            str(out / "modules.json"),
        ],
        out / "train.log",
        env,
        args.timeout,
    )
    result["train_wall_s"] = round(time.perf_counter() - t, 2)
    result["train_rc"] = rc
    if rc != 0:
        result["error"] = f"llamafactory-cli train exited {rc}"
        result["log_tail"] = tail(out / "train.log")
        return result
    info = json.loads((out / "train_result.json").read_text())
    # LLaMA-Factory's own line when it loads tokenized_path instead of tokenizing (data/loader.py:296)
    result["loaded_tokenized_dataset"] = "Loaded tokenized dataset" in (out / "train.log").read_text(errors="replace")
    result.update({k: info[k] for k in ("device", "cuda", "peak_gpu_mem_bytes", "peak_gpu_reserved_bytes", "versions")})
    for name in ("trainer_log.jsonl", "train_results.json"):  # LLaMA-Factory's own records of the run
        if (work / "run" / name).is_file():
            shutil.copy(work / "run" / name, out / name)
    log_file = out / "trainer_log.jsonl"
    entries = (
        [json.loads(line) for line in log_file.read_text().splitlines() if line.strip()] if log_file.is_file() else []
    )
    losses = [e["loss"] for e in entries if "loss" in e]
    metrics_file = out / "train_results.json"
    metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {}
    result.update(
        {
            "steps": entries[-1].get("current_steps") if entries else 0,
            "losses": losses,
            "loss_start": losses[0] if losses else None,
            "loss_end": losses[-1] if losses else None,
            "samples_per_s": metrics.get("train_samples_per_second"),
            "steps_per_s": metrics.get("train_steps_per_second"),
            "train_runtime_s": metrics.get("train_runtime"),
        }
    )
    k = min(5, len(losses) // 2) or 1
    first, last = sum(losses[:k]) / k if losses else math.nan, sum(losses[-k:]) / k if losses else math.nan
    result["loss_first_mean"], result["loss_last_mean"] = first, last
    problems = []
    if result["steps"] != steps:
        problems.append(f"{result['steps']} steps logged, wanted {steps}")
    if not losses or not all(math.isfinite(x) for x in losses):
        problems.append(f"losses not all finite: {losses}")
    if not args.cpu_smoke:
        if not info["cuda"]:
            problems.append("torch sees no CUDA device")
        if not last < first:
            problems.append(f"loss did not decrease: mean of the first {k} {first:.4f}, of the last {k} {last:.4f}")
    if problems:
        result["error"] = "; ".join(problems)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--export", default=os.environ.get("GPU_EXPORT", "lake/exports/sft/316"))
    parser.add_argument("--config", default=None, help="default: training/configs/sft-<export dir name>.yaml")
    parser.add_argument("--tokenizer", default=str(ROOT / "data" / "tokenizer"))
    parser.add_argument("--out", default=os.environ.get("OUT") or "gpu-out")
    parser.add_argument(
        "--work",
        default="/tmp/gpu-work/lf",
        help="model, datasets cache and run directory "
        "(emptied first; kept out of --out, whose files come back from a lent machine)",
    )
    parser.add_argument("--steps", type=int, default=None, help="default 30 (3 with --cpu-smoke)")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--python", default=None, help="interpreter with torch + LLaMA-Factory (default: this one)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds for the training run")
    parser.add_argument("--cpu-smoke", action="store_true", help="3 fp32 steps on the CPU (no GPU needed)")
    args = parser.parse_args()
    if args.config is None:
        args.config = str(ROOT / "training" / "configs" / f"sft-{Path(args.export).name}.yaml")

    def detail(result: dict) -> str:
        if "error" in result:
            return result["error"]
        peak = result.get("peak_gpu_mem_bytes")
        return (
            f"{result.get('steps')} steps on {result.get('device')}, loss {result.get('loss_start')} -> "
            f"{result.get('loss_end')}, {result.get('samples_per_s')} samples/s"
            + (f", peak GPU mem {peak / 2**20:.0f} MiB" if peak else "")
        )

    report("lf_sft", args.out, "lf_check.json", lambda: check(args), detail, tail_key="log_tail")


if __name__ == "__main__":
    main()
