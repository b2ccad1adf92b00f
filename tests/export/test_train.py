"""Generated training configs and the `tracelake train` launcher (dry runs, offline)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
import yaml

from tracelake.core.errors import BadInput, BadParams
from tracelake.core.outputs import read_manifest
from tracelake.export.launch.plan import parse_sets, resolve_dataset
from tracelake.export.launch.run import make_plan
from tracelake.export.params import SftTrainParams
from tracelake.export.train_config import hydra_overrides, total_batch
from tracelake.params import load_params

from ..helpers import ROOT, run_ok, run_tracelake, train_python

# The seed recipe (OpenThoughts-Agent SFT model card), written out independently of params.yaml.
SEED = {
    "model_name_or_path": "Qwen/Qwen3-8B",
    "stage": "sft",
    "finetuning_type": "full",
    "learning_rate": 4e-5,
    "lr_scheduler_type": "cosine",
    "warmup_ratio": 0.1,
    "num_train_epochs": 7.0,
    "per_device_train_batch_size": 1,
    "gradient_accumulation_steps": 2,
    "optim": "adamw_torch_fused",
    "adam_beta1": 0.9,
    "adam_beta2": 0.98,
    "adam_epsilon": 1e-8,
    "seed": 42,
    "bf16": True,
    "cutoff_len": 32768,
    "template": "qwen3",
}


tracelake = partial(run_tracelake, columns=None)  # the environment's terminal width


@pytest.fixture()
def in_project(sample_project, monkeypatch):
    monkeypatch.chdir(sample_project)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)  # report_to auto would add report_to=wandb
    return sample_project


def test_generated_sft_config_is_the_seed_recipe(sample_project):
    params = load_params(sample_project / "params.yaml")
    assert total_batch(params.train.sft) == 16
    for scale in params.scales:
        config = yaml.safe_load((sample_project / "training" / "configs" / f"sft-{scale}.yaml").read_text())
        assert {k: config[k] for k in SEED} == SEED
        ds = json.loads((sample_project / "training" / "deepspeed" / "ds_z3_config.json").read_text())
        assert config["deepspeed"] == "training/deepspeed/ds_z3_config.json" and ds["zero_optimization"]["stage"] == 3
        manifest = read_manifest(sample_project / "lake" / "exports" / "sft" / scale)
        assert config["dataset"].split(",") == [
            f"{manifest['dataset_id']}.{i:05d}" for i in range(manifest["counts"]["shards"])
        ]
        assert config["dataset_dir"] == f"lake/exports/sft/{scale}"
        assert (
            manifest["dataset_id"]
            in (sample_project / "training" / "configs" / f"sft-{scale}.yaml").read_text().splitlines()[0]
        )


def test_sft_config_states_the_training_mode(sample_project):
    """mask_history, enable_thinking, train_on_prompt and preserve_thinking are written out, so no run
    depends on LLaMA-Factory's defaults; train.sft.mode picks them (a v0 mode only)."""
    from tracelake.export.train_config import sft_config

    config = yaml.safe_load((sample_project / "training" / "configs" / "sft-316.yaml").read_text())
    assert {k: config[k] for k in ("mask_history", "enable_thinking", "train_on_prompt", "preserve_thinking")} == {
        "mask_history": False,
        "enable_thinking": True,
        "train_on_prompt": False,
        "preserve_thinking": False,
    }
    sft = SftTrainParams(mode="mask_history", thinking="keep")
    config = sft_config(sft, dataset_id="sft-1-x", n_shards=1, dataset_dir="d", runs="r")
    assert (config["mask_history"], config["preserve_thinking"], config["train_on_prompt"]) == (True, True, False)
    sft = SftTrainParams(mode="mask_history", thinking="last_turn")
    config = sft_config(sft, dataset_id="sft-1-x", n_shards=1, dataset_dir="d", runs="r")
    assert (config["mask_history"], config["preserve_thinking"], config["enable_thinking"]) == (True, False, True)
    config = sft_config(SftTrainParams(thinking="drop"), dataset_id="sft-1-x", n_shards=1, dataset_dir="d", runs="r")
    assert (config["mask_history"], config["enable_thinking"]) == (False, False)
    assert (config["packing"], config["neat_packing"]) == (False, False) and "tokenized_path" not in config
    packed = SftTrainParams(packing=True, neat_packing=True)
    config = sft_config(
        packed, dataset_id="sft-1-x", n_shards=1, dataset_dir="d", runs="r", tokenized_path="d/tokenized"
    )
    assert (config["packing"], config["neat_packing"], config["tokenized_path"]) == (True, True, "d/tokenized")
    assert packed.example_limit == packed.cutoff_len - 1
    with pytest.raises(Exception, match="needs train.sft.packing: true"):
        SftTrainParams(neat_packing=True)
    with pytest.raises(Exception, match="must be one of default"):
        SftTrainParams(mode="v1")


