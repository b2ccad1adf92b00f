"""SkyRL's Harbor route at its pinned commit (export/harbor_contract.py): the generated config meets
every requirement, a dry run refuses each one broken in one line, the SkyRL checkout must be at the
pinned commit, the sandbox's credential is named, and RL runs get one directory per config."""

from __future__ import annotations

import os
import subprocess
from functools import partial
from pathlib import Path

import pytest
import yaml

from tracelake.core.errors import BadInput
from tracelake.export import harbor_contract as contract
from tracelake.export.launch.run import describe, make_plan, run
from tracelake.export.set_keys import classify
from tracelake.params import load_params

from ..helpers import run_ok, run_tracelake
from .test_train import _rl_project

tracelake = partial(run_tracelake, columns=None)
NO_TRAINER = {"TRACELAKE_TRAIN_ENV": "/nonexistent", "TRACELAKE_SKYRL_ENV": "/nonexistent", "WANDB_API_KEY": ""}
DRY = ("train", "rl", "--dataset", "rl", "--dry-run")

# each requirement broken by a --set (data.train_data: refused before, by export/set_keys.py)
FLIPS = {
    "generator.step_wise_trajectories": "false",
    "generator.merge_stepwise_output": "false",
    "generator.inference_engine.served_model_name": "Qwen/Qwen3-8B",
    "harbor_trial_config.agent.kwargs.enable_summarize": "true",
    "harbor_trial_config.agent.kwargs.collect_rollout_details": "false",
    "trainer.algorithm.loss_reduction": "sequence_mean",
    "trainer.algorithm.advantage_estimator": "gae",
    "trainer.algorithm.max_seq_len": "null",
    "generator.inference_engine.engine_init_kwargs.max_model_len": "4096",
    "harbor_trial_config.agent.kwargs.model_info.max_input_tokens": "65536",
    "generator.inference_engine.engine_init_kwargs.chat_template": "/tmp/plain.jinja2",
    "trainer.algorithm.off_policy_correction.tis_ratio_type": "null",
    "harbor_trial_config.trials_dir": "null",
    "trainer.ckpt_path": "null",
    "trainer.export_path": "null",
    "harbor_trial_config.environment.type": "local",
}


def _rl(project: Path) -> dict:
    return yaml.safe_load((project / "training" / "configs" / "rl.yaml").read_text())


def test_the_generated_config_meets_every_requirement(sample_project):
    """The sample's rl.yaml sets every requirement with a fixed value, and all of them hold."""
    o = _rl(sample_project)["overrides"]
    assert contract.violated(o) is None
    for r in contract.REQUIREMENTS:
        assert r.key in o and r.check(o), r.key
    assert o["generator.step_wise_trajectories"] is True and o["generator.merge_stepwise_output"] is True
    assert o["generator.inference_engine.served_model_name"] == "Qwen3-8B"
    assert o["trainer.algorithm.loss_reduction"] == "token_mean"
    assert o["generator.inference_engine.engine_init_kwargs.max_model_len"] == o["trainer.algorithm.max_seq_len"]
    assert o["generator.inference_engine.engine_init_kwargs.chat_template"] == contract.QWEN3_CHAT_TEMPLATE
    assert o["trainer.algorithm.off_policy_correction.tis_ratio_type"] == "token"
    # the recipe's algorithm, not SkyRL's defaults (std normalisation and a KL loss on, overlong filtering off)
    assert o["trainer.algorithm.grpo_norm_by_std"] is False and o["trainer.algorithm.use_kl_loss"] is False
    assert o["generator.apply_overlong_filtering"] is True
    run_dir = str(Path(o["trainer.ckpt_path"]).parent)
    assert (
        o["trainer.export_path"] == f"{run_dir}/exports" and o["harbor_trial_config.trials_dir"] == f"{run_dir}/trials"
    )
    assert load_params(sample_project / "params.yaml").train.rl.skyrl_commit == contract.SKYRL_COMMIT


