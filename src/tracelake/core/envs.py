"""The separate environments that hold heavy engines (torch, LLaMA-Factory, SkyRL; vLLM): each is a
virtual environment named by a variable, else a default directory in the working directory.

    training   $TRACELAKE_TRAIN_ENV, else .venv-train   (bash training/setup-env.sh)
    skyrl      $TRACELAKE_SKYRL_ENV, else .venv-skyrl   (bash training/setup-skyrl-env.sh; Python 3.12)
    vllm       $TRACELAKE_VLLM_ENV, else .venv-vllm     (bash scoring/setup-vllm-env.sh)
"""

from __future__ import annotations

import os
from pathlib import Path

ENVIRONMENTS: dict[str, tuple[str, str, str]] = {  # kind -> (variable, default directory, setup command)
    "training": ("TRACELAKE_TRAIN_ENV", ".venv-train", "bash training/setup-env.sh"),
    "skyrl": ("TRACELAKE_SKYRL_ENV", ".venv-skyrl", "bash training/setup-skyrl-env.sh"),
    "vllm": ("TRACELAKE_VLLM_ENV", ".venv-vllm", "bash scoring/setup-vllm-env.sh"),
}


def env_dir(kind: str) -> Path:
    variable, default, _ = ENVIRONMENTS[kind]
    return Path(os.environ.get(variable) or default)


def env_program(kind: str, name: str) -> Path | None:
    """<environment>/bin/<name> when it exists, else None."""
    path = env_dir(kind) / "bin" / name
    return path if path.exists() else None


def env_command(kind: str, name: str) -> str:
    """A program of the environment, else the bare name (found on PATH when it runs)."""
    program = env_program(kind, name)
    return str(program) if program else name