def test_default_params_match_the_seed_recipe():
    sft = SftTrainParams()
    assert (sft.learning_rate, sft.num_train_epochs, sft.adam_beta2, sft.seed, total_batch(sft)) == (
        4e-5,
        7.0,
        0.98,
        42,
        16,
    )
    assert load_params(ROOT / "params.yaml").train.sft == sft


def test_rl_config_trains_on_the_harbor_task_directories(sample_project):
    """The default route: SkyRL's Harbor entrypoint on the export's task directories, with what a
    trial needs to train (rollout details, every message, no summarization) and max_seq_len set."""
    config = yaml.safe_load((sample_project / "training" / "configs" / "rl.yaml").read_text())
    manifest = read_manifest(sample_project / "lake" / "exports" / "rl")
    assert config["route"] == "harbor"
    assert config["entrypoint"] == "examples.train_integrations.harbor.entrypoints.main_harbor"
    o = config["overrides"]
    # extracted from the export's task table when a run starts (export/task_dirs.py): not a DVC output
    assert o["data.train_data"] == [f"runs/{manifest['dataset_id']}/harbor"]
    assert not (sample_project / "lake/exports/rl/harbor").exists()
    assert config["dataset_id"] == manifest["dataset_id"]
    assert (o["trainer.algorithm.advantage_estimator"], o["generator.n_samples_per_prompt"]) == ("grpo", 8)
    assert o["trainer.algorithm.max_seq_len"] == o["harbor_trial_config.agent.kwargs.model_info.max_input_tokens"]
    assert o["harbor_trial_config.agent.kwargs.max_turns"] == 32 and o["harbor_trial_config.agent.name"] == "terminus-2"
    assert o["harbor_trial_config.agent.kwargs.collect_rollout_details"] is True
    assert o["harbor_trial_config.agent.kwargs.store_all_messages"] is True
    assert o["harbor_trial_config.agent.kwargs.enable_summarize"] is False
    assert "environment.env_class" not in o and "generator.max_turns" not in o


def test_rl_config_main_base_lists_explicit_parquet_files(sample_project, tmp_path):
    project = _rl_project(sample_project, tmp_path, "skyrl", "main_base")
    config = yaml.safe_load((project / "training" / "configs" / "rl.yaml").read_text())
    manifest = read_manifest(project / "lake" / "exports" / "rl")
    files = config["overrides"]["data.train_data"]
    assert files == [f"lake/exports/rl/{f}" for f in manifest["counts"]["files"]["prompts"]]
    assert all(f.endswith(".parquet") and (project / f).is_file() for f in files)
    assert config["route"] == "main_base" and config["entrypoint"] == "skyrl.train.entrypoints.main_base"
    o = config["overrides"]
    assert (o["generator.max_turns"], o["environment.env_class"]) == (32, "harbor")
    assert not [k for k in o if k.startswith("harbor_trial_config.")]


