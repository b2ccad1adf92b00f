"""What `tracelake train --set` may change (export/set_keys.py), what any `--set` value gives (a plan
or one line, never a traceback), and an export whose build did not finish."""

from __future__ import annotations

import contextlib
import json
import shutil
from functools import partial
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tracelake.core.errors import BadParams, UserError
from tracelake.core.outputs import read_manifest
from tracelake.export.launch.plan import _cli_value, parse_sets, plan_local, plan_modal, resolve_dataset
from tracelake.export.launch.run import describe, make_plan
from tracelake.export.set_keys import DATA, RENDERING, classify, normalise
from tracelake.params import load_params

from ..helpers import fuzz_settings, run_ok, run_tracelake, train_python

tracelake = partial(run_tracelake, columns=None)
NO_TRAINER = {"TRACELAKE_TRAIN_ENV": "/nonexistent", "TRACELAKE_SKYRL_ENV": "/nonexistent", "WANDB_API_KEY": ""}


@pytest.fixture()
def in_project(sample_project, monkeypatch):
    monkeypatch.chdir(sample_project)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return sample_project


REFUSED = [  # (kind, --set, class, the key the refusal names)
    ("sft", "dataset=sft-1k-other.00000", DATA, "dataset"),
    ("sft", "dataset_dir=/etc", DATA, "dataset_dir"),
    ("sft", "--dataset=3k", DATA, "dataset"),
    ("sft", " dataset_dir =/etc", DATA, "dataset_dir"),
    ("sft", "eval_dataset=x", DATA, "eval_dataset"),
    ("sft", "tokenized_path=/tmp/tok", DATA, "tokenized_path"),
    ("sft", "media_dir=/etc", DATA, "media_dir"),
    ("sft", "dataset.name=x", DATA, "dataset"),
    ("sft", "template=llama3", RENDERING, "template"),
    ("sft", "cutoff_len=16", RENDERING, "cutoff_len"),
    ("sft", "mask_history=true", RENDERING, "mask_history"),
    ("sft", "train_on_prompt=true", RENDERING, "train_on_prompt"),
    ("sft", "enable_thinking=false", RENDERING, "enable_thinking"),
    ("sft", "packing=true", RENDERING, "packing"),
    ("sft", "neat_packing=true", RENDERING, "neat_packing"),
    ("sft", "default_system=be brief", RENDERING, "default_system"),
    ("rl", "data.train_data=['/etc']", DATA, "data"),
    ("rl", "+data.train_data=['/etc']", DATA, "data"),
    ("rl", "++data.val_data=['/etc']", DATA, "data"),
    ("rl", "~data.train_data=", DATA, "data"),
    ("rl", "data.train_data[0]=/etc", DATA, "data"),
    ("rl", "data={train_data: ['/etc']}", DATA, "data"),
    ("rl", "trainer.max_prompt_length=16", RENDERING, "trainer.max_prompt_length"),
    ("rl", "trainer={max_prompt_length: 16}", RENDERING, "trainer.max_prompt_length"),
    ("rl", "generator.chat_template_kwargs.enable_thinking=false", RENDERING, "generator.chat_template_kwargs"),
]


@pytest.mark.parametrize("kind,arg,klass,named", REFUSED, ids=[f"{k}:{a}" for k, a, _, _ in REFUSED])
def test_a_set_that_would_change_the_data_or_its_rendering_is_refused(in_project, kind, arg, klass, named):
    """Refused in one line naming the key and where it is decided, by the planner every backend uses."""
    key = arg.partition("=")[0]
    protected, rule = classify(kind, key)
    assert protected == named and rule.klass == klass
    params = load_params("params.yaml")
    ref = "1k" if kind == "sft" else "rl"
    for backend in ("local", "modal"):
        with pytest.raises(BadParams) as e:
            make_plan(params, kind, ref, backend, [arg])
        message = str(e.value)
        assert "\n" not in message and repr(key) in message, message
        assert ("which data trains" if klass == DATA else "how the examples become tokens") in message
        assert rule.why in message and ("--dataset" in rule.why if klass == DATA else "export" in rule.why)
    ds = resolve_dataset(params, kind, ref)  # the planners refuse it too, whoever calls them
    for planner in (plan_local, plan_modal):
        with pytest.raises(BadParams):
            planner(params, ds, parse_sets([arg]))


