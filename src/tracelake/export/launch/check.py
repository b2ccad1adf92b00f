"""The checks before a run starts: the dataset is fresh and was counted with the model's tokenizer,
an RL dataset holds a batch, and the trainer's own parser accepts the plan's overrides.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracelake.core.datasets import trained_kind
from tracelake.core.envs import ENVIRONMENTS, env_program
from tracelake.core.errors import BadInput, BadParams
from tracelake.core.freshness import pipeline_freshness
from tracelake.export.launch.plan import CHECK_RL_FILE, CHECK_SFT_FILE, Dataset, Params, Plan, rl_route
from tracelake.export.params import RL_TRAINERS
from tracelake.tokens.model_tokenizer import resolve
from tracelake.tokens.tokenizer import tokenizer_fingerprint


def export_stage(ds: Dataset) -> str:
    """The dvc.yaml stage that builds a dataset's export."""
    exports = trained_kind(ds.kind)
    return exports.building_stage(ds.export_dir.name if exports.per_scale else "")


def check_fresh(ds: Dataset, project: Path = Path(".")) -> str:
    """Whether the dataset and its training config are what `dvc repro` would build now: DVC's own
    status of the export's stage and `train_config`, with every stage upstream of them
    (core/freshness.py). A stale one (params, code or inputs changed since, or a build left half
    done) raises BadInput in one line naming the stages and the command that rebuilds them. Outside
    a DVC project, or without dvc, it is not checked (said in the line returned)."""
    targets = [export_stage(ds), "train_config"]
    fresh = pipeline_freshness(project, targets)
    if not fresh.checked or not fresh.changed:
        return fresh.why
    raise BadInput(
        f"train {ds.kind}: {ds.dataset_id} is stale: dvc status: {fresh.describe(fresh.changed)}; run "
        f"`dvc repro {' '.join(targets)}` first"
    )


MODEL_KEY = {"sft": "model_name_or_path", "rl": "trainer.policy.model.path"}  # the config key naming the model


def check_tokenizer(params: Params, ds: Dataset, sets: dict[str, Any], allow: bool = False) -> str:
    """Whether the model that trains has the tokenizer that counted the dataset (the sha256 of its
    tokenizer.json, recorded in the export's manifest): one line for the plan. A different one
    raises BadInput unless `allow`. The model's tokenizer is looked for on this machine only (a
    local directory, the hub cache: tokens/model_tokenizer.py); not found, it is not checked."""
    counted = (ds.manifest.get("inputs") or {}).get("tokenizer")
    default = params.train.sft.model if ds.kind == "sft" else params.train.rl.model
    model = str(sets.get(MODEL_KEY[ds.kind]) or default)
    if counted is None:
        return "not checked: the export counted no tokens (count_tokens: false)"
    try:
        found = resolve(model, download=False, what="the model")
    except (BadParams, OSError):  # not found; or a name no file system here takes (too long)
        return f"not checked: {model}'s tokenizer is not on this machine; the export was counted with sha256 {counted[:12]}"
    theirs = tokenizer_fingerprint(found.directory)
    if theirs == counted:
        return f"ok: {model}'s tokenizer counted this export (sha256 {counted[:12]})"
    why = (
        f"{ds.dataset_id} was counted with tokenizer sha256 {counted[:12]}, but {model}'s is {theirs[:12]}: its "
        f"lengths, cutoff rejects and max_tokens drops are not the model's (tokenizer.source: model and dvc repro "
        f"count them again; --allow-tokenizer-mismatch trains anyway)"
    )
    if not allow:
        raise BadInput(f"train {ds.kind}: {why}")
    return "MISMATCH, allowed: " + why


def check_batch(ds: Dataset, config: dict[str, Any], sets: dict[str, Any]) -> None:
    """SkyRL asserts that the dataset holds at least train_batch_size items, after starting its
    cluster: said here first, in one line."""
    batch = sets.get("trainer.train_batch_size", config["overrides"].get("trainer.train_batch_size"))
    counts = ds.manifest["counts"]
    harbor = rl_route(config) == "harbor"
    items = counts["task_dirs"]["count"] if harbor else counts["tasks_out"]
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int)):
        raise BadParams(f"train rl: trainer.train_batch_size {batch!r} is not a whole number")
    if batch is not None and batch > items:
        raise BadInput(
            f"train rl: trainer.train_batch_size {batch} > the {items} "
            f"{'Harbor task directories' if harbor else 'task prompts'} of {ds.dataset_id}: SkyRL needs at least "
            f"one batch (lower train.rl.train_batch_size, or export more tasks)"
        )


@dataclass
class Check:
    ok: bool | None  # None: not checked (the trainer's environment is not installed here)
    line: str
    notes: list[str] = field(default_factory=list)  # what the check saw that may fail later (env_class)


def check_rl(plan: Plan) -> Check:
    """Run training/check_rl_config.py with the plan's overrides in its trainer's environment: the
    installed SkyRL's own config parse refuses unknown keys and inconsistent GPU placement."""
    if plan.rl_overrides is None:
        raise ValueError("check_rl: not an RL plan")
    python = env_program(plan.environment, "python")
    if python is None:
        _, _, setup = ENVIRONMENTS[plan.environment]
        return Check(None, f"not checked: the {plan.environment} environment is not installed ({setup})")
    main_base = plan.rl_entrypoint in {entrypoint for entrypoint, _ in RL_TRAINERS.values()}
    route = ["--harbor"] if plan.rl_route == "harbor" else ["--main-base"] if main_base else []
    return _run_check(python, CHECK_RL_FILE, [*route, *plan.rl_overrides])


def check_sft(plan: Plan) -> Check:
    """Run training/check_sft_config.py in the training environment over the local config and the
    plan's key=value arguments: LLaMA-Factory's own HfArgumentParser refuses unknown keys (a --set
    typo) and values its argument classes reject. A Modal plan is checked over the same arguments
    (its remote config is the local one with paths moved to the volumes)."""
    if plan.sft_args is None:
        raise ValueError("check_sft: not an SFT plan")
    python = env_program("training", "python")
    if python is None:
        _, _, setup = ENVIRONMENTS["training"]
        return Check(None, f"not checked: the training environment is not installed ({setup})")
    local = ["--local"] if plan.backend == "local" else []  # report_to's integrations must be installed there
    return _run_check(python, CHECK_SFT_FILE, [*local, str(plan.dataset.config_path), *plan.sft_args])


def _run_check(python: Path, script: str, args: list[str]) -> Check:
    """One check script's run: its last `ok: `/`error: ` line, and its `note: ` lines."""
    proc = subprocess.run(
        [str(python), script, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(("ok: ", "error: "))]
    if not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return Check(False, f"error: {script} failed (exit {proc.returncode}): {tail}")
    notes = [line.removeprefix("note: ") for line in proc.stdout.splitlines() if line.startswith("note: ")]
    return Check(proc.returncode == 0 and lines[-1].startswith("ok: "), lines[-1], notes)


def check(plan: Plan) -> Check:
    """The trainer's own parse of what the plan would pass (check_sft or check_rl)."""
    return check_rl(plan) if plan.rl_overrides is not None else check_sft(plan)
