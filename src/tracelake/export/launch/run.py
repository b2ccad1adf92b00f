"""The checked plan (`make_plan`), what it would run in plain text (`describe`, the --dry-run output)
and starting it (`run`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from contextlib import ExitStack
from pathlib import Path

import yaml

from tracelake.core.envs import ENVIRONMENTS
from tracelake.core.errors import BadInput, BadParams
from tracelake.core.ui import out
from tracelake.export import harbor_contract
from tracelake.export.launch.check import Check, check_batch, check_fresh, check_tokenizer
from tracelake.export.launch.plan import (
    BACKENDS,
    FORWARDED_ENV,
    REMOTE_SFT_CONFIG,
    Params,
    Plan,
    parse_sets,
    plan_local,
    plan_modal,
    resolve_dataset,
)
from tracelake.export.set_keys import refuse
from tracelake.export.task_dirs import HARBOR_DIR, materialize
from tracelake.export.task_dirs import describe as describe_task_dirs


def make_plan(
    params: Params,
    kind: str,
    ref: str,
    backend: str,
    sets: list[str],
    gpus: int | None = None,
    allow_tokenizer_mismatch: bool = False,
    stack: ExitStack | None = None,
) -> Plan:
    """`gpus` overrides train.sft.gpus for a local SFT run (processes started by torchrun). Refuses a
    dataset counted with another tokenizer than the model's (check_tokenizer) unless allowed, and a
    stale one (check_fresh). A `REV:NAME` dataset lives in a temporary tree as long as `stack`."""
    if backend not in BACKENDS:
        raise BadParams(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if gpus is not None and gpus < 1:
        raise BadParams(f"--gpus must be >= 1, got {gpus}")
    parsed = parse_sets(sets)
    refuse(kind, parsed)  # before anything is read: a --set may not change which data trains, or how
    ds = resolve_dataset(params, kind, ref, stack)
    if kind == "rl":
        check_batch(ds, yaml.safe_load(ds.config_path.read_text()), parsed)
    tokenizer = check_tokenizer(params, ds, parsed, allow_tokenizer_mismatch)
    fresh = (
        check_fresh(ds)
        if ds.revision is None
        else f"as {ds.revision} recorded it (read from the DVC cache; not compared with this workspace)"
    )
    plan = plan_local(params, ds, parsed, gpus) if backend == "local" else plan_modal(params, ds, parsed)
    plan.tokenizer, plan.fresh = tokenizer, fresh
    return plan


def contract_lines(plan: Plan, checked: Check) -> list[str]:
    """Per requirement of the Harbor contract, which check covered it (printed after `check:`)."""
    if plan.harbor_overrides is None:
        return []
    if checked.ok:
        installed = checked.line.split(":", 1)[1].split("(", 1)[0].split(" of ", 1)[-1].strip() or "ok"
        installed = f"check ok: {installed}"
    else:
        installed = "not run here: " + checked.line.removeprefix("not checked: ")
    n = len(harbor_contract.REQUIREMENTS)
    head = f"contract: {n} requirements of SkyRL's Harbor route at {harbor_contract.SKYRL_COMMIT[:12]} hold"
    return [head, *("  " + line for line in harbor_contract.lines(plan.harbor_overrides, installed))]


def describe(plan: Plan) -> str:
    """What would run, in plain text (the --dry-run output)."""
    ds = plan.dataset
    counts = ds.manifest["counts"]
    if ds.kind == "sft":
        what = f"{counts['rows_out']} examples"
    elif plan.rl_route == "harbor":
        what = f"{counts['task_dirs']['count']} Harbor tasks"
    else:
        what = f"{counts['tasks_out']} task prompts"
    lines = [
        f"dataset:  {ds.dataset_id} ({what}, {ds.export_dir.as_posix()})",
        *([f"revision: {ds.revision}: the export and config as it recorded them"] if ds.revision else []),
        f"config:   {ds.config_path.as_posix()}",
        f"backend:  {plan.backend}",
    ]
    optional = (  # (whether the plan has it, its line)
        (plan.gpu, lambda: f"gpu:      {plan.gpu}"),
        (plan.rl_route, lambda: f"route:    {plan.rl_route} ({plan.rl_entrypoint})"),
        (plan.task_dirs, lambda: f"tasks:    {describe_task_dirs(ds.export_dir, ds.manifest, plan.task_dirs)}"),
        (plan.tokenizer, lambda: f"tokenizer: {plan.tokenizer}"),
        (plan.fresh, lambda: f"fresh:    {plan.fresh}"),
        (plan.run_dir, lambda: f"run dir:  {plan.run_dir} ({plan.run_state})"),
        (plan.report_to, lambda: f"report:   {plan.report_to}"),
        (
            plan.skyrl,
            lambda: f"skyrl:    {plan.skyrl}; its Harbor contract was read at {harbor_contract.SKYRL_COMMIT[:12]}",
        ),
    )
    lines += [line() for present, line in optional if present]
    if plan.harbor_overrides is not None:
        sandbox = plan.harbor_overrides.get(harbor_contract.SANDBOX)
        names = ", ".join(f"{n} ({'set' if ok else 'not set'})" for n, ok in plan.credentials.items())
        where = " from the local environment, forwarded to Modal" if plan.backend == "modal" else ""
        lines.append(f"sandbox:  {sandbox}: " + (f"{names}{where}" if names else "no credential variable"))
    for note in plan.notes:
        lines.append(f"note:     {note}")
    for mount, volume in plan.volumes.items():
        lines.append(f"volume:   {volume} -> {mount}")
    if plan.upload:
        local, volume, remote = plan.upload
        lines.append(f"upload:   {local} -> {volume}:{remote} (skipped when {remote} is already on the volume)")
        if plan.task_dirs:
            lines.append(f"upload:   {plan.task_dirs.as_posix()} -> {volume}:{remote}/{HARBOR_DIR} (with it)")
    if plan.backend == "modal":
        lines.append(
            "secrets:  "
            + ", ".join(f"{n} ({'set' if os.environ.get(n) else 'not set'})" for n in FORWARDED_ENV)
            + " from the local environment"
        )
    for k, v in plan.env.items():
        lines.append(f"env:      {k}={v}")
    lines.append("command:  " + shlex.join(plan.command))
    if plan.blocker:
        lines.append(f"blocked:  {plan.blocker}")
    if plan.remote_command:
        lines.append("remote:   " + shlex.join(plan.remote_command))
    if plan.remote_config is not None and plan.dataset.kind == "sft":
        lines.append(f"remote config ({REMOTE_SFT_CONFIG}):")
        lines += ["  " + line for line in yaml.safe_dump(plan.remote_config, sort_keys=False).splitlines()]
    return "\n".join(lines)


def run(plan: Plan) -> int:
    """Start the plan; returns the trainer's exit code."""
    if plan.blocker:
        raise BadInput(f"train {plan.dataset.kind}: {plan.blocker}")
    missing = [n for n, ok in plan.credentials.items() if not ok]
    if missing:
        sandbox = (plan.harbor_overrides or {}).get(harbor_contract.SANDBOX)
        raise BadInput(
            f"train rl: {', '.join(missing)} not set: Harbor's {sandbox} sandbox needs it for every trial "
            f"(harbor_trial_config.environment.type, train.rl.harbor.environment)"
        )
    program = plan.command[0]
    if not (Path(program).exists() or shutil.which(program)):
        environment = "training" if plan.backend == "modal" else plan.environment
        variable, _, setup = ENVIRONMENTS[environment]
        raise BadInput(
            f"{Path(program).name} not found: install the {environment} environment with "
            f"`{setup}` (or set {variable} to one)"
        )
    if plan.task_dirs:
        n, now = materialize(plan.dataset.export_dir, plan.dataset.manifest, plan.task_dirs, plan.archive_limits)
        done = "extracted from the export's task table" if now else "already extracted"
        out.print(f"tasks:    {n} Harbor task directories in {plan.task_dirs.as_posix()} ({done})", markup=False)
    return subprocess.run(plan.command, env={**os.environ, **plan.env}).returncode
