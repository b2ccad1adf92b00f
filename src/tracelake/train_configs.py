"""Training configs generated from params.yaml (stage `train_config` -> training/configs/):

- `sft-<scale>.yaml`: a LLaMA-Factory full-SFT config for one exported scale. `dataset` names the
  export's per-shard dataset_info entries in order, so the example order is the same everywhere
  (LLaMA-Factory would list a shard directory with an unsorted os.listdir).
- `rl.yaml`: the SkyRL entrypoint and its config overrides, with `data.train_data` as explicit
  Parquet files (SkyRL reads a directory path as a hub dataset name).

Each file opens with the dataset id it trains on; `tracelake train` runs them (locally or on Modal).
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import yaml

from .config import RlTrainParams, SftTrainParams
from .sft_export import shard_entry_name

SFT_PREFIX = "sft-"
RL_FILE = "rl.yaml"


def sft_config_name(scale: str) -> str:
    return f"{SFT_PREFIX}{scale}.yaml"


def total_batch(sft: SftTrainParams) -> int:
    return sft.per_device_train_batch_size * sft.gpus * sft.gradient_accumulation_steps


def sft_config(sft: SftTrainParams, *, dataset_id: str, n_shards: int, dataset_dir: str, runs: str) -> dict[str, Any]:
    """The LLaMA-Factory YAML (as a dict, key order kept) for one exported dataset."""
    config: dict[str, Any] = {
        "model_name_or_path": sft.model,
        "trust_remote_code": True,
        "stage": "sft",
        "do_train": True,
        "finetuning_type": sft.finetuning_type,
        "deepspeed": sft.deepspeed,
        "dataset": ",".join(shard_entry_name(dataset_id, i) for i in range(n_shards)),
        "dataset_dir": dataset_dir,
        "template": sft.template,
        "cutoff_len": sft.cutoff_len,
        "overwrite_cache": True,
        "preprocessing_num_workers": 16,
        "dataloader_num_workers": 4,
        "output_dir": str(PurePosixPath(runs) / dataset_id),
        "logging_steps": 10,
        "save_strategy": "epoch",
        "plot_loss": True,
        "overwrite_output_dir": True,
        "report_to": "none",
        "per_device_train_batch_size": sft.per_device_train_batch_size,
        "gradient_accumulation_steps": sft.gradient_accumulation_steps,
        "learning_rate": sft.learning_rate,
        "num_train_epochs": float(sft.num_train_epochs),
        "lr_scheduler_type": sft.lr_scheduler_type,
        "warmup_ratio": sft.warmup_ratio,
        "optim": sft.optim,
        "adam_beta1": sft.adam_beta1,
        "adam_beta2": sft.adam_beta2,
        "adam_epsilon": sft.adam_epsilon,
        "weight_decay": sft.weight_decay,
        "seed": sft.seed,
        "bf16": sft.bf16,
        "ddp_timeout": 180000000,
    }
    if sft.deepspeed is None:
        del config["deepspeed"]
    config.update(sft.extra)
    return config


def rl_config(rl: RlTrainParams, *, dataset_id: str, prompt_files: list[str], max_turns: int,
              max_prompt_length: int, env_class: str, runs: str) -> dict[str, Any]:
    """SkyRL's entrypoint and its dotted config overrides for the exported RL prompts."""
    out = str(PurePosixPath(runs) / dataset_id)
    overrides: dict[str, Any] = {
        "data.train_data": list(prompt_files),
        "data.val_data": [],                  # no eval set is exported; add one through train.rl.extra
        "trainer.eval_interval": -1,
        "trainer.policy.model.path": rl.model,
        "trainer.algorithm.advantage_estimator": rl.advantage_estimator,
        "trainer.epochs": rl.epochs,
        "trainer.train_batch_size": rl.train_batch_size,
        "trainer.policy_mini_batch_size": rl.train_batch_size,
        "trainer.policy.optimizer_config.lr": rl.learning_rate,
        "trainer.placement.policy_num_gpus_per_node": rl.gpus,
        "trainer.placement.ref_num_gpus_per_node": rl.gpus,
        "trainer.max_prompt_length": max_prompt_length,
        "trainer.eval_before_train": False,
        "trainer.ckpt_path": f"{out}/ckpts",
        "trainer.export_path": f"{out}/exports",
        "generator.n_samples_per_prompt": rl.n_samples_per_prompt,
        "generator.max_turns": max_turns,
        "environment.env_class": env_class,
    }
    overrides.update(rl.extra)
    return {"dataset_id": dataset_id, "entrypoint": rl.entrypoint, "overrides": overrides}


def override_value(v: Any) -> str:
    """One value as a trainer's command line writes it: true/false, null, ['a','b'], else str(v)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, list):
        return "[" + ",".join(f"'{x}'" if isinstance(x, str) else override_value(x) for x in v) + "]"
    return str(v)


def hydra_overrides(overrides: dict[str, Any]) -> list[str]:
    """`key=value` arguments for a Hydra entrypoint such as SkyRL's."""
    return [f"{k}={override_value(v)}" for k, v in overrides.items()]


def render(config: dict[str, Any], header: list[str]) -> str:
    """YAML text with a comment header; key order as built (stable bytes)."""
    lines = "".join(f"# {h}\n" for h in header)
    return lines + yaml.safe_dump(config, sort_keys=False, default_flow_style=False, width=100000)
