"""Modal app for `tracelake train sft|rl --backend modal` (run it through that command: it sets the
TRACELAKE_MODAL_* variables below from params.yaml `train.modal` and passes the rewritten config).

    tracelake train sft --dataset 3k --backend modal --dry-run   # what would run, offline
    tracelake train sft --dataset 3k --backend modal             # = modal run training/modal_app.py::sft ...

- Volumes: `datasets` holds each export under its content id (/datasets/<dataset id>/); it is
  uploaded from the local entrypoint only when that id is not on the volume yet, so an unchanged
  dataset is never uploaded twice. `runs` holds checkpoints and logs (/runs/<dataset id>/<run
  hash>/ for SFT: a run started again resumes from its last checkpoint; a finished one is refused).
  `models` is HF_HOME (/models): a model (16 GB for Qwen3-8B) is downloaded on the first run only.
- Images (on a CUDA devel base): SFT = LLaMA-Factory, CUDA torch, DeepSpeed; RL = skyrl 0.4 (or
  skyrl-train 0.3.1: train.rl.trainer) with vLLM (Python 3.12), and for route harbor a SkyRL checkout
  with its harbor extra. Never built here: Modal's builders need the network and a token.
- Credentials: Modal's own token from the environment or ~/.modal.toml; HF_TOKEN / WANDB_API_KEY,
  when set locally, travel as a Modal secret built from the local environment. Nothing is written.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path, PurePosixPath

import modal

HERE = Path(__file__).resolve().parent
APP = os.environ.get("TRACELAKE_MODAL_APP", "tracelake-train")
GPU = os.environ.get("TRACELAKE_MODAL_GPU", "H100:8")
TIMEOUT_S = int(os.environ.get("TRACELAKE_MODAL_TIMEOUT_HOURS", "24")) * 3600
DATASETS = os.environ.get("TRACELAKE_MODAL_DATASETS_VOLUME", "tracelake-datasets")
RUNS = os.environ.get("TRACELAKE_MODAL_RUNS_VOLUME", "tracelake-runs")
MODELS = os.environ.get("TRACELAKE_MODAL_MODELS_VOLUME", "tracelake-models")
PYTHON = os.environ.get("TRACELAKE_MODAL_PYTHON", "3.11")
# HF_TOKEN, WANDB_API_KEY, and for route harbor the sandbox's credential variables, which
# `tracelake train rl` names in TRACELAKE_MODAL_FORWARD (export/harbor_contract.py)
FORWARDED_ENV = ("HF_TOKEN", "WANDB_API_KEY", *os.environ.get("TRACELAKE_MODAL_FORWARD", "").split())
DATASETS_MOUNT, RUNS_MOUNT, MODELS_MOUNT = "/datasets", "/runs", "/models"
FINISHED = "train_results.json"  # LLaMA-Factory writes it when a run has trained to the end

app = modal.App(APP)
datasets_volume = modal.Volume.from_name(DATASETS, create_if_missing=True)
runs_volume = modal.Volume.from_name(RUNS, create_if_missing=True)
models_volume = modal.Volume.from_name(MODELS, create_if_missing=True)
volumes = {DATASETS_MOUNT: datasets_volume, RUNS_MOUNT: runs_volume, MODELS_MOUNT: models_volume}
HF_CACHE = {"HF_HOME": MODELS_MOUNT}  # the hub cache (models, tokenizers) on the models volume
secrets = [modal.Secret.from_local_environ([n for n in FORWARDED_ENV if os.environ.get(n)])]

CUDA_BASE = "nvidia/cuda:12.8.1-devel-ubuntu22.04"  # nvcc: DeepSpeed and flash-attn build against it
sft_image = (
    modal.Image.from_registry(CUDA_BASE, add_python=PYTHON)
    .pip_install(
        "torch==2.13.0",
        "llamafactory==0.9.5",
        "transformers==4.57.6",
        "datasets==4.0.0",
        "deepspeed==0.18.2",
        "wandb",  # report_to wandb (train.sft.report_to auto with WANDB_API_KEY set)
    )
    .env(HF_CACHE)
    .add_local_dir(HERE / "deepspeed", "/opt/tracelake/deepspeed")
)
RL_TRAINER = os.environ.get("TRACELAKE_MODAL_RL_TRAINER", "skyrl")  # train.rl.trainer, as rl.yaml records it
RL_PACKAGES = {  # both need Python 3.12; their GPU extras pin vLLM, CUDA torch and flash-attn
    "skyrl": "skyrl[fsdp]==0.4.0",
    "skyrl-train": "skyrl-train[vllm]==0.3.1",
}
RL_ROUTE = os.environ.get("TRACELAKE_MODAL_RL_ROUTE", "main_base")  # train.rl.route, as rl.yaml records it
# Route harbor: SkyRL's Harbor entrypoint lives in its repository, not its wheel; the image holds a
# checkout at the pinned commit (TRACELAKE_MODAL_SKYRL_REF: train.rl.skyrl_commit, which `tracelake
# train rl` passes; no default: an unpinned image could run code the Harbor contract was not read
# at) installed with its harbor extra, on PYTHONPATH as the local run puts train.rl.skyrl_checkout.
SKYRL_REF = os.environ.get("TRACELAKE_MODAL_SKYRL_REF", "")
rl_image = modal.Image.from_registry(CUDA_BASE, add_python="3.12")
if RL_ROUTE == "harbor":
    if not SKYRL_REF:
        raise SystemExit(
            "TRACELAKE_MODAL_SKYRL_REF is not set: run through `tracelake train rl --backend modal`, which pins "
            "the SkyRL checkout to train.rl.skyrl_commit"
        )
    rl_image = (
        rl_image.apt_install("git")
        .run_commands(
            "git clone https://github.com/NovaSky-AI/SkyRL /opt/SkyRL",
            f"git -C /opt/SkyRL checkout {SKYRL_REF}",
            "pip install -e '/opt/SkyRL[fsdp,harbor]'",
        )
        .env({"PYTHONPATH": "/opt/SkyRL"})
    )
else:
    rl_image = rl_image.pip_install(RL_PACKAGES[RL_TRAINER])
rl_image = rl_image.env(HF_CACHE)


def _run(job: dict, dataset_id: str) -> None:
    """Write the job's config file (if any) and run its command; the runs and models volumes are
    committed even after a failure, so logs and downloaded models survive."""
    run_dir = job.get("run_dir")
    if run_dir and (Path(run_dir) / FINISHED).is_file():
        raise SystemExit(
            f"{RUNS}:{run_dir.removeprefix(RUNS_MOUNT)} holds a finished run ({FINISHED}) of this dataset and these params: change a "
            f"param, --set output_dir=<another dir>, or remove it to train again"
        )
    if job.get("config") is not None:
        Path(job["config_path"]).write_text(json.dumps(job["config"]))  # JSON is valid YAML
    print("running:", " ".join(job["command"]), flush=True)
    try:
        subprocess.run(job["command"], check=True, env={**os.environ, **job.get("env", {})})
    finally:
        runs_volume.commit()
        models_volume.commit()
    print(f"done: checkpoints and logs in volume {RUNS}:{(run_dir or '').removeprefix(RUNS_MOUNT) or '/' + dataset_id}")


@app.function(image=sft_image, gpu=GPU, volumes=volumes, secrets=secrets, timeout=TIMEOUT_S)
def train_sft(job: dict, dataset_id: str) -> None:
    """LLaMA-Factory full SFT on /datasets/<dataset id> (the config already points there)."""
    _run(job, dataset_id)


@app.function(image=rl_image, gpu=GPU, volumes=volumes, secrets=secrets, timeout=TIMEOUT_S)
def train_rl(job: dict, dataset_id: str) -> None:
    """SkyRL on /datasets/<dataset id>: its harbor/ task directories (route harbor) or its
    prompts/*.parquet (main_base); the overrides already point there."""
    _run(job, dataset_id)


def upload_once(dataset_dir: str, dataset_id: str, harbor_dir: str = "") -> bool:
    """Put the export on the datasets volume under its content id unless it is there, with the task
    directories `tracelake train rl` extracted from it (route harbor) as <id>/harbor; True if uploaded."""
    present = {PurePosixPath(e.path).name for e in datasets_volume.listdir("/")}
    if dataset_id in present:
        print(f"{dataset_id} is already on volume {DATASETS}: not uploading")
        return False
    with datasets_volume.batch_upload() as batch:
        batch.put_directory(dataset_dir, f"/{dataset_id}")
        if harbor_dir:
            batch.put_directory(harbor_dir, f"/{dataset_id}/harbor")
    print(f"uploaded {dataset_dir} -> {DATASETS}:/{dataset_id}")
    return True


@app.local_entrypoint()
def sft(dataset_id: str, dataset_dir: str, job_json: str) -> None:
    upload_once(dataset_dir, dataset_id)
    train_sft.remote(json.loads(job_json), dataset_id)


@app.local_entrypoint()
def rl(dataset_id: str, dataset_dir: str, job_json: str, harbor_dir: str = "") -> None:
    upload_once(dataset_dir, dataset_id, harbor_dir)
    train_rl.remote(json.loads(job_json), dataset_id)
