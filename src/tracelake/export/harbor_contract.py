"""What SkyRL's Harbor route needs of its config, at the SkyRL commit it is pinned to: one table.

SkyRL's Harbor integration (examples/train_integrations/harbor in a SkyRL checkout, not in the
`skyrl` wheel) asks more of its config than the config classes say: HarborGenerator raises without
step-wise trajectories, asserts a served_model_name without `/`, raises on summarization; its
recipe (run_codecontest.sh) sets loss_reduction, the chat template, the engine's max length and the
TIS correction. A config that misses one starts Ray and vLLM on every GPU, then crashes. Each
requirement below names the key, what it must hold, where in SkyRL at SKYRL_COMMIT it comes from
(file:line, read from a SkyRL checkout at that commit), SkyRL's reason, and whether the generated
config (train_config.rl_config) sets it. `tracelake train rl` checks the final overrides (rl.yaml,
train.rl.extra included, then --set) against it before anything starts (launch/), and refuses a
violated one in one line.

Who checks what: the installed SkyRL (training/check_rl_config.py, in the SkyRL environment) parses
every key outside harbor_trial_config with its own config classes, so such a key exists there and
its value has the field's type; the value each requirement asks for is checked here, by this
contract, as read at SKYRL_COMMIT. harbor_trial_config is a free dict in SkyRL's config: only the
contract checks its keys.

SANDBOX_CREDENTIALS: the environment variables each Harbor sandbox type reads for its credentials
(daytona, modal: SkyRL's Harbor README and run_codecontest.sh:6-9 at SKYRL_COMMIT; e2b, runloop: the
providers' SDK conventions, which Harbor's environments use; docker runs on the local daemon, gke on
the machine's kubeconfig and Google credentials: no single variable).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

SKYRL_REPO = "https://github.com/NovaSky-AI/SkyRL"
SKYRL_COMMIT = "a9564572eb8e91076be43c1bd5e4615e3de17265"  # the default of train.rl.skyrl_commit
SHORT = 12

GENERATOR = "examples/train_integrations/harbor/harbor_generator.py"
MAIN = "examples/train_integrations/harbor/entrypoints/main_harbor.py"
DATASET = "examples/train_integrations/harbor/dataset.py"
RECIPE = "examples/train_integrations/harbor/run_codecontest.sh"
DEFAULTS = "examples/train_integrations/harbor/harbor_trial_config/default.yaml"
VALIDATE = "skyrl/train/utils/utils.py"  # validate_cfg, which main_harbor.py calls

# the chat template SkyRL's Harbor recipe gives a Qwen3 (thinking) model, a file of a SkyRL checkout
# (not in the wheel): `tracelake train rl` makes it absolute against the checkout it runs from
QWEN3_CHAT_TEMPLATE = "skyrl/train/utils/templates/qwen3_acc_thinking.jinja2"
SANDBOXES = ("daytona", "docker", "modal", "e2b", "runloop", "gke")  # default.yaml:81
SANDBOX_CREDENTIALS: dict[str, tuple[str, ...]] = {
    "daytona": ("DAYTONA_API_KEY",),
    "modal": ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET"),
    "e2b": ("E2B_API_KEY",),
    "runloop": ("RUNLOOP_API_KEY",),
    "docker": (),
    "gke": (),
}
TIS_TYPES = ("token", "sequence")

# the keys tracelake writes for a Harbor run
STEP_WISE = "generator.step_wise_trajectories"
MERGE = "generator.merge_stepwise_output"
SERVED_NAME = "generator.inference_engine.served_model_name"
MODEL = "trainer.policy.model.path"
MAX_SEQ_LEN = "trainer.algorithm.max_seq_len"
MAX_MODEL_LEN = "generator.inference_engine.engine_init_kwargs.max_model_len"
CHAT_TEMPLATE = "generator.inference_engine.engine_init_kwargs.chat_template"
MAX_INPUT_TOKENS = "harbor_trial_config.agent.kwargs.model_info.max_input_tokens"
TIS_TYPE = "trainer.algorithm.off_policy_correction.tis_ratio_type"
TIS_CLIP = "trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high"
SANDBOX = "harbor_trial_config.environment.type"


def served_model_name(model: str) -> str:
    """The name vLLM serves the policy under: the model's last path part (Qwen/Qwen3-8B ->
    Qwen3-8B), as SkyRL's recipe names it; Harbor asks for hosted_vllm/<it>, so no `/`."""
    return PurePosixPath(model.rstrip("/")).name or model


