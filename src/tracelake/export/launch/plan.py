"""A training run's plan: the dataset resolved (a scale, an id, a prefix, REV:NAME), the trainer's
command and environment, local or on Modal, the Harbor route's facts.
"""

from __future__ import annotations

import math
import os
import subprocess
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

import orjson
import yaml

from tracelake.core.datasets import pick_dataset, trained_kind
from tracelake.core.envs import env_command
from tracelake.core.errors import BadInput, BadParams
from tracelake.core.lake import Lake, built_children, is_built
from tracelake.core.outputs import read_manifest
from tracelake.curate.params import SelectParams
from tracelake.export import harbor_contract
from tracelake.export.params import RL_TRAINERS, TrainParams
from tracelake.export.set_keys import refuse
from tracelake.export.task_dirs import HARBOR_DIR
from tracelake.export.train_config import (
    HARBOR_TRIALS_KEY,
    RL_FILE,
    RL_RUN_DIR_KEYS,
    hydra_overrides,
    override_value,
    rl_run_dir,
    rl_run_paths,
    run_dir,
    sft_config_name,
)
from tracelake.ingest.params import ArchiveParams, IngestParams

KINDS = ("sft", "rl")

BACKENDS = ("local", "modal")

FORWARDED_ENV = ("HF_TOKEN", "WANDB_API_KEY")

DATASETS_MOUNT = "/datasets"

RUNS_MOUNT = "/runs"

MODELS_MOUNT = "/models"  # HF_HOME on Modal: a model is downloaded once, not on every run

REMOTE_DEEPSPEED_DIR = "/opt/tracelake/deepspeed"

REMOTE_SFT_CONFIG = "/tmp/tracelake-sft.yaml"

MODAL_APP_FILE = "training/modal_app.py"

MODAL_SKYRL_CHECKOUT = "/opt/SkyRL"  # the Modal image's SkyRL checkout (training/modal_app.py)

CHECK_RL_FILE = "training/check_rl_config.py"

CHECK_SFT_FILE = "training/check_sft_config.py"

FINISHED = "train_results.json"  # LLaMA-Factory writes it when a run has trained to the end

LEGACY_RL_TRAINER = "skyrl-train"  # rl.yaml files written before train.rl.trainer existed


class Params(Protocol):
    """What a launch reads of tracelake.params.Params (a phase may not import the top level)."""

    @property
    def lake(self) -> str: ...

    @property
    def select(self) -> SelectParams: ...

    @property
    def train(self) -> TrainParams: ...

    @property
    def ingest(self) -> IngestParams: ...


@dataclass
class Dataset:
    kind: str
    dataset_id: str
    export_dir: Path
    config_path: Path
    manifest: dict[str, Any]
    revision: str | None = None  # `REV (sha)` for a dataset read from another revision's DVC cache


@dataclass
class Plan:
    dataset: Dataset
    backend: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)  # set for the command (no secrets)
    gpu: str | None = None
    volumes: dict[str, str] = field(default_factory=dict)  # mount point -> volume name
    upload: tuple[str, str, str] | None = None  # (local dir, volume, remote dir)
    remote_config: dict[str, Any] | None = None
    remote_command: list[str] | None = None
    environment: str = "training"  # core/envs.py kind holding the trainer
    sft_args: list[str] | None = None  # key=value after the local SFT config (checked by check_sft)
    run_dir: str | None = None  # SFT: where checkpoints go (runs/<dataset id>/<run hash>)
    run_state: str | None = None  # SFT: new, resumes from a checkpoint, ...
    report_to: str | None = None  # SFT: what it reports to, and why
    rl_overrides: list[str] | None = None  # what SkyRL parses (checked by check_rl)
    rl_route: str | None = None  # harbor | main_base (rl.yaml `route`)
    rl_entrypoint: str | None = None
    notes: list[str] = field(default_factory=list)  # said with the plan (--dry-run included)
    # route harbor: the final overrides the contract checked (harbor_contract), the SkyRL commit, and
    # the sandbox's credential variables -> whether each is set here (never their values)
    harbor_overrides: dict[str, Any] | None = None
    skyrl: str | None = None
    credentials: dict[str, bool] = field(default_factory=dict)
    tokenizer: str | None = None  # the tokenizer check (check_tokenizer)
    fresh: str | None = None  # the freshness check (check_fresh)
    blocker: str | None = None  # why the plan cannot start here (a dry run still shows it)
    # route harbor: where the export's task table becomes task directories before the run starts
    # (export/task_dirs.py), with ingest.archive's caps
    task_dirs: Path | None = None
    archive_limits: ArchiveParams = field(default_factory=ArchiveParams)


