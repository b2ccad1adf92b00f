"""Stage `train_config`: training configs from params.yaml (train.*) and the exports' manifests ->
training/configs/ (sft-<scale>.yaml for LLaMA-Factory, one per exported scale; rl.yaml for SkyRL)."""

from __future__ import annotations

from pathlib import Path

from tracelake.core.lake import Lake
from tracelake.core.stage import Context, Result, Stage, Streamed
from tracelake.export.train_config import RL_FILE, write_train_configs


def run(ctx: Context) -> Result:
    p = ctx.params
    out = Path(p.train.configs)
    configs = Streamed(out, lambda tmp: write_train_configs(tmp, Lake(p.lake), list(p.scales), p.train, p.export_rl))
    return Result([configs], summary=[f"train_config: {len(p.scales)} SFT config(s) and {RL_FILE} -> {out}"])


STAGE = Stage(
    "train_config",
    __doc__,
    run,
    params=("train", "scales", "export_rl.max_turns", "export_rl.max_prompt_length", "export_rl.env_class", "lake"),
    # the manifests it reads: every SFT export (a directory of a few files a scale) and the RL export's
    # own manifest, not its task directories (thousands of files DVC would walk on every run)
    deps=("${lake}/exports/sft", "${lake}/exports/rl/manifest.json"),
    outs_uncached=("${train.configs}",),
)