def test_modal_dry_run_offline_shows_command_gpu_volumes_and_dataset(sample_project, tmp_path):
    secret = "hf_do_not_print_me_123"
    proc = tracelake(
        sample_project,
        "train",
        "sft",
        "--dataset",
        "3k",
        "--backend",
        "modal",
        "--dry-run",
        env={"HF_TOKEN": secret, "MODAL_TOKEN_SECRET": secret, "HOME": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    dataset_id = read_manifest(sample_project / "lake" / "exports" / "sft" / "3k")["dataset_id"]
    assert f"dataset:  {dataset_id}" in text and "gpu:      H100:8" in text
    assert "tracelake-datasets -> /datasets" in text and "tracelake-runs -> /runs" in text
    assert "tracelake-models -> /models" in text
    assert f"tracelake-datasets:/{dataset_id} (skipped when" in text
    assert "modal run training/modal_app.py::sft" in text
    assert f"dataset_dir: /datasets/{dataset_id}" in text and "HF_TOKEN (set)" in text
    assert secret not in text and secret not in proc.stderr
    assert not list(tmp_path.iterdir())  # nothing written (no credentials file)


def test_modal_rl_plan_names_the_trainer_and_remote_paths(in_project):
    plan = make_plan(load_params("params.yaml"), "rl", "rl", "modal", ["trainer.epochs=2"])
    assert plan.env["TRACELAKE_MODAL_RL_TRAINER"] == "skyrl" and plan.environment == "skyrl"
    assert plan.env["TRACELAKE_MODAL_RL_ROUTE"] == "harbor"
    assert plan.remote_command[:3] == ["python", "-m", "examples.train_integrations.harbor.entrypoints.main_harbor"]
    assert plan.rl_overrides == plan.remote_command[3:] and "trainer.epochs=2" in plan.rl_overrides
    data = next(o for o in plan.rl_overrides if o.startswith("data.train_data="))
    assert data == f"data.train_data=['/datasets/{plan.dataset.dataset_id}/harbor']"


def test_local_dry_run_and_dataset_resolution(in_project):
    params = load_params("params.yaml")
    manifest = read_manifest(Path("lake/exports/sft/1k"))
    dataset_id = manifest["dataset_id"]
    digest = dataset_id.rsplit("-", 1)[1]
    for ref in ("1k", dataset_id, digest[:6], dataset_id[:-4]):
        assert resolve_dataset(params, "sft", ref).dataset_id == dataset_id
    for ref in ("abc", digest[:5], "nope"):
        with pytest.raises(BadInput):
            resolve_dataset(params, "sft", ref)
    plan = make_plan(params, "sft", "1k", "local", ["max_steps=3", "save_strategy=no"], gpus=None)
    assert plan.command[1:5] == ["train", "training/configs/sft-1k.yaml", "max_steps=3", "save_strategy='no'"]
    assert plan.command[5:] == [f"output_dir={plan.run_dir}", f"run_name={plan.run_dir.removeprefix('runs/')}"]
    assert plan.run_dir.startswith(f"runs/{dataset_id}/")  # max_steps changes the run: a run dir of its own
    assert plan.env["NPROC_PER_NODE"] == "8" and plan.env["FORCE_TORCHRUN"] == "1"
    assert make_plan(params, "sft", "1k", "local", [], gpus=1).env == {}
    rl = make_plan(params, "rl", "rl", "local", ["trainer.epochs=2"])
    assert rl.command[1:3] == ["-m", "examples.train_integrations.harbor.entrypoints.main_harbor"]
    assert "trainer.epochs=2" in rl.command and rl.rl_route == "harbor"
    assert rl.environment == "skyrl" and rl.rl_overrides == rl.command[3:]


def test_bad_launch_requests_fail_with_one_line(in_project):
    for args in (
        ["train", "sft", "--dataset", "nope", "--dry-run"],
        ["train", "sft", "--dataset", "1k", "--backend", "slurm", "--dry-run"],
        ["train", "sft", "--dataset", "1k", "--set", "novalue", "--dry-run"],
    ):
        proc = tracelake(in_project, *args)
        assert proc.returncode == 2 and proc.stderr.startswith("tracelake: ") and proc.stderr.count("\n") == 1, args
    with pytest.raises(BadParams):
        parse_sets(["=3"])


def test_stale_config_is_refused(sample_project, tmp_path, monkeypatch):
    import shutil

    project = tmp_path / "p"
    shutil.copytree(sample_project, project, symlinks=True)
    config = project / "training" / "configs" / "sft-316.yaml"
    config.write_text(config.read_text().replace("sft-316-", "sft-316-0"))
    monkeypatch.chdir(project)
    with pytest.raises(BadInput, match="dvc repro"):
        resolve_dataset(load_params("params.yaml"), "sft", "316")


def test_set_values_are_typed_like_the_trainers_read_them():
    assert parse_sets(["a=3", "b=0.5", "c=true", "d=null", "e=no", "f=epoch"]) == {
        "a": 3,
        "b": 0.5,
        "c": True,
        "d": None,
        "e": "no",
        "f": "epoch",
    }
    assert hydra_overrides({"x": ["a", "b"], "y": False}) == ["x=['a','b']", "y=false"]


@pytest.mark.train_env
def test_modal_app_defines_its_functions_offline(sample_project, tmp_path):
    code = (
        "import sys; sys.path.insert(0, 'training'); import modal_app as m; "
        "print(m.app.name, sorted(m.app.registered_functions), m.GPU, m.DATASETS, m.RL_PACKAGES[m.RL_TRAINER])"
    )
    env = {"HOME": str(tmp_path), "TRACELAKE_MODAL_GPU": "A100:2", "TRACELAKE_MODAL_APP": "t-app"}
    text = run_ok([str(train_python()), "-c", code], sample_project, env=env)
    assert "t-app ['train_rl', 'train_sft'] A100:2 tracelake-datasets skyrl[fsdp]==0.4.0" in text
    text = run_ok(
        [str(train_python()), "-c", code], sample_project, env={**env, "TRACELAKE_MODAL_RL_TRAINER": "skyrl-train"}
    )
    assert "tracelake-datasets skyrl-train[vllm]==0.3.1" in text
    harbor = run_ok(
        [str(train_python()), "-c", code + "; print(m.RL_ROUTE, m.SKYRL_REF)"],
        sample_project,
        env={**env, "TRACELAKE_MODAL_RL_ROUTE": "harbor", "TRACELAKE_MODAL_SKYRL_REF": "abc123"},
    )
    assert "t-app ['train_rl', 'train_sft']" in harbor and "harbor abc123" in harbor


def _rl_project(sample_project: Path, tmp_path: Path, trainer: str, route: str = "main_base", **rl) -> Path:
    """A copy of the sample project whose rl.yaml is written for `trainer` (train.rl.trainer changed,
    `dvc repro train_config`: `train` refuses configs DVC does not know as built)."""
    import shutil

    project = tmp_path / "p"
    shutil.copytree(sample_project, project, symlinks=True)
    raw = yaml.safe_load((project / "params.yaml").read_text())
    raw["train"]["rl"].update(trainer=trainer, route=route, **rl)
    (project / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    assert load_params(project / "params.yaml").train.rl.trainer == trainer
    run_ok(["dvc", "repro", "train_config"], project)
    return project


@pytest.mark.train_env
@pytest.mark.parametrize(
    "trainer,entrypoint,engine_key",
    [
        ("skyrl", "skyrl.train.entrypoints.main_base", "generator.inference_engine.num_engines"),
        ("skyrl-train", "skyrl_train.entrypoints.main_base", "generator.num_inference_engines"),
    ],
)
def test_rl_dry_run_is_checked_against_the_installed_skyrl(trainer, entrypoint, engine_key, sample_project, tmp_path):
    """`tracelake train rl --dry-run` runs the trainer's own config parse (skyrl 0.4's typed config,
    skyrl-train 0.3.1's Hydra compose) over the exact overrides it would pass: every generated key is
    known, and an unknown key or an inconsistent GPU placement is refused in one line."""
    from ..helpers import rl_trainer_python

    python = rl_trainer_python(trainer)
    project = _rl_project(sample_project, tmp_path, trainer)
    env = {"TRACELAKE_SKYRL_ENV" if trainer == "skyrl" else "TRACELAKE_TRAIN_ENV": str(python.parents[1])}
    config = yaml.safe_load((project / "training" / "configs" / "rl.yaml").read_text())
    assert config["trainer"] == trainer and config["entrypoint"] == entrypoint
    assert (
        config["overrides"][engine_key]
        * config["overrides"][
            engine_key.replace("num_engines", "tensor_parallel_size").replace(
                "num_inference_engines", "inference_engine_tensor_parallel_size"
            )
        ]
        == config["overrides"]["trainer.placement.policy_num_gpus_per_node"]
    )

    # the export's env_class (harbor) is no SkyRL-Gym environment: main_base could not make it
    proc = tracelake(project, "train", "rl", "--dataset", "rl", "--dry-run", env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "environment.env_class 'harbor' is not registered in skyrl-gym 0.4.0 (aime, gsm8k" in proc.stderr
    assert "main_base cannot make it; use train.rl.route: harbor" in proc.stderr
    proc = tracelake(
        project, "train", "rl", "--dataset", "rl", "--dry-run", "--set", "environment.env_class=gsm8k", env=env
    )
    assert proc.returncode == 0, proc.stderr
    command = next(line for line in proc.stdout.splitlines() if line.startswith("command:"))
    assert command.split()[1] == str(python) and command.split()[3] == entrypoint
    n = len(config["overrides"])
    version = "0.4.0" if trainer == "skyrl" else "0.3.1"
    assert f"check:    ok: {n} overrides are keys of {trainer} {version}'s config" in proc.stdout

    for bad, words in (
        (["trainer.not_a_key=1"], "not_a_key"),
        ([f"{engine_key}=3"], "colocate_all needs policy GPUs (8"),
    ):
        sets = ["environment.env_class=gsm8k", *bad]
        proc = tracelake(
            project, "train", "rl", "--dataset", "rl", "--dry-run", *(x for b in sets for x in ("--set", b)), env=env
        )
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert proc.stderr.startswith(f"tracelake: train rl: {trainer} {version}") and words in proc.stderr


@pytest.mark.train_env
def test_harbor_route_dry_run_is_checked_by_skyrl_and_by_us(sample_project, tmp_path):
    """Route harbor: every key but harbor_trial_config's is parsed by the installed skyrl 0.4's own
    dataclasses (as main_harbor.py's HarborSkyRLConfig: SkyRLTrainConfig plus harbor_trial_config and a
    generator with rate_limit); harbor_trial_config is checked by ours (collect_rollout_details); the
    batch must fit the task directories; without a SkyRL checkout the plan says it cannot start."""
    from ..helpers import rl_trainer_python

    python = rl_trainer_python("skyrl")
    env = {"TRACELAKE_SKYRL_ENV": str(python.parents[1])}
    project = _rl_project(sample_project, tmp_path, "skyrl", "harbor")
    config = yaml.safe_load((project / "training" / "configs" / "rl.yaml").read_text())
    mine = [k for k in config["overrides"] if k.startswith("harbor_trial_config.")]
    n_dirs = read_manifest(project / "lake" / "exports" / "rl")["counts"]["task_dirs"]["count"]
    dry = ("train", "rl", "--dataset", "rl", "--dry-run")
    proc = tracelake(project, *dry, env=env)
    assert proc.returncode == 0, proc.stderr
    n_skyrl = len(config["overrides"]) - len(mine)
    assert (
        f"check:    ok: {n_skyrl} overrides are keys of skyrl 0.4.0's config (HarborSkyRLConfig.from_cli_overrides"
        in proc.stdout
        or f"check:    ok: {n_skyrl} overrides are keys of skyrl 0.4.0's config (each section built strictly"
        in proc.stdout
    ), proc.stdout
    assert f"{len(mine)} are harbor_trial_config keys for Harbor" in proc.stdout
    assert "route:    harbor (examples.train_integrations.harbor.entrypoints.main_harbor)" in proc.stdout
    assert "blocked:  train.rl.skyrl_checkout is not set" in proc.stdout
    harbor = f"runs/{config['dataset_id']}/harbor"
    assert (
        f"tasks:    {n_dirs} Harbor task directories -> {harbor} (extracted from lake/exports/rl/tasks/" in proc.stdout
    )
    assert not (project / harbor).exists()  # a dry run extracts nothing
    for sets, words in (
        (["generator.rate_limit.not_a_key=1"], "Invalid fields {'not_a_key'} for RateLimiterConfig"),
        (  # refused by the Harbor contract before SkyRL's own check runs
            ["harbor_trial_config.agent.kwargs.collect_rollout_details=false"],
            "collect_rollout_details=false breaks SkyRL's Harbor route: it must be true",
        ),
        (
            ["trainer.train_batch_size=100000"],
            f"trainer.train_batch_size 100000 > the {n_dirs} Harbor task directories",
        ),
    ):
        proc = tracelake(project, *dry, *(x for s_ in sets for x in ("--set", s_)), env=env)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and words in proc.stderr, proc.stderr
    assert tracelake(project, *dry, "--set", "generator.rate_limit.enabled=true", env=env).returncode == 0
    run = tracelake(project, "train", "rl", "--dataset", "rl", env=env)  # not a dry run: refused before starting
    assert run.returncode == 2 and "train rl: train.rl.skyrl_checkout is not set" in run.stderr
    from .test_train_harbor import _checkout

    checkout, head = _checkout(tmp_path / "SkyRL")
    project = _rl_project(
        sample_project, tmp_path / "b", "skyrl", "harbor", skyrl_checkout=str(checkout), skyrl_commit=head
    )
    proc = tracelake(project, *dry, env=env)
    assert proc.returncode == 0 and f"env:      PYTHONPATH={checkout}" in proc.stdout and "blocked:" not in proc.stdout


def test_rl_check_without_the_environment_says_so(in_project, tmp_path, monkeypatch):
    from tracelake.export.launch.check import check_rl

    monkeypatch.setenv("TRACELAKE_SKYRL_ENV", str(tmp_path / "none"))
    plan = make_plan(load_params("params.yaml"), "rl", "rl", "local", [])
    check = check_rl(plan)
    assert check.ok is None and "bash training/setup-skyrl-env.sh" in check.line


def test_rl_gpus_must_fill_the_engines():
    from tracelake.export.params import RlTrainParams

    with pytest.raises(Exception, match="inference_engines x tensor_parallel_size"):
        RlTrainParams(gpus=8, inference_engines=3, tensor_parallel_size=2)
    params = RlTrainParams(gpus=4, inference_engines=4, tensor_parallel_size=1, route="main_base")
    assert params.resolved_entrypoint == "skyrl.train.entrypoints.main_base"
    assert RlTrainParams().resolved_entrypoint == "examples.train_integrations.harbor.entrypoints.main_harbor"
    with pytest.raises(Exception, match="route harbor needs trainer skyrl"):
        RlTrainParams(trainer="skyrl-train")


def test_a_stale_dataset_is_refused_in_one_line(sample_project, tmp_path):
    """Params changed since the dataset was built (and `dvc repro` not run): DVC's own status says the
    export is stale, and `train` refuses it, naming the stages and the command that rebuilds them."""
    import shutil

    project = tmp_path / "project"
    shutil.copytree(sample_project, project, symlinks=True)
    for args in (["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "built"]):
        run_ok(["git", *args], project)
    fresh = run_tracelake(project, "train", "sft", "--dataset", "1k", "--dry-run")
    assert fresh.returncode == 0 and "fresh:    up to date (dvc status: export_sft@1k, train_config" in fresh.stdout
    built_id = read_manifest(project / "lake" / "exports" / "sft" / "1k")["dataset_id"]
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["filter"]["min_assistant_turns"] = 7
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    stale = run_tracelake(project, "train", "sft", "--dataset", "1k", "--dry-run")
    assert stale.returncode == 2 and len(stale.stderr.strip().splitlines()) == 1, stale.stderr
    assert "is stale: dvc status: " in stale.stderr and "filter (changed deps)" in stale.stderr
    assert "run `dvc repro export_sft@1k train_config` first" in stale.stderr
    # the dataset the last commit recorded trains as it was: REV:NAME, read from the DVC cache
    trainer = {"TRACELAKE_TRAIN_ENV": str(train_python().parents[1])}  # LLaMA-Factory reads the rewritten config
    at_head = run_tracelake(project, "train", "sft", "--dataset", "HEAD:1k", "--dry-run", env=trainer)
    assert at_head.returncode == 0, at_head.stderr
    assert f"dataset:  {built_id} (" in at_head.stdout and "revision: HEAD (" in at_head.stdout
    assert "fresh:    as HEAD (" in at_head.stdout and "check:    ok" in at_head.stdout, at_head.stdout
    (config_line,) = [ln for ln in at_head.stdout.splitlines() if ln.startswith("config:")]
    assert "/.tracelake-config/sft-1k.yaml" in config_line and not Path(config_line.split()[1]).exists()  # removed
    wrong = run_tracelake(project, "train", "sft", "--dataset", "HEAD:5k", "--dry-run")
    assert wrong.returncode == 2 and "no sft dataset '5k' at HEAD (known: " in wrong.stderr
    run_ok(["dvc", "repro", "export_sft@1k", "train_config"], project)
    again = run_tracelake(project, "train", "sft", "--dataset", "1k", "--dry-run")
    assert again.returncode == 0 and "up to date" in again.stdout


def test_a_harbor_run_extracts_the_task_table_first_and_once(sample_project, tmp_path, monkeypatch):
    """`tracelake train rl` (route harbor) extracts the export's task table into the directory
    data.train_data names, <train.runs>/<dataset id>/harbor, before the trainer starts; a second run
    reuses it. The trainer here is a script that lists what it would train on (no GPU)."""
    import sys

    from tracelake.export.launch.run import run
    from tracelake.export.task_dirs import task_paths

    from .test_train_harbor import _checkout

    checkout, head = _checkout(tmp_path / "SkyRL")
    project = _rl_project(sample_project, tmp_path, "skyrl", "harbor", skyrl_checkout=str(checkout), skyrl_commit=head)
    monkeypatch.chdir(project)
    monkeypatch.setenv("DAYTONA_API_KEY", "test-key")  # the sandbox's credential: a real run needs it
    plan = make_plan(load_params("params.yaml"), "rl", "rl", "local", [])
    data = next(o for o in plan.rl_overrides if o.startswith("data.train_data="))
    harbor = Path(f"runs/{plan.dataset.dataset_id}/harbor")
    assert data == f"data.train_data=['{harbor}']" and plan.task_dirs == harbor and not harbor.exists()
    listing = tmp_path / "seen.txt"
    lister = "import os, sys; d = sys.argv[1]; open(sys.argv[2], 'w').write('\\n'.join(sorted(os.listdir(d))))"
    plan.command = [sys.executable, "-c", lister, str(harbor), str(listing)]
    assert run(plan) == 0
    expected = task_paths(plan.dataset.export_dir, plan.dataset.manifest)
    assert (
        listing.read_text().split("\n") == sorted(expected)
        and len(expected) == plan.dataset.manifest["counts"]["task_dirs"]["count"]
    )
    for name in expected:
        assert (harbor / name / "instruction.md").is_file() and (harbor / name / "tests").is_dir()
    stamp = (harbor / expected[0] / "instruction.md").stat().st_mtime_ns
    assert run(plan) == 0 and (harbor / expected[0] / "instruction.md").stat().st_mtime_ns == stamp  # reused
    # --set data.train_data elsewhere: refused (the dataset is chosen with --dataset: export/set_keys.py)
    with pytest.raises(BadParams, match="--set 'data.train_data' would change which data trains"):
        make_plan(load_params("params.yaml"), "rl", "rl", "local", ["data.train_data=['elsewhere']"])
    # on Modal: extracted locally, uploaded beside the export, read from the volume
    modal = make_plan(load_params("params.yaml"), "rl", "rl", "modal", [])
    assert modal.task_dirs == harbor and modal.command[-2:] == ["--harbor-dir", harbor.as_posix()]
    assert f"data.train_data=['/datasets/{plan.dataset.dataset_id}/harbor']" in modal.rl_overrides