def _exports(params: Params, kind: str) -> dict[str, Path]:
    """What `tracelake train <kind>` may train on: each scale's export, or the one export (core/datasets.py)."""
    lake, exports = Lake(params.lake), trained_kind(kind)
    if exports.per_scale:
        return {scale: exports.home(lake, scale) for scale in params.scales}
    return {exports.named(): exports.home(lake)}


def resolve_dataset(params: Params, kind: str, ref: str, stack: ExitStack | None = None) -> Dataset:
    """A scale name (`3k`), a dataset id (`sft-3.16k-9b6b602e9f63`) or a unique prefix of one
    (at least 6 characters of its hash, like git) -> the built export and its generated config.
    `REV:NAME` (a commit, branch, tag or `dvc exp` name, as `tracelake diff` takes) reads the export
    and its config as that revision recorded them, from the DVC cache, into a temporary tree that
    lives as long as `stack`."""
    if kind not in KINDS:
        raise BadParams(f"train: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if ":" in ref:
        if stack is None:
            raise BadInput(f"{ref!r}: a dataset at a revision needs a place to live (resolve it with a stack)")
        return _dataset_at(params, kind, ref, stack)
    built = {}
    for key, d in _exports(params, kind).items():
        manifest = read_manifest(d) if is_built(d) else None
        if manifest is not None and isinstance(manifest.get("dataset_id"), str):
            built[key] = (d, manifest)
        elif key == ref and d.is_dir():  # there, but its build never finished (or it was damaged since)
            raise BadInput(_damaged(kind, key, d, "is missing" if manifest is None else "names no dataset_id"))
    if not built:
        raise BadInput(f"no {kind} export is built under {params.lake}/exports: run `dvc repro`")
    key = pick_dataset(ref, {k: m["dataset_id"] for k, (_, m) in built.items()}, what=f"{kind} dataset")
    export_dir, manifest = built[key]
    config = Path(params.train.configs) / (RL_FILE if kind == "rl" else sft_config_name(key))
    return _checked(kind, export_dir, manifest, config)


def _damaged(kind: str, key: str, export_dir: Path, what: str = "is missing") -> str:
    """An export directory that is there without a finished manifest: a build interrupted or damaged
    since (a manifest is written last: core/tables.py), not a dataset that was never built."""
    exports = trained_kind(kind)
    stage = exports.building_stage(key if exports.per_scale else "")
    return (
        f"{export_dir.as_posix()}: its manifest.json {what}: the export is damaged or its build was "
        f"interrupted; run `dvc repro {stage}`"
    )


def _checked(kind: str, export_dir: Path, manifest: dict[str, Any], config: Path) -> Dataset:
    """The dataset, once its generated config is there and names the same dataset id."""
    if not config.is_file():
        raise BadInput(f"{config} is missing: run `dvc repro train_config`")
    config_id = _config_dataset_id(kind, config)
    if config_id != manifest["dataset_id"]:
        raise BadInput(
            f"{config} trains on {config_id} but {export_dir} holds {manifest['dataset_id']}: "
            f"run `dvc repro` to bring them in line"
        )
    return Dataset(kind, manifest["dataset_id"], export_dir, config, manifest)


def _dataset_at(params: Params, kind: str, ref: str, stack: ExitStack) -> Dataset:
    """`REV:NAME`: the export and training config that revision recorded (core/revisions.py's
    tree_at), the config rewritten to read the export where it now lies (a temporary tree whose
    DVC-tracked files link into the DVC cache)."""
    from tracelake.core.revisions import split_spec, tree_at

    rev, name = split_spec(ref)
    exports = PurePosixPath(params.lake) / "exports" / ("rl" if kind == "rl" else "sft")
    tree = stack.enter_context(tree_at(rev, [str(exports), params.train.configs]))
    where = f" at {rev}"
    base = tree.root / exports
    found = {"rl": base} if kind == "rl" else {d.name: d for d in built_children(base)}
    built = {key: (d, read_manifest(d)) for key, d in found.items() if is_built(d)}
    if not built:
        raise BadInput(f"no {kind} export was built at {rev} ({tree.revision.sha[:10]}) under {exports}")
    key = pick_dataset(name, {k: m["dataset_id"] for k, (_, m) in built.items()}, f"{kind} dataset", where)
    export_dir, manifest = built[key]
    recorded = tree.root / params.train.configs / (RL_FILE if kind == "rl" else sft_config_name(key))
    if not recorded.is_file():
        raise BadInput(
            f"{params.train.configs}/{recorded.name} was not recorded at {rev}: train at a revision that ran train_config"
        )
    config = yaml.safe_load(recorded.read_text())
    if kind == "sft":
        config["dataset_dir"] = str(export_dir)
        if config.get("tokenized_path"):  # the export's own, at that revision
            config["tokenized_path"] = str(Lake.tokenized(export_dir))
    else:
        prefix = str(exports)
        for key_ in ("data.train_data", "data.val_data"):
            config["overrides"][key_] = [
                str(export_dir) + f[len(prefix) :] if f == prefix or f.startswith(prefix + "/") else f
                for f in config["overrides"].get(key_) or []
            ]
    rewritten = tree.root / ".tracelake-config" / recorded.name
    rewritten.parent.mkdir(parents=True, exist_ok=True)
    rewritten.write_text(recorded.read_text().split("\n", 1)[0] + "\n" + yaml.safe_dump(config, sort_keys=False))
    ds = _checked(kind, export_dir, manifest, rewritten)
    ds.revision = f"{rev} ({tree.revision.sha[:10]})"
    return ds


def _config_dataset_id(kind: str, config: Path) -> str:
    data = yaml.safe_load(config.read_text())
    if kind == "rl":
        return data["dataset_id"]
    return data["dataset"].split(",")[0].rsplit(".", 1)[0]


def train_env_bin(name: str) -> str:
    """A program of the training environment (TRACELAKE_TRAIN_ENV, else .venv-train), else the bare
    name, found on PATH when it runs."""
    return env_command("training", name)


def parse_sets(sets: list[str]) -> dict[str, Any]:
    """`--set key=value` options, typed the way the trainers' own command lines (OmegaConf, Hydra)
    read them: integers, floats, true/false, null; anything else (`no`, `epoch`) stays text."""
    out = {}
    for s in sets:
        key, eq, value = s.partition("=")
        if not eq or not key:
            raise BadParams(f"--set {s!r}: expected key=value")
        if "\0" in s:  # no command line can carry it
            raise BadParams(f"--set {s!r}: a NUL character cannot be passed to a trainer")
        out[key] = _typed(value)
    return out


def _typed(value: str) -> Any:
    low = value.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none", "~"):
        return None
    for cast in (int, float):
        try:
            number = cast(value)
        except ValueError:
            continue
        if cast is int or math.isfinite(number):  # YAML reads `inf` and `nan` as text (its .inf, .nan)
            return number
    return value


def _cli_value(v: Any) -> str:
    """A value for `llamafactory-cli train CONFIG key=value`. OmegaConf reads the text after `=` as
    YAML 1.1, so a string it would read as something else (a bare `no` is false, `a: b` a mapping) or
    not at all (a backtick, `%x`, `{`, a newline) is written as a quoted YAML scalar, which it reads
    back as exactly that string."""
    if isinstance(v, str):
        try:
            bare = yaml.safe_load(v) == v and _typed(v) == v  # OmegaConf reads 1e5 as a number too
        except yaml.YAMLError:
            bare = False
        if bare and v.isprintable():
            return v
        style = "'" if v.isprintable() else '"'  # a line break or a control character: escaped, in "..."
        return yaml.safe_dump(v, default_style=style, width=float("inf"), allow_unicode=True).rstrip("\n")
    return override_value(v)


def resolve_report_to(params: Params, sets: dict[str, Any]) -> tuple[Any, str]:
    """train.sft.report_to for this run, and why: `auto` is wandb when WANDB_API_KEY is set here (a
    Modal run gets it as a secret), else none; a --set report_to wins."""
    if "report_to" in sets:
        return sets["report_to"], "--set"
    value = params.train.sft.report_to
    if value != "auto":
        return value, "train.sft.report_to"
    if os.environ.get("WANDB_API_KEY"):
        return "wandb", "train.sft.report_to auto: WANDB_API_KEY is set"
    return "none", "train.sft.report_to auto: WANDB_API_KEY is not set"


def sft_run(params: Params, ds: Dataset, sets: dict[str, Any], gpus: int, runs: str) -> dict[str, Any]:
    """What tracelake adds to the SFT config for this run: output_dir and run_name when --set changes
    the training (a new run hash), report_to when `auto` decides; a --set of its own wins."""
    if "output_dir" in sets and (not isinstance(sets["output_dir"], str) or not sets["output_dir"].strip()):
        raise BadParams(f"train sft: --set output_dir={sets['output_dir']!r}: expected a directory path")
    config = yaml.safe_load(ds.config_path.read_text())
    out = run_dir(runs, ds.dataset_id, {**config, **sets}, gpus)
    added: dict[str, Any] = {"output_dir": out, "run_name": str(PurePosixPath(out).relative_to(runs))}
    added["report_to"], _ = resolve_report_to(params, sets)
    return {k: v for k, v in added.items() if k not in sets and config.get(k) != v}


def run_state(out: Path, sets: dict[str, Any]) -> tuple[str, str | None]:
    """What a local run directory holds, as the plan says it, and a blocker if the run cannot start:
    LLaMA-Factory resumes from the last checkpoint-N in output_dir when overwrite_output_dir is not
    set; a finished run there (FINISHED) is not trained again."""
    try:
        empty = not out.is_dir() or not any(out.iterdir())
    except OSError as e:  # a name too long, a directory it may not list
        raise BadParams(f"train sft: output_dir {out.as_posix()[:200]!r}: {e.strerror or e}") from None
    if empty:
        return "new", None
    if sets.get("overwrite_output_dir") is True:
        return "exists; overwrite_output_dir (--set) trains it again from step 0", None
    if (out / FINISHED).is_file():
        return "finished", (
            f"{out.as_posix()} holds a finished run ({FINISHED}) of this dataset and these params: change a param, "
            f"--set output_dir=<another dir>, or remove it to train again"
        )
    steps = sorted(int(d.name.split("-", 1)[1]) for d in out.glob("checkpoint-*") if d.name[11:].isdigit())
    if steps:
        return f"exists: LLaMA-Factory resumes from checkpoint-{steps[-1]} (the last one in it)", None
    return "exists without a checkpoint: trains from step 0 in it", None


def plan_local(params: Params, ds: Dataset, sets: dict[str, Any], gpus: int | None = None) -> Plan:
    refuse(ds.kind, sets)
    if ds.kind == "sft":
        gpus = gpus or params.train.sft.gpus
        run = {**sets, **sft_run(params, ds, sets, gpus, params.train.runs)}
        args = [f"{k}={_cli_value(v)}" for k, v in run.items()]
        command = [train_env_bin("llamafactory-cli"), "train", str(ds.config_path), *args]
        env = {"FORCE_TORCHRUN": "1", "NNODES": "1", "NPROC_PER_NODE": str(gpus)} if gpus > 1 else {}
        effective = {**yaml.safe_load(ds.config_path.read_text()), **run}
        state, blocker = run_state(Path(effective["output_dir"]), sets)
        return Plan(
            ds,
            "local",
            command,
            env=env,
            sft_args=args,
            run_dir=str(effective["output_dir"]),
            run_state=state,
            report_to=_report_line(params, sets),
            blocker=blocker,
        )
    config = yaml.safe_load(ds.config_path.read_text())
    environment = rl_environment(config)
    out_dir, added = rl_run(params, ds, config, sets)
    final = {**config["overrides"], **added, **sets}
    harbor = rl_route(config) == "harbor"
    checkout = params.train.rl.skyrl_checkout
    blocker = None
    if harbor:
        check_harbor(params, final)
        blocker = checkout_blocker(params, config["entrypoint"])
        if blocker is None and checkout is not None:
            final = _checkout_template(final, str(Path(checkout).resolve()))
            template = final.get(harbor_contract.CHAT_TEMPLATE)
            if isinstance(template, str) and not Path(template).is_file():
                blocker = f"train.rl.skyrl_checkout {checkout}: no {harbor_contract.QWEN3_CHAT_TEMPLATE} in it"
    overrides = hydra_overrides(final)
    command = [env_command(environment, "python"), "-m", config["entrypoint"], *overrides]
    plan = Plan(
        ds,
        "local",
        command,
        environment=environment,
        rl_overrides=overrides,
        rl_route=rl_route(config),
        rl_entrypoint=config["entrypoint"],
        run_dir=out_dir,
        run_state=_rl_run_state(out_dir),
        blocker=blocker,
    )
    if harbor:
        plan.task_dirs = Path(config["overrides"]["data.train_data"][0])
        plan.archive_limits = params.ingest.archive
        _harbor_facts(plan, params, final)
        if blocker is None and checkout is not None:
            plan.env["PYTHONPATH"] = str(Path(checkout).resolve())
    return plan


def rl_run(params: Params, ds: Dataset, config: dict[str, Any], sets: dict[str, Any]) -> tuple[str | None, dict]:
    """An RL run's directory (train_config.rl_run_dir over the overrides with --set applied: a --set
    that changes the training gets its own) and the overrides that move its checkpoints, exports and
    trials there (none that a --set gives). An rl.yaml from before run hashes: (None, {})."""
    o = config["overrides"]
    if "trainer.ckpt_path" not in o:
        return None, {}
    gpus = int(o.get("trainer.placement.policy_num_gpus_per_node") or 1)
    out = rl_run_dir(params.train.runs, ds.dataset_id, {**o, **sets}, gpus)
    old = str(PurePosixPath(str(o["trainer.ckpt_path"])).parent)
    trials = o.get(HARBOR_TRIALS_KEY)
    if trials == f"{old}/trials":  # the run's own, not a train.rl.harbor.trials_dir
        trials = f"{out}/trials"
    added = rl_run_paths(out, trials if HARBOR_TRIALS_KEY in o else None)
    return out, {k: v for k, v in added.items() if k not in sets and o.get(k) != v}


def _rl_run_state(out: str | None) -> str | None:
    if out is None:
        return None
    if Path(out).is_dir() and any(Path(out).iterdir()):
        return "exists: SkyRL resumes from its latest checkpoint there (trainer.resume_mode latest)"
    return "new"


def check_harbor(params: Params, final: dict[str, Any]) -> None:
    """The final overrides (rl.yaml with train.rl.extra, then --set) against SkyRL's Harbor contract
    (export/harbor_contract.py): a violated requirement is refused in one line."""
    broken = harbor_contract.violated(final)
    if broken is not None:
        raise BadParams("train rl: " + harbor_contract.refusal(broken, final, harbor_contract.SKYRL_COMMIT))


def checkout_blocker(params: Params, entrypoint: str) -> str | None:
    """Why the SkyRL checkout (train.rl.skyrl_checkout) cannot run the Harbor route, else None: not
    set, without the Harbor integration, or at another commit than train.rl.skyrl_commit (refused, not
    warned: the contract holds for the pinned commit only, and a mismatch crashes after Ray and vLLM
    have started on every GPU)."""
    rl = params.train.rl
    checkout, commit = rl.skyrl_checkout, rl.skyrl_commit
    if checkout is None:
        return (
            f"train.rl.skyrl_checkout is not set: route harbor runs {entrypoint}, which is in a SkyRL checkout, "
            f"not in the skyrl wheel (git clone {harbor_contract.SKYRL_REPO}; git -C SkyRL checkout {commit}; then "
            f"set its path; or train.rl.route: main_base with an environment of your own)"
        )
    if not (Path(checkout) / "examples" / "train_integrations" / "harbor").is_dir():
        return f"train.rl.skyrl_checkout {checkout}: no examples/train_integrations/harbor in it"
    head = _git_head(Path(checkout))
    if head is None:
        return f"train.rl.skyrl_checkout {checkout}: not a git checkout, so its commit cannot be checked against {commit[:12]}"
    if head != commit:
        return (
            f"train.rl.skyrl_checkout {checkout} is at {head[:12]}, not at train.rl.skyrl_commit {commit[:12]}: "
            f"git -C {checkout} checkout {commit}"
        )
    return None


def _git_head(checkout: Path) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
    except OSError:
        return None
    head = proc.stdout.strip()
    return head if proc.returncode == 0 and len(head) == 40 else None


def _checkout_template(final: dict[str, Any], root: str) -> dict[str, Any]:
    """The chat template, a file of the SkyRL checkout, as a path the engine finds from anywhere."""
    key = harbor_contract.CHAT_TEMPLATE
    template = final.get(key)
    if isinstance(template, str) and template and not PurePosixPath(template).is_absolute():
        return {**final, key: f"{root.rstrip('/')}/{template}"}
    return final


def _harbor_facts(plan: Plan, params: Params, final: dict[str, Any]) -> None:
    """What the dry run says of the Harbor route: the overrides the contract checked, the commit, the
    sandbox's credential variables (set or not here; a real run refuses a missing one)."""
    rl = params.train.rl
    plan.harbor_overrides = final
    plan.skyrl = f"{rl.skyrl_commit} (train.rl.skyrl_commit)"
    if rl.skyrl_commit != harbor_contract.SKYRL_COMMIT:
        plan.notes.append(
            f"train.rl.skyrl_commit {rl.skyrl_commit[:12]} is not the commit the Harbor contract was read at "
            f"({harbor_contract.SKYRL_COMMIT[:12]}): its requirements are checked as declared, unverified there"
        )
    names = harbor_contract.credentials(final.get(harbor_contract.SANDBOX))
    plan.credentials = {n: bool(os.environ.get(n)) for n in names}


def rl_route(config: dict[str, Any]) -> str:
    """The route an rl.yaml was written for (files from before routes existed: main_base)."""
    return config.get("route", "main_base")


def rl_environment(config: dict[str, Any]) -> str:
    """The environment (core/envs.py) of the SkyRL package an rl.yaml was written for."""
    trainer = config.get("trainer", LEGACY_RL_TRAINER)
    if trainer not in RL_TRAINERS:
        raise BadInput(f"rl.yaml names trainer {trainer!r}; tracelake knows {', '.join(RL_TRAINERS)}")
    return RL_TRAINERS[trainer][1]


def _report_line(params: Params, sets: dict[str, Any]) -> str:
    value, why = resolve_report_to(params, sets)
    return f"{override_value(value)} ({why})"


def gpu_count(gpu: str) -> int:
    """The GPUs of a Modal GPU spec: `H100:8` -> 8, `A100` -> 1."""
    _, _, n = gpu.partition(":")
    return int(n) if n.isdigit() else 1


def plan_modal(params: Params, ds: Dataset, sets: dict[str, Any]) -> Plan:
    refuse(ds.kind, sets)
    m = params.train.modal
    remote_dir = f"{DATASETS_MOUNT}/{ds.dataset_id}"
    out_dir = f"{RUNS_MOUNT}/{ds.dataset_id}"
    config = yaml.safe_load(ds.config_path.read_text())
    sft_args = run_dir_ = task_dirs = None
    if ds.kind == "sft":
        # the run hash of the same run locally on as many GPUs; paths then point at the volumes
        run = {**sets, **sft_run(params, ds, sets, gpu_count(m.sft_gpu), params.train.runs)}
        sft_args = [f"{k}={_cli_value(v)}" for k, v in run.items()]  # checked over the local config
        config.update(run)
        if "output_dir" in sets:
            run_dir_ = str(sets["output_dir"])
        else:  # runs/<dataset id>/<run hash> -> /runs/<dataset id>/<run hash>
            relative = PurePosixPath(config["output_dir"]).relative_to(params.train.runs)
            run_dir_ = config["output_dir"] = str(PurePosixPath(RUNS_MOUNT) / relative)
        config["dataset_dir"] = remote_dir
        if config.get("tokenized_path"):  # uploaded with the export, inside it
            config["tokenized_path"] = str(Lake.tokenized(PurePosixPath(remote_dir)))
        if config.get("deepspeed"):
            config["deepspeed"] = f"{REMOTE_DEEPSPEED_DIR}/{PurePosixPath(config['deepspeed']).name}"
        remote_command = ["llamafactory-cli", "train", REMOTE_SFT_CONFIG]
        remote_env = {"FORCE_TORCHRUN": "1"}
        gpu = m.sft_gpu
    else:
        local_prefix = ds.export_dir.as_posix().rstrip("/") + "/"
        o = config["overrides"]
        for key in ("data.train_data", "data.val_data"):
            o[key] = [
                remote_dir + "/" + f[len(local_prefix) :] if f.startswith(local_prefix) else f for f in o.get(key) or []
            ]
        local_out, added = rl_run(params, ds, config, sets)
        o.update(added)
        if local_out is None:  # an rl.yaml from before run hashes
            o["trainer.ckpt_path"], o["trainer.export_path"] = f"{out_dir}/ckpts", f"{out_dir}/exports"
        else:  # runs/<dataset id>/<run hash>/... -> /runs/<dataset id>/<run hash>/...
            run_dir_ = str(PurePosixPath(RUNS_MOUNT) / PurePosixPath(local_out).relative_to(params.train.runs))
            for key in (*RL_RUN_DIR_KEYS, HARBOR_TRIALS_KEY):
                if key in o and key not in sets and str(o[key]).startswith(local_out + "/"):
                    o[key] = run_dir_ + str(o[key])[len(local_out) :]
        harbor = rl_route(config) == "harbor"
        if harbor:
            # extracted here first (as for a local run), then uploaded beside the export
            task_dirs = Path(o["data.train_data"][0])
            o["data.train_data"] = [f"{remote_dir}/{HARBOR_DIR}"]
        o.update(sets)
        if harbor:
            check_harbor(params, o)
            o = config["overrides"] = _checkout_template(o, MODAL_SKYRL_CHECKOUT)
        rl_overrides = hydra_overrides(o)
        remote_command = ["python", "-m", config["entrypoint"], *rl_overrides]
        remote_env = {}
        gpu = m.rl_gpu
    job = {
        "command": remote_command,
        "env": remote_env,
        "config": config if ds.kind == "sft" else None,
        "config_path": REMOTE_SFT_CONFIG,
        "run_dir": run_dir_,  # SFT: a finished run there is not trained again (modal_app.py)
    }
    if ds.kind == "rl":
        command_env = {
            "TRACELAKE_MODAL_RL_TRAINER": config.get("trainer", LEGACY_RL_TRAINER),
            "TRACELAKE_MODAL_RL_ROUTE": rl_route(config),
        }
        if rl_route(config) == "harbor":  # the image's SkyRL checkout, and the sandbox's credentials
            command_env["TRACELAKE_MODAL_SKYRL_REF"] = params.train.rl.skyrl_commit
            names = harbor_contract.credentials(config["overrides"].get(harbor_contract.SANDBOX))
            if names:
                command_env["TRACELAKE_MODAL_FORWARD"] = " ".join(names)
        environment = rl_environment(config)
    else:
        command_env, rl_overrides, environment = {}, None, "training"
    command = [
        train_env_bin("modal"),
        "run",
        MODAL_APP_FILE + f"::{ds.kind}",
        "--dataset-id",
        ds.dataset_id,
        "--dataset-dir",
        ds.export_dir.as_posix(),
        "--job-json",
        orjson.dumps(job, option=orjson.OPT_SORT_KEYS).decode(),
        *(["--harbor-dir", task_dirs.as_posix()] if task_dirs else []),
    ]
    env = {
        "TRACELAKE_MODAL_APP": m.app,
        "TRACELAKE_MODAL_GPU": gpu,
        "TRACELAKE_MODAL_TIMEOUT_HOURS": str(m.timeout_hours),
        "TRACELAKE_MODAL_DATASETS_VOLUME": m.datasets_volume,
        "TRACELAKE_MODAL_RUNS_VOLUME": m.runs_volume,
        "TRACELAKE_MODAL_MODELS_VOLUME": m.models_volume,
        "TRACELAKE_MODAL_PYTHON": m.image_python,
        **command_env,
    }
    plan = Plan(
        ds,
        "modal",
        command,
        rl_route=rl_route(config) if ds.kind == "rl" else None,
        rl_entrypoint=config.get("entrypoint") if ds.kind == "rl" else None,
        env=env,
        gpu=gpu,
        volumes={DATASETS_MOUNT: m.datasets_volume, RUNS_MOUNT: m.runs_volume, MODELS_MOUNT: m.models_volume},
        upload=(ds.export_dir.as_posix(), m.datasets_volume, f"/{ds.dataset_id}"),
        remote_config=config,
        remote_command=remote_command,
        environment=environment,
        rl_overrides=rl_overrides,
        sft_args=sft_args,
        run_dir=run_dir_,
        run_state=(
            f"on volume {m.runs_volume}: LLaMA-Factory resumes from its last checkpoint if this run is there; "
            f"a finished one is not trained again"
        )
        if ds.kind == "sft"
        else f"on volume {m.runs_volume}: SkyRL resumes from its latest checkpoint if this run is there",
        report_to=_report_line(params, sets) if ds.kind == "sft" else None,
        task_dirs=task_dirs,
        archive_limits=params.ingest.archive,
    )
    if ds.kind == "rl" and rl_route(config) == "harbor":
        _harbor_facts(plan, params, config["overrides"])
    return plan
