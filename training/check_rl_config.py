"""Check SkyRL config overrides against the installed SkyRL's own config (run with the trainer's
environment's python; `tracelake train rl` runs it before every launch and in --dry-run).

    python training/check_rl_config.py [--harbor | --main-base] key=value [key=value ...]

- skyrl 0.4+ (`skyrl.train`, typed dataclasses): `SkyRLTrainConfig.from_cli_overrides`, the parse its
  entrypoint does, which refuses any key its dataclasses lack, at any depth. Without torch (a CPU
  machine) the root's cross-field checks cannot import; every section (data, trainer, generator, ...)
  is then built with the same strict `build_nested_dataclass`, and the output says so.
- skyrl-train 0.3.x (`skyrl_train`, Hydra): Hydra composes `ppo_base_config` with the overrides, as
  its entrypoint's @hydra.main does; a key not in the config is refused.

- `--harbor` (skyrl 0.4+): the overrides of SkyRL's Harbor entrypoint
  (examples/train_integrations/harbor/entrypoints/main_harbor.py, in SkyRL's repository, not its
  wheel), parsed as it parses them: `HarborSkyRLConfig.from_cli_overrides`, where HarborSkyRLConfig is
  SkyRLTrainConfig plus a `harbor_trial_config` dict and a generator with a `rate_limit` (the same
  two fields main_harbor.py declares, rebuilt here from the installed SkyRL's classes). Every key but
  those under harbor_trial_config is checked by SkyRL's own dataclasses; harbor_trial_config is a
  free dict there (Harbor's TrialConfig reads it at trial time), so this script checks what training
  needs of it: agent.kwargs.collect_rollout_details true, and trainer.algorithm.max_seq_len set, as
  main_harbor.py requires.

Both then check the GPU placement SkyRL's validate_cfg asserts when the policy, the reference model
and the inference engines share GPUs (colocate_all): policy GPUs = engines x tensor x pipeline x data
parallel size. One line out: `ok: ...` (exit 0) or `error: ...` (exit 1). With --main-base (the
trainer's own main_base entrypoint), an environment.env_class that the installed SkyRL-Gym does not
register is an error: main_base could not make its environments (an entrypoint of your own may
register it first: then the flag is not given). Imports nothing from tracelake.

For the Harbor route this is the second check: `tracelake train rl` first checks the overrides against
src/tracelake/export/harbor_contract.py, the requirements of main_harbor, HarborGenerator and
HarborTaskDataset at the SkyRL commit train.rl.skyrl_commit pins (step-wise trajectories,
served_model_name, summarization, loss_reduction, the engine's max length, ...), which SkyRL's config
classes do not check at parse time (HarborGenerator raises or asserts on them after Ray and vLLM start).
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


def _rate_limiter_config() -> type:
    """skyrl.train.utils.rate_limiter's RateLimiterConfig. Its package imports Ray on import, which a
    CPU check environment may lack; the module itself does not, so it is then loaded on its own."""
    try:
        from skyrl.train.utils.rate_limiter import RateLimiterConfig

        return RateLimiterConfig
    except ImportError:
        import importlib.util

        import skyrl.train

        path = Path(skyrl.train.__file__).parent / "utils" / "rate_limiter.py"
        spec = importlib.util.spec_from_file_location("_skyrl_rate_limiter", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
        spec.loader.exec_module(module)
        return module.RateLimiterConfig


def harbor_config_class() -> type:
    """main_harbor.py's HarborSkyRLConfig, from the installed SkyRL's own classes."""
    from skyrl.train.config import GeneratorConfig, SkyRLTrainConfig

    RateLimiterConfig = _rate_limiter_config()

    # made with real types, not annotations (postponed here: SkyRL reads each field's type as is)
    field = dataclasses.field
    generator = dataclasses.make_dataclass(
        "HarborGeneratorConfig",
        [("rate_limit", RateLimiterConfig, field(default_factory=RateLimiterConfig))],
        bases=(GeneratorConfig,),
    )
    return dataclasses.make_dataclass(
        "HarborSkyRLConfig",
        [
            ("harbor_trial_config", dict, field(default_factory=dict)),
            ("generator", generator, field(default_factory=generator)),
        ],
        bases=(SkyRLTrainConfig,),
    )


def check_skyrl(args: list[str], harbor: bool = False) -> tuple[str, Any]:
    """skyrl 0.4+: (how it was checked, the config as nested attributes)."""
    from skyrl.train.config import SkyRLTrainConfig

    root = harbor_config_class() if harbor else SkyRLTrainConfig
    try:
        return f"{root.__name__}.from_cli_overrides", root.from_cli_overrides(args)
    except ImportError as e:  # the root's __post_init__ imports the inference servers (torch)
        missing = getattr(e, "name", None) or str(e)
    from omegaconf import OmegaConf
    from skyrl.train.config.config import _resolve_class_type, build_nested_dataclass

    raw = OmegaConf.to_container(OmegaConf.from_cli(args), resolve=True)
    fields = {f.name: f for f in dataclasses.fields(root)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ValueError(f"Invalid fields {set(unknown)} for {root.__name__}. Valid fields are {sorted(fields)}")
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


def harbor_error(cfg: Any) -> str | None:
    """What SkyRL's Harbor route needs beyond its config classes (main_harbor.py, HarborGenerator)."""
    if _get(cfg, "trainer.algorithm.max_seq_len") is None:
        return "trainer.algorithm.max_seq_len must be set: the Harbor entrypoint refuses to start without it"
    trial = _get(cfg, "harbor_trial_config", {}) or {}
    kwargs = (trial.get("agent") or {}).get("kwargs") or {}
    if kwargs.get("collect_rollout_details") is not True:
        return (
            "harbor_trial_config.agent.kwargs.collect_rollout_details must be true: training needs each "
            "turn's token ids and logprobs"
        )
    return None