def is_qwen3(model: Any) -> bool:
    return isinstance(model, str) and "qwen3" in served_model_name(model).lower()


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _path(v: Any) -> bool:
    return isinstance(v, str) and bool(v.strip())


@dataclass(frozen=True)
class Requirement:
    key: str
    want: str  # the required value, in words
    holds: Callable[[Any, dict[str, Any]], bool]  # (the key's value or None, all overrides)
    source: str  # file:line at SKYRL_COMMIT
    why: str  # SkyRL's reason
    generated: bool = True  # the generated config sets it (train_config.rl_config)

    def check(self, overrides: dict[str, Any]) -> bool:
        return self.holds(overrides.get(self.key), overrides)

    @property
    def installed(self) -> bool:
        """Whether the installed SkyRL's own config also parses the key (check_rl_config.py): every
        key but harbor_trial_config's, which is a free dict there."""
        return not self.key.startswith("harbor_trial_config.")


REQUIREMENTS: tuple[Requirement, ...] = (
    Requirement(
        STEP_WISE,
        "true",
        lambda v, o: v is True,
        f"{GENERATOR}:244-247",
        "HarborGenerator only supports step-wise training (it raises at start)",
    ),
    Requirement(
        MERGE,
        "true",
        lambda v, o: v is True,
        f"{GENERATOR}:248-252, {VALIDATE}:372-377",
        "without it HarborGenerator warns that training may be much slower (step-wise outputs not merged)",
    ),
    Requirement(
        SERVED_NAME,
        "a name without '/'",
        lambda v, o: isinstance(v, str) and bool(v) and "/" not in v,
        f"{GENERATOR}:257-266",
        "HarborGenerator asserts it is set and has no '/': Harbor calls the policy as hosted_vllm/<name>",
    ),
    Requirement(
        "harbor_trial_config.agent.kwargs.enable_summarize",
        "false",
        lambda v, o: v is False,
        f"{GENERATOR}:275-280",
        "step-wise training is incompatible with summarization (HarborGenerator raises)",
    ),
    Requirement(
        "harbor_trial_config.agent.kwargs.collect_rollout_details",
        "true",
        lambda v, o: v is True,
        f"{GENERATOR}:269-273, {GENERATOR}:129-133",
        "step-wise training needs each turn's token ids and logprobs from vLLM via Harbor",
    ),
    Requirement(
        "trainer.algorithm.loss_reduction",
        "token_mean",
        lambda v, o: v == "token_mean",
        f"{RECIPE}:39, {VALIDATE}:366-370",
        "with step-wise training SkyRL has to use token_mean (prefix-merge-invariant; token_mean_legacy raises)",
    ),
    Requirement(
        "trainer.algorithm.advantage_estimator",
        "an outcome estimator (not gae or reinforce++)",
        lambda v, o: isinstance(v, str) and v not in ("gae", "reinforce++"),
        f"{VALIDATE}:357-365",
        "step-wise training broadcasts one scalar advantage per trajectory (validate_cfg raises)",
    ),
    Requirement(
        MAX_SEQ_LEN,
        "a positive whole number",
        lambda v, o: _int(v),
        f"{MAIN}:108-112",
        "the Harbor entrypoint refuses to start without it (it truncates responses to it)",
    ),
    Requirement(
        MAX_MODEL_LEN,
        f">= {MAX_SEQ_LEN}",
        lambda v, o: _int(v) and (not _int(o.get(MAX_SEQ_LEN)) or v >= o[MAX_SEQ_LEN]),
        f"{RECIPE}:36,89,103",
        "the engine must hold the whole sequence the trainer trains on (the recipe sets both to MAX_MODEL_LEN)",
    ),
    Requirement(
        MAX_INPUT_TOKENS,
        f"<= {MAX_MODEL_LEN}",
        lambda v, o: _int(v) and (not _int(o.get(MAX_MODEL_LEN)) or v <= o[MAX_MODEL_LEN]),
        f"{DEFAULTS}:53-56",
        "the agent budgets its context by it; it should match the engine's max_model_len",
    ),
    Requirement(
        CHAT_TEMPLATE,
        f"{PurePosixPath(QWEN3_CHAT_TEMPLATE).name} for a Qwen3 model",
        lambda v, o: not is_qwen3(o.get(MODEL)) or (isinstance(v, str) and v.endswith(QWEN3_CHAT_TEMPLATE)),
        f"{RECIPE}:44-48,88",
        "keeps Qwen3's thinking in the history, so step-wise outputs share prefixes and merge",
    ),
    Requirement(
        TIS_TYPE,
        " or ".join(TIS_TYPES),
        lambda v, o: v in TIS_TYPES,
        f"{RECIPE}:50-52,78-79",
        "the recipe corrects the vLLM sampler / trainer logprob mismatch with TIS (token, clip 2.0)",
    ),
    Requirement(
        "harbor_trial_config.trials_dir",
        "a directory (the run's)",
        lambda v, o: _path(v),
        f"{DEFAULTS}:21",
        "Harbor writes every trial there; the default is ~/trials, shared by every run",
    ),
    Requirement(
        "trainer.ckpt_path",
        "a directory (the run's)",
        lambda v, o: _path(v),
        f"{RECIPE}:27,72",
        "checkpoints, one directory per run",
    ),
    Requirement(
        "trainer.export_path",
        "a directory (the run's)",
        lambda v, o: _path(v),
        f"{RECIPE}:28,71",
        "exported models, one directory per run",
    ),
    Requirement(
        SANDBOX,
        " | ".join(SANDBOXES),
        lambda v, o: v in SANDBOXES,
        f"{DEFAULTS}:80-82",
        "the sandbox each Harbor trial runs in",
    ),
    Requirement(
        "data.train_data",
        "a list of directories of Harbor task directories",
        lambda v, o: isinstance(v, list) and bool(v) and all(_path(x) for x in v),
        f"{DATASET}:33-61, {MAIN}:70-75",
        "HarborTaskDataset lists each directory's task directories (those with an instruction.md)",
    ),
)
BY_KEY = {r.key: r for r in REQUIREMENTS}


