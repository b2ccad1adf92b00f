"""SFT runs a lab would launch: one directory per dataset and training params (never overwritten; a
run started again resumes), bounded checkpoints, report_to decided at launch, `--set` checked by
LLaMA-Factory's own parser, and a model cache on Modal."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import yaml

from tracelake.core.errors import BadInput
from tracelake.export.launch.check import check_sft
from tracelake.export.launch.plan import (
    parse_sets,
    plan_local,
    plan_modal,
    resolve_dataset,
    resolve_report_to,
    run_state,
)
from tracelake.export.launch.run import describe, run
from tracelake.export.params import SftTrainParams
from tracelake.export.train_config import run_hash, sft_config
from tracelake.params import load_params

from ..helpers import run_ok, run_tracelake, train_python

tracelake = partial(run_tracelake, columns=None)
CONFIG = {"dataset_id": "sft-1-x", "n_shards": 1, "dataset_dir": "d", "runs": "runs"}


@pytest.fixture()
def in_project(sample_project, monkeypatch):
    monkeypatch.chdir(sample_project)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return sample_project


def _config(project: Path, scale: str = "316") -> dict:
    return yaml.safe_load((project / "training" / "configs" / f"sft-{scale}.yaml").read_text())


def _plan(sets: list[str], backend: str = "local", gpus: int | None = None):
    """make_plan's plan without its freshness and tokenizer checks (a dvc status each)."""
    params = load_params("params.yaml")
    ds = resolve_dataset(params, "sft", "316")
    if backend == "modal":
        return plan_modal(params, ds, parse_sets(sets))
    return plan_local(params, ds, parse_sets(sets), gpus)


def test_a_learning_rate_sweep_gets_one_run_dir_per_run(in_project):
    """The generated config's output_dir is runs/<dataset id>/<run hash> (it was runs/<dataset id>,
    with overwrite_output_dir: true, so every run of a sweep overwrote the one before)."""
    config = _config(in_project)
    dataset_id = config["dataset"].split(".")[0]
    assert "overwrite_output_dir" not in config
    assert config["output_dir"] == f"runs/{dataset_id}/{run_hash(config, 8)}"
    assert config["run_name"] == f"{dataset_id}/{run_hash(config, 8)}"
    dirs = {lr: _plan([f"learning_rate={lr}"]).run_dir for lr in ("1e-5", "4e-5")}
    assert dirs["4e-5"] == config["output_dir"]  # the params' own learning rate: the generated run
    assert dirs["1e-5"] != dirs["4e-5"] and dirs["1e-5"].startswith(f"runs/{dataset_id}/")
    plan = _plan(["learning_rate=1e-5"])
    assert f"output_dir={dirs['1e-5']}" in plan.command
    # what does not change the training keeps the run; what does (the GPUs: the total batch) does not
    for same in (["logging_steps=1"], ["report_to=none"], ["num_train_epochs=7"], ["save_total_limit=5"]):
        assert _plan(same).run_dir == config["output_dir"], same
    assert _plan([], gpus=1).run_dir != config["output_dir"]
    a = sft_config(SftTrainParams(), **CONFIG)
    b = sft_config(SftTrainParams(learning_rate=1e-5), **CONFIG)
    assert a["output_dir"] != b["output_dir"] and a["output_dir"].startswith("runs/sft-1-x/")
    with pytest.raises(Exception, match="output_dir is set by tracelake"):
        SftTrainParams(extra={"output_dir": "runs/mine"})


def test_a_run_started_again_resumes_and_a_finished_one_is_refused(in_project, tmp_path):
    assert run_state(tmp_path / "none", {}) == ("new", None)
    out = tmp_path / "run"
    for step in (3, 12, 6):
        (out / f"checkpoint-{step}").mkdir(parents=True)
    state, blocker = run_state(out, {})
    assert "resumes from checkpoint-12" in state and blocker is None
    (out / "train_results.json").write_text("{}")
    state, blocker = run_state(out, {})
    assert state == "finished" and "holds a finished run (train_results.json)" in blocker
    assert run_state(out, {"overwrite_output_dir": True})[1] is None

    mine = tmp_path / "mine"  # the plan's run dir (a --set output_dir: the sample project stays as built)
    (mine / "checkpoint-1").mkdir(parents=True)
    text = describe(_plan([f"output_dir={mine}"]))
    assert f"run dir:  {mine} (exists: LLaMA-Factory resumes from checkpoint-1 (the last one in it))" in text
    (mine / "train_results.json").write_text("{}")
    plan = _plan([f"output_dir={mine}"])
    assert f"blocked:  {mine.as_posix()} holds a finished run" in describe(plan)
    with pytest.raises(BadInput, match="holds a finished run"):
        run(plan)


