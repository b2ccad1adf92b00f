"""`tracelake train sft|rl`: resolve a dataset, plan the run, print it (--dry-run) or start it.

- local: `llamafactory-cli train training/configs/sft-<scale>.yaml [key=value ...]` from the training
  environment (TRACELAKE_TRAIN_ENV, else .venv-train, else PATH; `bash training/setup-env.sh`), or
  `python -m <SkyRL entrypoint> key=value ...` from the environment of rl.yaml's trainer: skyrl 0.4
  in the SkyRL environment (.venv-skyrl; `bash training/setup-skyrl-env.sh`), skyrl-train 0.3.x in
  the training environment (core/envs.py).
- modal: `modal run training/modal_app.py::sft|rl`: the export directory goes to a Modal volume
  under its content id (skipped when the id is already there, so an unchanged dataset is never
  uploaded twice), and a GPU function runs the same trainer with paths rewritten to the volumes.

A `--set` that would change which data trains or how it becomes tokens is refused first, in one line
(export/set_keys.py, on every planner); any other goes to the trainer, written so that its command
line reads back exactly the value given.

Before an SFT run starts (and in --dry-run), training/check_sft_config.py parses the config with the
`--set` overrides by LLaMA-Factory's own argument parser, in the training environment (`check_sft`):
an unknown key is refused in one line. An SFT run's directory is runs/<dataset id>/<run hash>
(train_config.run_dir: the training keys after --set, and the GPUs): a run started again resumes
from its last checkpoint (LLaMA-Factory does when overwrite_output_dir is not set), a finished one
is refused. train.sft.report_to `auto` is decided here: wandb when WANDB_API_KEY is set.

Before an RL run starts (and in --dry-run), training/check_rl_config.py checks every override against
the installed SkyRL's own config, in that trainer's environment (`check_rl`), and the dataset must
hold at least one training batch (`check_batch`). Route harbor (rl.yaml `route`) runs SkyRL's Harbor
entrypoint from the SkyRL checkout named by train.rl.skyrl_checkout (put on PYTHONPATH); without one
the dry run says so (`blocked:`) and a run is refused.

A plan holds no credentials: Modal reads its token from the environment (MODAL_TOKEN_ID/SECRET) or
its own config, and the names in FORWARDED_ENV travel as a Modal secret built from the local
environment at run time. Dry runs print names and whether they are set, never values.
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import subprocess
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

import orjson
import yaml

from tracelake.core.datasets import pick_dataset, trained_kind
from tracelake.core.envs import ENVIRONMENTS, env_command, env_program
from tracelake.core.errors import BadInput, BadParams
from tracelake.core.freshness import pipeline_freshness
from tracelake.core.lake import Lake, built_children, is_built
from tracelake.core.outputs import read_manifest
from tracelake.core.ui import out
from tracelake.curate.params import SelectParams
from tracelake.export import harbor_contract
from tracelake.export.params import RL_TRAINERS, TrainParams
from tracelake.export.set_keys import refuse
from tracelake.export.task_dirs import HARBOR_DIR, materialize
from tracelake.export.task_dirs import describe as describe_task_dirs
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
from tracelake.tokens.model_tokenizer import resolve
from tracelake.tokens.tokenizer import tokenizer_fingerprint

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


# --- datasets ----------------------------------------------------------------------------------


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


# --- the training environment -------------------------------------------------------------------


def train_env_bin(name: str) -> str:
    """A program of the training environment (TRACELAKE_TRAIN_ENV, else .venv-train), else the bare
    name, found on PATH when it runs."""
    return env_command("training", name)


# --- plans --------------------------------------------------------------------------------------


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


# --- SkyRL's Harbor route: its contract, its pinned commit, its sandbox's credentials -------------


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


def rl_route(config: dict[str, Any]) -> str:
    """The route an rl.yaml was written for (files from before routes existed: main_base)."""
    return config.get("route", "main_base")


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


# --- checking an RL config against the installed SkyRL -------------------------------------------


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


# --- output and running -------------------------------------------------------------------------


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
    if plan.gpu:
        lines.append(f"gpu:      {plan.gpu}")
    if plan.rl_route:
        lines.append(f"route:    {plan.rl_route} ({plan.rl_entrypoint})")
    if plan.task_dirs:
        lines.append(f"tasks:    {describe_task_dirs(ds.export_dir, ds.manifest, plan.task_dirs)}")
    if plan.tokenizer:
        lines.append(f"tokenizer: {plan.tokenizer}")
    if plan.fresh:
        lines.append(f"fresh:    {plan.fresh}")
    if plan.run_dir:
        lines.append(f"run dir:  {plan.run_dir} ({plan.run_state})")
    if plan.report_to:
        lines.append(f"report:   {plan.report_to}")
    if plan.skyrl:
        lines.append(f"skyrl:    {plan.skyrl}; its Harbor contract was read at {harbor_contract.SKYRL_COMMIT[:12]}")
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