@pytest.mark.parametrize(
    "kind,arg",
    [
        ("sft", "dataset=sft-1k-other.00000"),
        ("sft", "dataset_dir=/etc"),
        ("sft", "template=llama3"),
        ("sft", "cutoff_len=16"),
        ("rl", "data.train_data=['/etc']"),
        ("rl", "++data.train_data=['/etc']"),
        ("rl", "trainer.max_prompt_length=16"),
    ],
)
def test_the_train_command_refuses_them_in_one_line(sample_project, kind, arg):
    ref = "1k" if kind == "sft" else "rl"
    for backend in ("local", "modal"):
        proc = tracelake(
            sample_project, "train", kind, "--dataset", ref, "-b", backend, "--dry-run", "--set", arg, env=NO_TRAINER
        )
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert proc.stderr.startswith(f"tracelake: train {kind}: --set ") and "dataset:" not in proc.stdout


def test_run_keys_stay_allowed_and_name_their_run(in_project):
    """Resources, logging and checkpoints, training params: allowed; what changes the training gets a
    run directory of its own. Packing is a rendering key now (the export checks lengths against it
    and packs its pre-tokenized data with it): test_the_set_table refuses it."""
    params = load_params("params.yaml")
    ds = resolve_dataset(params, "sft", "1k")
    default = plan_local(params, ds, {}).run_dir
    for same in ("logging_steps=1", "save_steps=50", "report_to=none", "dataloader_num_workers=2"):
        assert plan_local(params, ds, parse_sets([same])).run_dir == default, same
    for other in (
        "per_device_train_batch_size=2",
        "gradient_accumulation_steps=4",
        "learning_rate=1e-5",
        "max_samples=100",
    ):
        assert plan_local(params, ds, parse_sets([other])).run_dir != default, other
    assert plan_local(params, ds, parse_sets(["output_dir=runs/mine"])).run_dir == "runs/mine"
    plan = make_plan(params, "sft", "1k", "modal", ["deepspeed=training/deepspeed/ds_z3_config.json"])
    assert plan.remote_config["dataset_dir"] == f"/datasets/{ds.dataset_id}"
    rl = make_plan(params, "rl", "rl", "local", ["trainer.epochs=2", "trainer.train_batch_size=4"])
    assert "trainer.epochs=2" in rl.rl_overrides and rl.task_dirs is not None
    assert f"data.train_data=['runs/{rl.dataset.dataset_id}/harbor']" in rl.rl_overrides
    for key in (
        "trainer.epochs",
        "trainer.policy.model.path",
        "generator.n_samples_per_prompt",
        "environment.env_class",
    ):
        assert classify("rl", key) is None, key
    assert classify("rl", "trainer")[0] == "trainer.max_prompt_length"  # a whole mapping holds it
    assert normalise("++data.train_data[0]@pkg") == "data.train_data.0" and normalise("~ data") == "data"


AWKWARD = [
    "a`b",
    "`",
    "|",
    ">",
    "%x",
    "@at",
    "{",
    "[",
    "}",
    "a: b",
    "x #c",
    "#",
    "'",
    '"',
    'it\'s "quoted"',
    "two\nlines",
    "",
    " ",
    "no",
    "~",
    "*ref",
    "&anchor",
    "!!python/object:os.system",
    "- item",
    "${oc.env:HOME}",
    "\\",
    "é ünï 😀",
    "\u2028",
    "x" * 5000,
]


KEYS = {"sft": ("run_name", "learning_rate", "output_dir", "model_name_or_path"), "rl": ("trainer.train_batch_size",)}


@pytest.mark.parametrize("value", AWKWARD, ids=[repr(v)[:20] for v in AWKWARD])
def test_any_set_value_gives_a_plan_or_one_line_error(in_project, monkeypatch, value):
    """make_plan on both backends, an awkward value in a string key, a number key, a path key and the
    model: a plan, or a UserError in one line; never another exception. (Its freshness check, a dvc
    status that reads no --set, is left out here: the next test runs the whole command.)"""
    monkeypatch.setattr("tracelake.export.launch.run.check_fresh", lambda ds: "not checked here")
    params = load_params("params.yaml")
    for kind, keys in KEYS.items():
        for key in keys:
            for backend in ("local", "modal"):
                try:
                    plan = make_plan(params, kind, "316" if kind == "sft" else "rl", backend, [f"{key}={value}"])
                except UserError as e:
                    assert "\n" not in str(e), (key, e)
                else:
                    assert describe(plan).count("\ncommand:  ") == 1


