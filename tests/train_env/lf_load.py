"""Load a dataset exactly as `llamafactory-cli train CONFIG` would, and report what it kept.

    <training env python> tests/train_env/lf_load.py CONFIG.yaml [key=value ...]

Prints one JSON line: {"examples": n, "lengths": [len(input_ids) per example, in order],
"trained_tokens": [labels != -100 per example], "loaded_from_tokenized_path": bool}, and with the
override `ids=true` also "input_ids" and "labels" (per example). Runs in the training environment.
"""

import json
import sys

import yaml
from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
from llamafactory.extras.misc import has_tokenized_data
from llamafactory.hparams import get_train_args
from llamafactory.model import load_tokenizer


def main(config_path: str, *overrides: str) -> None:
    args = yaml.safe_load(open(config_path))
    for o in overrides:
        key, value = o.split("=", 1)
        args[key] = yaml.safe_load(value)
    with_ids = bool(args.pop("ids", False))  # ours, not LLaMA-Factory's
    model_args, data_args, training_args, finetuning_args, _ = get_train_args(args)
    # LF loads a non-empty tokenized_path instead of tokenizing (data/loader.py:286-296); an empty or
    # missing one it would fill itself: say which, before it can
    from_disk = bool(data_args.tokenized_path) and has_tokenized_data(data_args.tokenized_path)
    tokenizer_module = load_tokenizer(model_args)
    template = get_template_and_fix_tokenizer(tokenizer_module["tokenizer"], data_args)
    module = get_dataset(template, model_args, data_args, training_args, stage="sft", **tokenizer_module)
    ds = module["train_dataset"]
    print(
        json.dumps(
            {
                "examples": len(ds),
                "lengths": [len(x) for x in ds["input_ids"]],
                "trained_tokens": [sum(1 for t in x if t != -100) for x in ds["labels"]],
                "loaded_from_tokenized_path": from_disk,
                **({"input_ids": [list(x) for x in ds["input_ids"]]} if with_ids else {}),
                **({"labels": [list(x) for x in ds["labels"]]} if with_ids else {}),
            }
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
