"""Check 5: a 3-step SkyRL run of a tiny model on 2 of the RL export's Harbor tasks, through the
generated config (training/configs/rl.yaml) and the launcher `tracelake train rl` uses.

    python tests/gpu/skyrl_check.py --out OUT --skyrl-checkout DIR [--steps 3] [--tasks 2]
                                    [--work /tmp/gpu-skyrl] [--project DIR]
    python tests/gpu/skyrl_check.py --out OUT --plan-only       (any machine: the plan, checked)

Runs in the project's python (tracelake); the trainer runs in the SkyRL environment
(TRACELAKE_SKYRL_ENV, default .venv-skyrl), which for a real run must hold skyrl with its fsdp and
harbor extras, Ray, vLLM and a CUDA torch; Harbor's `docker` environment needs a Docker daemon.

1. The 2 first tasks of the export's task table, lake/exports/rl/tasks/ (`dvc repro` builds it),
   are extracted to WORK/tasks (`tracelake tasks extract`'s code): data.train_data names that
   directory.
2. A tiny random Qwen3 (tests/train_env/tiny_qwen3.py) beside data/tokenizer, built in the SkyRL
   environment, is the policy.
3. The plan is export/launch's own (`resolve_dataset`, `check_batch`, `plan_local`) for the RL
   export with train.rl.skyrl_checkout set, and only what one GPU and 3 steps must change: the model,
   the tasks, batch 2 x 2 samples, `trainer.epochs` = steps (2 tasks, batch 2: one step an epoch),
   one GPU colocated, one vLLM engine at 40% of the GPU, 2 agent turns, Harbor's `docker`
   environment, the trials, checkpoints and exports under WORK, the console logger. The overrides
   are checked against the installed SkyRL's config classes (`check_rl`, what `--dry-run` prints).
4. The command runs (`launch.run.run`), its output in OUT/skyrl.log.

PASS when the trainer exits 0 and WORK/trials holds at least steps x tasks x samples trial
directories with a result.json, and `tracelake ingest harbor` reads them back as a source (rollouts
come back). With --plan-only: PASS when the plan is built and SkyRL's config classes accept it
(no GPU, model or checkout needed; nothing runs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from report import report  # tests/gpu/: this folder is sys.path[0]

ROOT = Path(__file__).resolve().parents[2]
TINY_QWEN3 = ROOT / "tests" / "train_env" / "tiny_qwen3.py"
SAMPLES = 2


def overrides(work: Path, model: Path, tasks: Path, steps: int, n_tasks: int) -> dict:
    """What a one-GPU, `steps`-step run changes in the generated rl.yaml (the rest is the recipe's)."""
    return {
        "data.train_data": [str(tasks)],
        "trainer.policy.model.path": str(model),
        "trainer.epochs": steps,
        "trainer.train_batch_size": n_tasks,
        "trainer.policy_mini_batch_size": n_tasks,
        "trainer.micro_train_batch_size_per_gpu": 1,
        "trainer.micro_forward_batch_size_per_gpu": 1,
        "generator.n_samples_per_prompt": SAMPLES,
        "trainer.placement.colocate_all": True,
        "trainer.placement.policy_num_gpus_per_node": 1,
        "trainer.placement.ref_num_gpus_per_node": 1,
        "generator.inference_engine.num_engines": 1,
        "generator.inference_engine.tensor_parallel_size": 1,
        "generator.inference_engine.gpu_memory_utilization": 0.4,
        "trainer.algorithm.max_seq_len": 4096,
        "trainer.max_prompt_length": 2048,
        "trainer.ckpt_interval": -1,
        "trainer.hf_save_interval": -1,
        "trainer.logger": "console",
        "trainer.ckpt_path": str(work / "ckpts"),
        "trainer.export_path": str(work / "exports"),
        "harbor_trial_config.trials_dir": str(work / "trials"),
        "harbor_trial_config.agent.kwargs.max_turns": 2,
        "harbor_trial_config.agent.kwargs.model_info.max_input_tokens": 4096,
        "harbor_trial_config.environment.type": "docker",
    }


# What this check sets that no user's `--set` may (export/set_keys.py refuses both): it trains on the
# first tasks only, with short prompts, to fit one GPU in minutes. The plan is made without them, so
# tracelake's own rules and the Harbor contract check everything else; they are put in its command
# afterwards, before SkyRL's own check reads it.
HARNESS_ONLY = ("data.train_data", "trainer.max_prompt_length")


def harness_plan(params, ds, sets: dict):
    """plan_local's plan for `sets`, with HARNESS_ONLY's keys added after the plan is made."""
    from tracelake.export.launch.plan import plan_local
    from tracelake.export.train_config import hydra_overrides

    plan = plan_local(params, ds, {k: v for k, v in sets.items() if k not in HARNESS_ONLY})
    own = hydra_overrides({k: sets[k] for k in HARNESS_ONLY if k in sets})
    replaced = tuple(f"{k}=" for k in HARNESS_ONLY)
    plan.rl_overrides = [o for o in plan.rl_overrides if not o.startswith(replaced)] + own
    plan.command = [c for c in plan.command if not c.startswith(replaced)] + own
    plan.task_dirs = None  # this check extracts its own tasks; the export's are not extracted
    return plan


def project_params(project: Path, checkout: str | None):
    """The project's params.yaml with train.rl.skyrl_checkout set (the harbor route's entrypoint lives there)."""
    import yaml

    from tracelake.params import parse_params

    data = yaml.safe_load((project / "params.yaml").read_text())
    data["train"]["rl"]["skyrl_checkout"] = checkout
    return parse_params(data)


def check(args: argparse.Namespace) -> dict:
    import yaml

    from tracelake.core.envs import env_program
    from tracelake.export.launch.check import check_batch, check_rl
    from tracelake.export.launch.plan import resolve_dataset
    from tracelake.export.launch.run import describe
    from tracelake.export.launch.run import run as launch
    from tracelake.export.task_dirs import task_paths, task_tables
    from tracelake.ingest.task_archive import extract_table

    project = Path(args.project).resolve()
    os.chdir(project)  # the params' paths (lake, training/configs) are the project's
    work = Path(args.work)
    if work.exists():
        shutil.rmtree(work)
    tasks, model = work / "tasks", work / "model"
    result: dict = {"check": "skyrl_harbor", "plan_only": args.plan_only, "steps": args.steps, "tasks": args.tasks}
    params = project_params(project, args.skyrl_checkout)
    ds = resolve_dataset(params, "rl", "rl")
    table = task_tables(ds.export_dir, ds.manifest)[0]
    chosen = task_paths(ds.export_dir, ds.manifest)[: args.tasks]  # the first shard's first rows
    if len(chosen) < args.tasks:
        raise RuntimeError(f"{ds.export_dir} holds {len(chosen)} tasks, {args.tasks} wanted")
    written = extract_table(table, tasks, names=chosen)
    result["task_dirs"] = sorted(d.name for d in written)
    sets = overrides(work, model, tasks, args.steps, args.tasks)
    check_batch(ds, yaml.safe_load(ds.config_path.read_text()), sets)
    plan = harness_plan(params, ds, sets)
    result["command"] = plan.command
    verdict = check_rl(plan)
    result["config_check"] = verdict.line
    if verdict.ok is not True:
        raise RuntimeError(f"SkyRL's config classes did not accept the plan: {verdict.line}")
    if args.plan_only:
        result["plan"] = describe(plan)
        return result
    if plan.blocker:
        raise RuntimeError(plan.blocker)
    python = env_program(plan.environment, "python")
    built = subprocess.run(
        [str(python), str(TINY_QWEN3), str(project / "data" / "tokenizer"), str(model)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if built.returncode:
        raise RuntimeError(f"building the tiny Qwen3 failed: {built.stderr[-1500:]}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    log = Path(args.out) / "skyrl.log"
    with log.open("w") as f:
        saved = os.dup(1), os.dup(2)
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            rc = launch(plan)
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
    result["trainer_rc"] = rc
    trials = [d for d in (work / "trials").glob("*") if (d / "result.json").is_file()]
    result["trials"] = len(trials)
    want = args.steps * args.tasks * SAMPLES
    if rc != 0:
        raise RuntimeError(f"the trainer exited {rc}: see {log}")
    if len(trials) < want:
        raise RuntimeError(f"{len(trials)} finished trials in {work / 'trials'}, {want} wanted")
    ingested = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracelake",
            "ingest",
            "harbor",
            str(work / "trials"),
            "--source",
            "skyrl_rollouts",
            "--out",
            str(work / "lake"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    result["ingest"] = (ingested.stdout + ingested.stderr).strip().splitlines()[-3:]
    if ingested.returncode:
        raise RuntimeError(f"tracelake ingest harbor on the trials failed: {ingested.stderr.strip()[-500:]}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT") or "gpu-out")
    parser.add_argument("--skyrl-checkout", default=os.environ.get("TRACELAKE_SKYRL_CHECKOUT"))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--work", default="/tmp/gpu-skyrl")
    parser.add_argument("--project", default=str(ROOT), help="the project whose RL export and config run")
    parser.add_argument("--plan-only", action="store_true", help="build and check the plan; run nothing")
    args = parser.parse_args()
    args.out = str(Path(args.out).resolve())
    args.work = str(Path(args.work).resolve())

    def detail(result: dict) -> str:
        if "error" in result:
            return result["error"]
        if result.get("plan_only"):
            return f"plan for {result['tasks']} tasks x {SAMPLES} samples, {result['steps']} steps: {result['config_check']}"
        return f"{result['steps']} steps on {result['tasks']} tasks ran: {result['trials']} trials, ingested back"

    report("skyrl_harbor", args.out, "skyrl_check.json", lambda: check(args), detail)


if __name__ == "__main__":
    main()