def test_every_requirement_is_flipped_below():
    for r in contract.REQUIREMENTS:
        assert r.key in FLIPS or classify("rl", r.key) is not None, r.key
    assert set(FLIPS) <= set(contract.BY_KEY)


@pytest.mark.parametrize("key", sorted(FLIPS))
def test_a_broken_requirement_is_refused_in_one_line(key, sample_project):
    proc = tracelake(sample_project, *DRY, "--set", f"{key}={FLIPS[key]}", env=NO_TRAINER)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    r = contract.BY_KEY[key]
    assert proc.stderr.startswith(f"tracelake: train rl: {key}=") and f"must be {r.want}" in proc.stderr
    assert f"at SkyRL {contract.SKYRL_COMMIT[:12]})" in proc.stderr and r.source.split(":")[0] in proc.stderr


def test_a_requirement_broken_through_extra_is_refused(sample_project, tmp_path):
    project = _rl_project(
        sample_project, tmp_path, "skyrl", "harbor", extra={"generator.step_wise_trajectories": False}
    )
    proc = tracelake(project, *DRY, env=NO_TRAINER)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "generator.step_wise_trajectories=false breaks SkyRL's Harbor route: it must be true" in proc.stderr


def test_the_dry_run_says_who_checked_each_requirement_and_the_credential(sample_project):
    proc = tracelake(sample_project, *DRY, env={**NO_TRAINER, "DAYTONA_API_KEY": ""})
    assert proc.returncode == 0, proc.stderr
    n, short = len(contract.REQUIREMENTS), contract.SKYRL_COMMIT[:12]
    assert f"contract: {n} requirements of SkyRL's Harbor route at {short} hold" in proc.stdout
    lines = {ln.strip().split("=", 1)[0]: ln for ln in proc.stdout.splitlines() if ln.startswith("  ")}
    for r in contract.REQUIREMENTS:
        assert f"value by the contract (SkyRL {short}, {r.source})" in lines[r.key]
        assert ("key and type by installed SkyRL code" in lines[r.key]) == (not r.key.startswith("harbor_trial_config"))
    assert f"skyrl:    {contract.SKYRL_COMMIT} (train.rl.skyrl_commit)" in proc.stdout
    assert "sandbox:  daytona: DAYTONA_API_KEY (not set)" in proc.stdout
    proc = tracelake(sample_project, *DRY, env={**NO_TRAINER, "DAYTONA_API_KEY": "dtn-secret-1"})
    assert "sandbox:  daytona: DAYTONA_API_KEY (set)" in proc.stdout and "dtn-secret-1" not in proc.stdout


def _checkout(where: Path) -> tuple[Path, str]:
    """A git repository shaped like a SkyRL checkout (the Harbor integration's directory, the chat
    template): what the launcher looks at, not SkyRL."""
    (where / "examples" / "train_integrations" / "harbor").mkdir(parents=True)
    (where / "examples" / "train_integrations" / "harbor" / "README.md").write_text("harbor\n")
    template = where / contract.QWEN3_CHAT_TEMPLATE
    template.parent.mkdir(parents=True)
    template.write_text("{{ messages }}\n")
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"]):
        run_ok(["git", *args], where)
    head = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True)
    return where, head.stdout.strip()