def main(args: list[str]) -> int:
    harbor, main_base = "--harbor" in args, "--main-base" in args
    args = [a for a in args if a not in ("--harbor", "--main-base")]
    try:
        import skyrl.train.config  # noqa: F401

        package, new = "skyrl", True
    except ImportError:
        package, new = "skyrl-train", False
    version = importlib.metadata.version(package)
    if harbor and not new:
        print(f"error: SkyRL's Harbor route needs skyrl 0.4+, and this environment has {package} {version}")
        return 1
    try:
        how, cfg = check_skyrl(args, harbor) if new else check_skyrl_train(args)
    except Exception as e:  # the package's own refusal, as one line
        print(f"error: {package} {version} refuses the overrides: {_one_line(e)}")
        return 1
    problem = placement_error(cfg, new) or (
        harbor_error(cfg) if harbor else env_class_error(cfg) if main_base else None
    )
    if problem:
        print(f"error: {package} {version}: {problem}")
        return 1
    mine = sum(a.startswith("harbor_trial_config.") for a in args) if harbor else 0
    scope = (
        f"{len(args) - mine} overrides are keys of {package} {version}'s config ({how}), {mine} are "
        f"harbor_trial_config keys for Harbor (collect_rollout_details checked here)"
        if harbor
        else f"{len(args)} overrides are keys of {package} {version}'s config: {how}"
    )
    print(f"ok: {scope}; GPU placement consistent")
    return 0


def env_class_error(cfg: Any) -> str | None:
    """main_base makes each environment by its env_class from SkyRL-Gym's registry."""
    env_class = _get(cfg, "environment.env_class")
    try:
        from skyrl_gym.envs.registration import registry
    except ImportError:
        return None
    if env_class is None or env_class in registry:
        return None
    version = importlib.metadata.version("skyrl-gym")
    return (
        f"environment.env_class {env_class!r} is not registered in skyrl-gym {version} "
        f"({', '.join(sorted(registry))}): main_base cannot make it; use train.rl.route: harbor for Harbor tasks, "
        f"or an entrypoint (train.rl.entrypoint) that registers your environment"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