def violated(overrides: dict[str, Any]) -> Requirement | None:
    """The first requirement the overrides break, else None."""
    return next((r for r in REQUIREMENTS if not r.check(overrides)), None)


def refusal(r: Requirement, overrides: dict[str, Any], commit: str = SKYRL_COMMIT) -> str:
    """One line: the key, what it holds, what it must hold, SkyRL's reason and where."""
    value = overrides.get(r.key, "unset")
    shown = value if isinstance(value, str) else json.dumps(value, default=str)  # as the command line writes it
    return (
        f"{r.key}={shown} breaks SkyRL's Harbor route: it must be {r.want}: {r.why} "
        f"({r.source} at SkyRL {commit[:SHORT]})"
    )


def credentials(sandbox: Any) -> tuple[str, ...]:
    return SANDBOX_CREDENTIALS.get(str(sandbox), ())


def lines(overrides: dict[str, Any], installed: str, commit: str = SKYRL_COMMIT) -> list[str]:
    """What the dry run says of each requirement: which check covered it. `installed` names what the
    installed SkyRL check said (e.g. `skyrl 0.4.0: ok`, or `not run`)."""
    out = []
    for r in REQUIREMENTS:
        by = f"value by the contract (SkyRL {commit[:SHORT]}, {r.source})"
        if r.installed:
            by += f"; key and type by installed SkyRL code ({installed})"
        value = overrides.get(r.key)
        shown = value if not isinstance(value, bool) else str(value).lower()
        out.append(f"{r.key}={shown}: ok, {by}")
    return out
