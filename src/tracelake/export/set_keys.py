"""What a `tracelake train --set KEY=VALUE` may change, by class: the one table both trainers (SFT and
RL), both backends (local and Modal) and the dry run go through (`refuse`, called by launch/run.py's
planners).

- DATA: which data trains (LLaMA-Factory's `dataset`, `dataset_dir`, ...; SkyRL's `data.*`). Refused:
  the dataset is chosen with `--dataset` (a scale, an id, REV:NAME), and the plan names it, its run
  directory and its counts; a `--set` that pointed the trainer elsewhere would make all three lie.
- RENDERING: how the examples become tokens (the chat template, the cutoff, the training mode, the
  prompt length SkyRL keeps). Refused: the export counted its tokens, rejected its over-long rows and
  reported what each mode trains on for exactly these settings (export_sft tracks
  train.sft.template and train.sft.cutoff_len; export_rl max_prompt_length), so a run that changed
  them would train on data its counts do not describe. Each names where the setting lives in
  params.yaml, and `dvc repro` rebuilds what depends on it.
- Anything else (learning rate, batch size, GPUs, DeepSpeed, output_dir, logging, checkpoints,
  report_to, the model: its tokenizer must still be the one that counted the export, which
  launch/check.py's check_tokenizer checks) is the run's own: allowed, and an SFT run's directory hash covers it
  unless train_config.NOT_TRAINING says it does not change the training. A key the trainer does not
  have is refused by the trainer's own parser (training/check_sft_config.py, check_rl_config.py).

A key is classified as the trainer would read it: Hydra's `+`, `++` and `~` prefixes, a `@package`
suffix, `[index]` and surrounding spaces are taken off, and a leading `--` too (`--set --dataset=x`);
a key above a protected one (`data`, `trainer` given as a whole mapping) is protected as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tracelake.core.errors import BadParams

DATA = "data"
RENDERING = "rendering"

WHICH_DATA = "the dataset is chosen with --dataset (a scale, a dataset id or REV:NAME), and the plan names it"
MODE = (
    "choose train.sft.mode and train.sft.thinking in params.yaml and run `dvc repro` (the export's counts, "
    "id and pre-tokenized data are of that mode)"
)
NOT_COUNTED = "the export rendered and counted its tokens without it"
MAX_PROMPT = "change export_rl.max_prompt_length in params.yaml and run `dvc repro`: the export rejected longer prompts"
CHAT_TEMPLATE = "the export counted its prompt tokens with the model's own chat template"
PACKED = "the export checked its lengths (cutoff_len - 1 when packing) and packed its pre-tokenized data with it"


@dataclass(frozen=True)
class Rule:
    klass: str  # DATA or RENDERING
    why: str  # where it is decided instead


# LLaMA-Factory (SFT): top-level keys of its argument classes.
SFT: dict[str, Rule] = {
    "dataset": Rule(DATA, WHICH_DATA),
    "eval_dataset": Rule(DATA, WHICH_DATA + "; no eval set is exported"),
    "dataset_dir": Rule(DATA, WHICH_DATA + "; tracelake sets where its shards are"),
    "media_dir": Rule(DATA, WHICH_DATA),
    "tokenized_path": Rule(DATA, WHICH_DATA + "; a tokenized cache would train on what it holds instead"),
    "mix_strategy": Rule(DATA, WHICH_DATA + "; its shards train in order, each once"),
    "interleave_probs": Rule(DATA, WHICH_DATA + "; its shards train in order, each once"),
    "template": Rule(
        RENDERING, "change train.sft.template in params.yaml and run `dvc repro`: the export counted with it"
    ),
    "cutoff_len": Rule(
        RENDERING, "change train.sft.cutoff_len in params.yaml and run `dvc repro`: the export rejected longer rows"
    ),
    "packing": Rule(RENDERING, "change train.sft.packing in params.yaml and run `dvc repro`: " + PACKED),
    "neat_packing": Rule(RENDERING, "change train.sft.neat_packing in params.yaml and run `dvc repro`: " + PACKED),
    "mask_history": Rule(RENDERING, MODE),
    "train_on_prompt": Rule(RENDERING, MODE),
    "enable_thinking": Rule(RENDERING, MODE),
    "preserve_thinking": Rule(RENDERING, MODE),
    "tool_format": Rule(RENDERING, NOT_COUNTED),
    "default_system": Rule(RENDERING, NOT_COUNTED),
    "split_special_tokens": Rule(RENDERING, NOT_COUNTED + " (filter.special_tokens decides control tokens)"),
    "add_tokens": Rule(RENDERING, NOT_COUNTED),
    "add_special_tokens": Rule(RENDERING, NOT_COUNTED),
    "new_special_tokens_config": Rule(RENDERING, NOT_COUNTED),
}

# SkyRL (RL): dotted config paths; a rule covers the path and everything under it.
RL: dict[str, Rule] = {
    "data": Rule(DATA, WHICH_DATA + "; tracelake sets data.train_data to its prompts or task directories"),
    "trainer.max_prompt_length": Rule(RENDERING, MAX_PROMPT + " (SkyRL would drop them silently)"),
    "generator.max_input_length": Rule(RENDERING, MAX_PROMPT),
    "generator.chat_template": Rule(RENDERING, CHAT_TEMPLATE),
    "generator.chat_template_kwargs": Rule(RENDERING, CHAT_TEMPLATE),
}

TABLES = {"sft": SFT, "rl": RL}


def normalise(key: str) -> str:
    """The config path a `--set` key names, as the trainer reads it: `++data.train_data` ->
    `data.train_data`, `trainer.x@pkg` -> `trainer.x`, `data.train_data[0]` -> `data.train_data.0`."""
    key = key.strip()
    key = re.sub(r"^(--|\+\+|\+|~)", "", key).strip()
    key = key.split("@", 1)[0]
    key = re.sub(r"\[([^\]]*)\]", r".\1", key)
    return ".".join(part.strip() for part in key.split(".") if part.strip())


def classify(kind: str, key: str) -> tuple[str, Rule] | None:
    """(the protected path, its rule) for a key that may not be `--set`, else None."""
    path = normalise(key)
    parts = path.split(".") if path else []
    for protected, rule in TABLES[kind].items():
        top = protected.split(".")
        # the key itself or under it (data.train_data under data), or above it (trainer, as a mapping)
        if parts[: len(top)] == top or (parts and top[: len(parts)] == parts):
            return protected, rule
    return None


def refuse(kind: str, sets: dict[str, Any]) -> None:
    """BadParams in one line for the first `--set` key that may not change (DATA, RENDERING)."""
    for key in sets:
        found = classify(kind, key)
        if found is None:
            continue
        protected, rule = found
        what = "which data trains" if rule.klass == DATA else "how the examples become tokens"
        path = normalise(key)
        holds = f" (it holds {protected})" if not (path + ".").startswith(protected + ".") else ""
        raise BadParams(f"train {kind}: --set {key!r}{holds} would change {what}: {rule.why}")