@pytest.mark.parametrize("value", AWKWARD[::3], ids=[repr(v)[:20] for v in AWKWARD[::3]])
def test_the_train_command_answers_any_set_value_in_one_line(sample_project, value):
    """The real command: exit 0 with a plan, or exit 2 with one line; never a traceback."""
    for kind, sets in (("sft", ("run_name", "learning_rate")), ("rl", ("trainer.train_batch_size",))):
        ref = "1k" if kind == "sft" else "rl"
        args = [x for key in sets for x in ("--set", f"{key}={value}")]
        proc = tracelake(sample_project, "train", kind, "--dataset", ref, "--dry-run", *args, env=NO_TRAINER)
        assert "Traceback" not in proc.stderr and proc.returncode in (0, 2), (kind, proc.stderr[-2000:])
        if proc.returncode == 2:
            assert proc.stderr.startswith("tracelake: ") and len(proc.stderr.splitlines()) == 1, proc.stderr
        else:
            assert "command:  " in proc.stdout


STRING_KEYS = ("run_name", "logging_dir", "hub_model_id", "output_dir")


@given(key=st.sampled_from(STRING_KEYS), value=st.text(max_size=40))
@fuzz_settings()
def test_fuzz_a_set_value_becomes_a_plan_or_one_error(sample_project, key, value):
    """Any text in a --set: the planner gives a plan whose argument YAML (what OmegaConf reads after
    `=`) reads back as the value --set gave, or a one-line UserError."""
    with contextlib.chdir(sample_project):
        params = load_params("params.yaml")
        ds = resolve_dataset(params, "sft", "316")
        try:
            sets = parse_sets([f"{key}={value}"])
            plan = plan_local(params, ds, sets)
        except UserError as e:
            assert "\n" not in str(e)
            return
    (arg,) = [a for a in plan.sft_args if a.startswith(f"{key}=")]
    assert yaml.safe_load(arg.partition("=")[2]) == sets[key]


@pytest.mark.train_env
def test_set_values_reach_llamafactory_as_given(in_project):
    """OmegaConf (as `llamafactory-cli train CONFIG key=value` reads the command line, in the training
    environment) reads every awkward value back as exactly the string --set gave."""
    values = [v for v in AWKWARD if isinstance(parse_sets([f"k={v}"])["k"], str)]
    args = [f"k{i}={_cli_value(v)}" for i, v in enumerate(values)]
    code = (
        "import json, sys; from omegaconf import OmegaConf; "
        "print(json.dumps(OmegaConf.to_container(OmegaConf.from_cli(sys.argv[1:]))))"
    )
    out = run_ok([str(train_python()), "-c", code, *args], in_project)
    read = json.loads(out.strip().splitlines()[-1])
    assert [read[f"k{i}"] for i in range(len(values))] == values
    # and LLaMA-Factory's own parse of the whole command line takes them
    env = {**NO_TRAINER, "TRACELAKE_TRAIN_ENV": str(train_python().parents[1])}
    sets = ["run_name=a`b", "logging_dir=%x: {y}", "hub_model_id=two\nlines"]
    proc = tracelake(
        in_project, "train", "sft", "--dataset", "316", "--dry-run", *(x for s_ in sets for x in ("--set", s_)), env=env
    )
    assert proc.returncode == 0 and "check:    ok: " in proc.stdout, proc.stderr


@pytest.mark.parametrize("kind,ref,stage", [("sft", "1k", "export_sft@1k"), ("rl", "rl", "export_rl")])
def test_an_export_without_its_manifest_is_called_damaged(sample_project, tmp_path, kind, ref, stage):
    """A build stopped before its manifest (written last), or a manifest lost since: the export is
    damaged, not unknown, and the stage that rebuilds it is named."""
    project = tmp_path / "p"
    shutil.copytree(sample_project, project, symlinks=True)
    export = Path("lake/exports") / ("sft/1k" if kind == "sft" else "rl")
    read_manifest(project / export)
    (project / export / "manifest.json").unlink()
    proc = tracelake(project, "train", kind, "--dataset", ref, "--dry-run", env=NO_TRAINER)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"{export.as_posix()}: its manifest.json is missing: the export is damaged" in proc.stderr
    assert f"run `dvc repro {stage}`" in proc.stderr
    if kind == "sft":  # another scale is there, but stale: train_config reads every export
        other = tracelake(project, "train", kind, "--dataset", "316", "--dry-run", env=NO_TRAINER)
        assert other.returncode == 2 and "is stale: dvc status: export_sft@1k (changed outs)" in other.stderr