def test_checkpoint_limits_come_from_params(sample_project):
    config = _config(sample_project)
    assert (config["save_strategy"], config["save_total_limit"], config["save_only_model"]) == ("epoch", 2, False)
    config = sft_config(SftTrainParams(save_total_limit=None, save_only_model=True), **CONFIG)
    assert "save_total_limit" not in config and config["save_only_model"] is True


def test_report_to_is_decided_at_launch(in_project, monkeypatch):
    """train.sft.report_to auto: wandb when WANDB_API_KEY is set where the run starts (a Modal run gets
    it as a secret), else none; the generated config (a DVC output) does not depend on it."""
    params = load_params("params.yaml")
    assert params.train.sft.report_to == "auto" and _config(in_project)["report_to"] == "none"
    assert resolve_report_to(params, {}) == ("none", "train.sft.report_to auto: WANDB_API_KEY is not set")
    monkeypatch.setenv("WANDB_API_KEY", "secret-key-123")
    assert resolve_report_to(params, {}) == ("wandb", "train.sft.report_to auto: WANDB_API_KEY is set")
    assert resolve_report_to(params, {"report_to": "none"}) == ("none", "--set")
    assert sft_config(SftTrainParams(), **CONFIG)["report_to"] == "none"  # same bytes with or without the key
    assert sft_config(SftTrainParams(report_to="tensorboard"), **CONFIG)["report_to"] == "tensorboard"
    local = _plan([])
    assert "report_to=wandb" in local.command and local.run_dir == _config(in_project)["output_dir"]
    modal = _plan([], "modal")
    assert modal.remote_config["report_to"] == "wandb" and "secret-key-123" not in str(modal.command)
    assert modal.remote_config["output_dir"] == "/runs/" + local.run_dir.removeprefix("runs/")
    with pytest.raises(Exception, match="auto stands alone"):
        SftTrainParams(report_to=["auto", "wandb"])


@pytest.mark.train_env
def test_set_is_checked_by_llamafactorys_own_parser(sample_project):
    """`--set max_step=10` (for max_steps) is refused in one line naming the key and its closest
    match; `--set max_steps=10` parses with the whole generated config."""
    env = {"TRACELAKE_TRAIN_ENV": str(train_python().parents[1]), "WANDB_API_KEY": ""}
    dry = ("train", "sft", "--dataset", "316", "--dry-run")
    proc = tracelake(sample_project, *dry, "--set", "max_step=10", env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("tracelake: train sft: unknown key max_step (did you mean max_steps?)")
    assert "LLaMA-Factory 0.9.5" in proc.stderr
    proc = tracelake(sample_project, *dry, "--set", "max_steps=10", env=env)
    assert proc.returncode == 0, proc.stderr
    n = len(_config(sample_project)) + 1  # max_steps (output_dir and run_name: the new run's)
    assert f"check:    ok: {n} keys parse as LLaMA-Factory 0.9.5's arguments" in proc.stdout
    assert "run dir:  runs/sft-" in proc.stdout and "report:   none (train.sft.report_to auto" in proc.stdout


def test_sft_check_without_the_environment_says_so(in_project, tmp_path, monkeypatch):
    monkeypatch.setenv("TRACELAKE_TRAIN_ENV", str(tmp_path / "none"))
    check = check_sft(_plan(["max_step=10"]))
    assert check.ok is None and check.line.startswith("not checked: the training environment is not installed")


def test_modal_plan_caches_models_on_a_volume(in_project):
    plan = _plan([], "modal")
    assert (
        plan.volumes["/models"] == "tracelake-models"
        and plan.env["TRACELAKE_MODAL_MODELS_VOLUME"] == "tracelake-models"
    )


@pytest.mark.train_env
def test_modal_app_mounts_the_model_cache(sample_project, tmp_path):
    """Both GPU functions mount the models volume at HF_HOME, so a model is downloaded once."""
    code = (
        "import sys; sys.path.insert(0, 'training'); import modal_app as m; fs = m.app.registered_functions; "
        "print(m.HF_CACHE, *({k: v.name for k, v in fs[f]._spec_.volumes.items()} for f in ('train_sft', 'train_rl')))"
    )
    env = {"HOME": str(tmp_path), "TRACELAKE_MODAL_MODELS_VOLUME": "my-models"}
    text = run_ok([str(train_python()), "-W", "ignore", "-c", code], sample_project, env=env)
    mounts = "{'/datasets': 'tracelake-datasets', '/runs': 'tracelake-runs', '/models': 'my-models'}"
    assert f"{{'HF_HOME': '/models'}} {mounts} {mounts}" in text
