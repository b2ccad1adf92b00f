"""Check a LLaMA-Factory SFT config and its key=value overrides with LLaMA-Factory's own argument
parser (run with the training environment's python; `tracelake train sft` runs it before every
launch and in --dry-run).

    python training/check_sft_config.py [--local] CONFIG.yaml [key=value ...]

The arguments are read as `llamafactory-cli train CONFIG key=value ...` reads them (OmegaConf: the
file merged with the command line), then parsed as LLaMA-Factory parses a config:
`HfArgumentParser([ModelArguments, DataArguments, TrainingArguments, FinetuningArguments,
GeneratingArguments]).parse_dict(args)`, which refuses a key none of them has and runs each class's
own checks; numbers and booleans must have their field's type (parse_dict does not look). An unknown key is named with its closest known one (`max_step`: did you mean
`max_steps`?). What only the GPU machine can check is said, not failed: bf16/fp16 without a CUDA
GPU here, a DeepSpeed config without the deepspeed package (its file must still exist). With
`--local` (the run starts in this environment) each report_to integration must be importable.

One line out: `ok: ...` (exit 0) or `error: ...` (exit 1). Imports nothing from tracelake.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.metadata
import importlib.util
import sys
import typing
from pathlib import Path
from typing import Any

# run as a script, its own directory comes first on sys.path: training/deepspeed/ would then pass for
# the deepspeed package
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:1500]


def unknown_keys(args: dict[str, Any], classes: list[type]) -> str | None:
    """The error for keys no argument class has (the names parse_dict accepts: init fields)."""
    known = {f.name for cls in classes for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in args if k not in known]
    if not unknown:
        return None
    named = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), known, n=1)
        named.append(f"{key} (did you mean {close[0]}?)" if close else str(key))
    return (
        f"unknown key{'s' if len(named) > 1 else ''} {', '.join(named)}: not an argument of LLaMA-Factory "
        f"{importlib.metadata.version('llamafactory')} ({', '.join(c.__name__ for c in classes)})"
    )


def wrong_types(args: dict[str, Any], classes: list[type]) -> str | None:
    """The error for a number or a boolean of the wrong type (`learning_rate: abc`): parse_dict takes
    values as they are, and such a run would fail only once the model is loaded."""
    scalar = {int: (int,), float: (int, float), bool: (bool,)}
    for cls in classes:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name not in args or args[f.name] is None:
                continue
            kinds = [t for t in (typing.get_args(hints[f.name]) or (hints[f.name],)) if t is not type(None)]
            if not kinds or any(t not in scalar for t in kinds):
                continue
            value = args[f.name]
            ok = any(isinstance(value, scalar[t]) and (t is bool or not isinstance(value, bool)) for t in kinds)
            if not ok:
                return f"{f.name}: {value!r} is not {' or '.join(t.__name__ for t in kinds)} ({cls.__name__})"
    return None


def not_checkable_here(args: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The args with what this machine cannot check turned off, and what that was."""
    import torch

    args, skipped = dict(args), []
    if not torch.cuda.is_available() and not args.get("use_cpu"):
        for key in ("bf16", "fp16"):
            if args.get(key):
                args[key] = False
                skipped.append(f"{key} (no CUDA GPU here)")
    if args.get("deepspeed") and importlib.util.find_spec("deepspeed") is None:
        if not Path(str(args["deepspeed"])).is_file():
            raise ValueError(f"deepspeed config {args['deepspeed']} not found")
        args["deepspeed"] = None
        skipped.append("deepspeed (not installed here; its config file exists)")
    return args, skipped


def check(config: str, overrides: list[str], local: bool) -> str:
    from llamafactory.hparams import (
        DataArguments,
        FinetuningArguments,
        GeneratingArguments,
        ModelArguments,
        TrainingArguments,
    )
    from omegaconf import OmegaConf
    from transformers import HfArgumentParser

    classes = [ModelArguments, DataArguments, TrainingArguments, FinetuningArguments, GeneratingArguments]
    merged = OmegaConf.merge(OmegaConf.load(Path(config).absolute()), OmegaConf.from_cli(overrides))
    args = OmegaConf.to_container(merged)  # what llamafactory.hparams.parser.read_args returns
    error = unknown_keys(args, classes) or wrong_types(args, classes)
    if error:
        raise ValueError(error)
    parsed, skipped = not_checkable_here(args)
    training = HfArgumentParser(classes).parse_dict(parsed, allow_extra_keys=False)[2]
    if local:
        for name in training.report_to or []:
            if name != "none" and importlib.util.find_spec(name) is None:
                raise ValueError(
                    f"report_to {name}: {name} is not installed in the training environment (pip install {name} "
                    f"there, or train.sft.report_to: none)"
                )
    version = importlib.metadata.version("llamafactory")
    line = f"{len(args)} keys parse as LLaMA-Factory {version}'s arguments (HfArgumentParser.parse_dict)"
    return line + (f"; not checked here: {', '.join(skipped)}" if skipped else "")


def main(argv: list[str]) -> int:
    local = "--local" in argv
    rest = [a for a in argv if a != "--local"]
    if not rest:
        print("error: usage: check_sft_config.py [--local] CONFIG.yaml [key=value ...]")
        return 1
    try:
        print("ok: " + check(rest[0], rest[1:], local))
    except Exception as e:  # noqa: BLE001 - every refusal is one line for `tracelake train`
        print(f"error: {_one_line(e)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
