"""Check SkyRL config overrides against the installed SkyRL's own config (run with the trainer's
environment's python; `tracelake train rl` runs it before every launch and in --dry-run).

    python training/check_rl_config.py key=value [key=value ...]

- skyrl 0.4+ (`skyrl.train`, typed dataclasses): `SkyRLTrainConfig.from_cli_overrides`, the parse its
  entrypoint does, which refuses any key its dataclasses lack, at any depth. Without torch (a CPU
  machine) the root's cross-field checks cannot import; every section (data, trainer, generator, ...)
  is then built with the same strict `build_nested_dataclass`, and the output says so.
- skyrl-train 0.3.x (`skyrl_train`, Hydra): Hydra composes `ppo_base_config` with the overrides, as
  its entrypoint's @hydra.main does; a key not in the config is refused.

Both then check the GPU placement SkyRL's validate_cfg asserts when the policy, the reference model
and the inference engines share GPUs (colocate_all): policy GPUs = engines x tensor x pipeline x data
parallel size. One line out: `ok: ...` (exit 0) or `error: ...` (exit 1), after it a `note: ...` when
environment.env_class is not registered in the installed SkyRL-Gym (main_base could not make it
unless the entrypoint registers it first). Imports nothing from tracelake.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import re
import sys
from pathlib import Path
from typing import Any


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    text = re.sub(r"\.? Valid fields are \{.*?\}\.?", ".", text)  # hundreds of names, in set order
    cause = e.__cause__ or e.__context__
    if cause is not None and str(cause) and str(cause) not in text:
        text += " (" + " ".join(str(cause).split()) + ")"
    return text[:1500]


def check_skyrl(args: list[str]) -> tuple[str, Any]:
    """skyrl 0.4+: (how it was checked, the config as nested attributes)."""
    from skyrl.train.config import SkyRLTrainConfig

    try:
        return "SkyRLTrainConfig.from_cli_overrides", SkyRLTrainConfig.from_cli_overrides(args)
    except ImportError as e:  # the root's __post_init__ imports the inference servers (torch)
        missing = getattr(e, "name", None) or str(e)
    from omegaconf import OmegaConf
    from skyrl.train.config.config import _resolve_class_type, build_nested_dataclass

    raw = OmegaConf.to_container(OmegaConf.from_cli(args), resolve=True)
    fields = {f.name: f for f in dataclasses.fields(SkyRLTrainConfig)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ValueError(f"Invalid fields {set(unknown)} for SkyRLTrainConfig. Valid fields are {sorted(fields)}")
    sections = {}
    for name, field in fields.items():
        cls = _resolve_class_type(field.type)
        value = raw.get(name, {})
        if cls is not None and dataclasses.is_dataclass(cls) and isinstance(value, dict):
            sections[name] = build_nested_dataclass(cls, value)
        else:
            sections[name] = value
    how = f"each section built strictly; the root's cross-field checks need {missing}, not installed"
    return how, _Attrs(sections)


def check_skyrl_train(args: list[str]) -> tuple[str, Any]:
    """skyrl-train 0.3.x: Hydra's compose of the package's ppo_base_config."""
    import skyrl_train
    from hydra import compose, initialize_config_dir

    config_dir = Path(skyrl_train.__file__).parent / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return "Hydra compose of ppo_base_config", compose(config_name="ppo_base_config", overrides=args)


class _Attrs:
    def __init__(self, d: dict) -> None:
        self.__dict__.update(d)


def _get(cfg: Any, path: str, default: Any = None) -> Any:
    for part in path.split("."):
        if cfg is None:
            return default
        cfg = cfg.get(part) if isinstance(cfg, dict) else getattr(cfg, part, None)
    return default if cfg is None else cfg


def placement_error(cfg: Any, new: bool) -> str | None:
    if not _get(cfg, "trainer.placement.colocate_all", False):
        return None
    engine = "generator.inference_engine." if new else "generator."
    keys = {"num_engines": engine + ("num_engines" if new else "num_inference_engines")}
    for size in ("tensor", "pipeline", "data"):
        keys[size] = engine + (f"{size}_parallel_size" if new else f"inference_engine_{size}_parallel_size")
    values = {k: int(_get(cfg, key, 1)) for k, key in keys.items()}
    policy = int(_get(cfg, "trainer.placement.policy_num_gpus_per_node", 1)) * int(
        _get(cfg, "trainer.placement.policy_num_nodes", 1)
    )
    engines_gpus = values["num_engines"] * values["tensor"] * values["pipeline"] * values["data"]
    if policy == engines_gpus:
        return None
    return (
        f"colocate_all needs policy GPUs ({policy} = policy_num_gpus_per_node x policy_num_nodes) equal to "
        f"the inference engines' GPUs ({engines_gpus} = {keys['num_engines']} {values['num_engines']} x "
        f"tensor {values['tensor']} x pipeline {values['pipeline']} x data {values['data']})"
    )


def main(args: list[str]) -> int:
    try:
        import skyrl.train.config  # noqa: F401

        package, new = "skyrl", True
    except ImportError:
        package, new = "skyrl-train", False
    version = importlib.metadata.version(package)
    try:
        how, cfg = check_skyrl(args) if new else check_skyrl_train(args)
    except Exception as e:  # the package's own refusal, as one line
        print(f"error: {package} {version} refuses the overrides: {_one_line(e)}")
        return 1
    problem = placement_error(cfg, new)
    if problem:
        print(f"error: {package} {version}: {problem}")
        return 1
    print(f"ok: {len(args)} overrides are keys of {package} {version}'s config: {how}; GPU placement consistent")
    note = env_class_note(_get(cfg, "environment.env_class"))
    if note:
        print(f"note: {note}")
    return 0


def env_class_note(env_class: str | None) -> str | None:
    try:
        from skyrl_gym.envs.registration import registry
    except ImportError:
        return None
    if env_class is None or env_class in registry:
        return None
    version = importlib.metadata.version("skyrl-gym")
    return (
        f"environment.env_class {env_class!r} is not registered in skyrl-gym {version} "
        f"({', '.join(sorted(registry))}): register it before main_base makes environments, or run SkyRL's "
        f"Harbor integration for Harbor tasks (docs/exports-and-training.md, Train on GPUs)"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
