"""DVC stage `train_config`: training configs from params.yaml (train.*) and the exports' manifests ->
training/configs/ (sft-<scale>.yaml for LLaMA-Factory, one per exported scale; rl.yaml for SkyRL).

    python stages/train_config.py [--params params.yaml]
"""

from __future__ import annotations

from pathlib import Path

from tracelake.core.layout import Lake
from tracelake.core.stage import run_stage
from tracelake.export.train_config import RL_FILE, write_train_configs
from tracelake.params import stage_args


def main(argv: list[str] | None = None) -> None:
    params, _ = stage_args(__doc__, argv)
    out = Path(params.train.configs)
    write_train_configs(out, Lake(params.lake), list(params.select.scales), params.train, params.export_rl)
    print(f"train_config: {len(params.select.scales)} SFT config(s) and {RL_FILE} -> {out}")


if __name__ == "__main__":
    run_stage(main)