def test_the_checkout_must_be_at_the_pinned_commit(sample_project, tmp_path, monkeypatch):
    checkout, head = _checkout(tmp_path / "SkyRL")
    project = _rl_project(sample_project, tmp_path / "a", "skyrl", "harbor", skyrl_checkout=str(checkout))
    monkeypatch.chdir(project)
    plan = make_plan(load_params("params.yaml"), "rl", "rl", "local", [])
    assert f"is at {head[:12]}, not at train.rl.skyrl_commit {contract.SKYRL_COMMIT[:12]}" in plan.blocker
    with pytest.raises(BadInput, match="not at train.rl.skyrl_commit"):
        run(plan)
    project = _rl_project(
        sample_project, tmp_path / "b", "skyrl", "harbor", skyrl_checkout=str(checkout), skyrl_commit=head
    )
    monkeypatch.chdir(project)
    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)
    plan = make_plan(load_params("params.yaml"), "rl", "rl", "local", [])
    assert plan.blocker is None and plan.env["PYTHONPATH"] == str(checkout.resolve())
    template = f"{contract.CHAT_TEMPLATE}={checkout.resolve()}/{contract.QWEN3_CHAT_TEMPLATE}"
    assert template in plan.rl_overrides
    assert "not the commit the Harbor contract was read at" in describe(plan)
    with pytest.raises(BadInput, match="DAYTONA_API_KEY not set: Harbor's daytona sandbox needs it"):
        run(plan)  # a real run without the sandbox's credential: refused before anything starts
    modal = make_plan(load_params("params.yaml"), "rl", "rl", "modal", [])
    assert modal.env["TRACELAKE_MODAL_SKYRL_REF"] == head and modal.env["TRACELAKE_MODAL_FORWARD"] == "DAYTONA_API_KEY"
    assert f"{contract.CHAT_TEMPLATE}=/opt/SkyRL/{contract.QWEN3_CHAT_TEMPLATE}" in modal.rl_overrides


def test_rl_runs_get_one_directory_per_config(sample_project, monkeypatch):
    """As SFT runs: <runs>/<dataset id>/<hash of the training overrides>; a --set that changes the
    training moves checkpoints, exports and trials; one that does not keeps them."""
    monkeypatch.chdir(sample_project)
    o = _rl(sample_project)["overrides"]
    params = load_params("params.yaml")
    base = make_plan(params, "rl", "rl", "local", [])
    dataset_id = base.dataset.dataset_id
    assert base.run_dir == str(Path(o["trainer.ckpt_path"]).parent) and base.run_dir.startswith(f"runs/{dataset_id}/")
    other = make_plan(params, "rl", "rl", "local", ["trainer.policy.optimizer_config.lr=2e-6"])
    assert other.run_dir != base.run_dir and other.run_dir.startswith(f"runs/{dataset_id}/")
    for key in ("trainer.ckpt_path", "trainer.export_path", "harbor_trial_config.trials_dir"):
        assert any(a.startswith(f"{key}={other.run_dir}/") for a in other.rl_overrides), key
    assert make_plan(params, "rl", "rl", "local", ["trainer.logger=console"]).run_dir == base.run_dir
    modal = make_plan(params, "rl", "rl", "modal", ["trainer.policy.optimizer_config.lr=2e-6"])
    assert f"trainer.ckpt_path=/runs/{other.run_dir.removeprefix('runs/')}/ckpts" in modal.rl_overrides


@pytest.mark.skipif(
    not os.environ.get("TRACELAKE_SKYRL_CHECKOUT"),
    reason="set TRACELAKE_SKYRL_CHECKOUT to a SkyRL git checkout holding the pinned commit to read the sources",
)
def test_each_requirement_cites_skyrl_at_the_pinned_commit():
    """Every file:line a requirement cites, read at SKYRL_COMMIT, names the requirement's key."""
    checkout = os.environ["TRACELAKE_SKYRL_CHECKOUT"]
    files: dict[str, list[str]] = {}
    for r in contract.REQUIREMENTS:
        cited = ""
        for ref in r.source.split(", "):
            path, _, spans = ref.partition(":")
            if path not in files:
                text = run_ok(["git", "-C", checkout, "show", f"{contract.SKYRL_COMMIT}:{path}"], Path(checkout))
                files[path] = text.splitlines()
            for span in spans.split(","):
                first, _, last = span.partition("-")
                lo, hi = int(first), int(last or first)
                assert hi <= len(files[path]), ref
                cited += "\n".join(files[path][lo - 1 : hi]).lower()
        assert r.key.rsplit(".", 1)[-1] in cited, (r.key, r.source)
