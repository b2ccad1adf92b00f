"""LLaMA-Factory 0.9.5's own data preprocessing (load -> align -> tokenizer pass) over sharegpt Parquet
shards that tracelake exported, timed. Runs in the training environment (bash training/setup-env.sh):

    .venv-train/bin/python benchmarks/references/lf_tokenize.py --tokenizer TOKDIR --work SCRATCH \
        SHARD.parquet [SHARD.parquet ...] [--workers 2] [--template qwen3_nothink]

TOKDIR holds a Hugging Face tokenizer.json (byte-level BPE, ChatML specials); its tokenizer_config.json
and special_tokens_map.json are used when present (model_max_length raised to 10**9), and a ChatML
tokenizer_config.json is written when missing. SCRATCH gets, afresh each run:
  model/        the tokenizer as LLaMA-Factory's load_tokenizer reads it, plus a tiny Qwen3 config.json
                and no weights (load_tokenizer's AutoProcessor probe raises without a model_type);
  data/         dataset_info.json and one directory of links to the shards: one dataset, as export_sft
                names its whole export (LLaMA-Factory lists that directory unsorted: row order may vary);
  hf-datasets/  the datasets cache, so it is cold every run;
  out/          output_dir (preprocessing writes nothing there).

The timed part is `get_dataset` exactly as tests/train_env/lf_load.py (and so `llamafactory-cli train`)
calls it: load_dataset('parquet') into the cache, align_dataset (sharegpt converter) and the supervised
processor's tokenizer map, each with num_proc=preprocessing_num_workers. cutoff_len is 1,000,000 so
nothing is cut. LLaMA-Factory's own stdout (its decoded "training example") goes to stderr; stdout is
one JSON line: {"examples", "tokens" (sum of len(input_ids)), "seconds" (get_dataset), "setup_seconds"
(imports, scratch, argument parsing, tokenizer and template)}.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# tracelake is not installed here: its tokens/sharegpt.py (standard library only) from src/, and the
# tests' tiny Qwen3 from tests/train_env/
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests" / "train_env")]
from tracelake.tokens.sharegpt import dataset_info_entry  # noqa: E402

EOS_TOKEN, PAD_TOKEN = "<|im_end|>", "<|endoftext|>"
MODEL_MAX_LENGTH = 10**9
CHAT_TEMPLATE = (  # ChatML, as tracelake.tokens.tokenizer writes it
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
DATASET = "shards"


def model_dir(tokdir: Path, out: Path) -> Path:
    """A directory LLaMA-Factory's load_tokenizer accepts: the tokenizer and a config.json, no weights.

    load_tokenizer tries AutoProcessor twice and only its first try's errors are caught, so without a
    config.json naming a model_type the second try's ValueError escapes. A tiny Qwen3 config (as
    tests/train_env/tiny_qwen3.py builds) satisfies it; no model is ever built.
    """
    if not (tokdir / "tokenizer.json").is_file():
        raise SystemExit(f"{tokdir}: no tokenizer.json")
    out.mkdir(parents=True)
    shutil.copy(tokdir / "tokenizer.json", out / "tokenizer.json")
    if (tokdir / "special_tokens_map.json").is_file():
        shutil.copy(tokdir / "special_tokens_map.json", out / "special_tokens_map.json")
    cfg_path = tokdir / "tokenizer_config.json"
    cfg = (
        json.loads(cfg_path.read_text())
        if cfg_path.is_file()
        else {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "eos_token": EOS_TOKEN,
            "pad_token": PAD_TOKEN,
            "bos_token": None,
            "unk_token": None,
            "chat_template": CHAT_TEMPLATE,
            "clean_up_tokenization_spaces": False,
            "add_prefix_space": False,
        }
    )
    cfg["model_max_length"] = MODEL_MAX_LENGTH  # 32768 would only warn (LF never truncates by it)
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    from tiny_qwen3 import tiny_config
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    tiny_config(
        vocab_size=tok.get_vocab_size(with_added_tokens=True),
        eos_token_id=tok.token_to_id(_content(cfg.get("eos_token")) or EOS_TOKEN),
        pad_token_id=tok.token_to_id(_content(cfg.get("pad_token")) or PAD_TOKEN),
    ).to_json_file(out / "config.json")
    return out


def _content(token) -> str | None:
    return token.get("content") if isinstance(token, dict) else token


def data_dir(shards: list[Path], out: Path) -> Path:
    """dataset_info.json with one sharegpt dataset: a directory of links to the shards.

    LLaMA-Factory 0.9.5's `file_name` is one path (joined onto dataset_dir), a file or a directory whose
    files all load in one load_dataset call; a list is not accepted. Links keep the shards where they are.
    """
    files = out / DATASET
    files.mkdir(parents=True)
    for i, shard in enumerate(shards):
        if not shard.is_file() or shard.suffix != ".parquet":
            raise SystemExit(f"{shard}: not a .parquet file")
        (files / f"{i:05d}-{shard.name}").symlink_to(shard.resolve())
    info = {DATASET: dataset_info_entry(DATASET)}
    (out / "dataset_info.json").write_text(json.dumps(info, indent=2) + "\n")
    return out


def total_tokens(ds) -> int:
    import pyarrow.compute as pc

    if getattr(ds, "_indices", None) is None:
        lengths = pc.list_value_length(ds.data.table.column("input_ids"))
        return int(pc.sum(lengths).as_py() or 0)
    return sum(len(x) for x in ds["input_ids"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", type=Path, required=True, help="directory with tokenizer.json")
    ap.add_argument(
        "--work", type=Path, required=True, help="scratch directory (its model/ data/ hf-datasets/ out/ are replaced)"
    )
    ap.add_argument("--workers", type=int, default=2, help="preprocessing_num_workers (default 2)")
    ap.add_argument("--template", default="qwen3_nothink")
    ap.add_argument("shards", type=Path, nargs="+")
    args = ap.parse_args()

    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    for sub in ("model", "data", "hf-datasets", "out"):  # only what this script makes: cold every run
        shutil.rmtree(work / sub, ignore_errors=True)
    cache = work / "hf-datasets"
    # datasets reads these at import time: set them before anything imports it
    os.environ["HF_DATASETS_CACHE"] = str(cache)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    model = model_dir(args.tokenizer.resolve(), work / "model")
    data = data_dir(args.shards, work / "data")

    with contextlib.redirect_stdout(sys.stderr):
        from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
        from llamafactory.hparams import get_train_args
        from llamafactory.model import load_tokenizer

        lf_args = {
            "model_name_or_path": str(model),
            "stage": "sft",
            "do_train": True,
            "finetuning_type": "full",
            "dataset": DATASET,
            "dataset_dir": str(data),
            "template": args.template,
            "cutoff_len": 1_000_000,
            "preprocessing_num_workers": args.workers,
            "overwrite_cache": True,
            "cache_dir": str(cache),
            "output_dir": str(work / "out"),
            "report_to": "none",
            "bf16": False,
            "fp16": False,
        }
        model_args, data_args, training_args, _finetuning_args, _ = get_train_args(lf_args)
        tokenizer_module = load_tokenizer(model_args)
        template = get_template_and_fix_tokenizer(tokenizer_module["tokenizer"], data_args)
        t1 = time.perf_counter()
        module = get_dataset(template, model_args, data_args, training_args, stage="sft", **tokenizer_module)
        t2 = time.perf_counter()
    ds = module["train_dataset"]
    print(
        json.dumps(
            {
                "examples": len(ds),
                "tokens": total_tokens(ds),
                "seconds": round(t2 - t1, 3),
                "setup_seconds": round(t1 - T0, 3),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
