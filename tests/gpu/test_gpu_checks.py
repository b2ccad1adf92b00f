"""GPU checks 1 and 2 as tests, for a GPU machine with the environments installed:

    uv run --frozen pytest tests/gpu -m gpu

- LLaMA-Factory full SFT (30 bf16 steps of a tiny random Qwen3) on the project's SFT export
  (tests/gpu/lf_check.py), in the training environment;
- the transformers model scorer answering 50 task instructions on CUDA (tests/gpu/score_check.py):
  the scorer in this interpreter, its worker in the training environment.

Skipped, with the reason, where there is no NVIDIA driver (decided without importing torch, so the
normal suite pays nothing), where the engine environment's torch sees no CUDA device or lacks
LLaMA-Factory / transformers, and where the pipeline's outputs they read are missing. The engine
environment: $TRACELAKE_GPU_PYTHON, else the training environment's python (.venv-train,
`bash training/setup-env.sh`; $TRACELAKE_TRAIN_ENV). The export: $TRACELAKE_GPU_EXPORT, else
lake/exports/sft/316 (`uv run --frozen dvc repro`). TRACELAKE_GPU_TESTS_CPU=1 runs both in their
--cpu-smoke form instead (3 CPU steps, 5 answers): the same code paths on a machine without a GPU.
On a lent machine without network, run tests/gpu/device_checks.sh instead (tests/gpu/README.md).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tracelake.core.envs import env_program

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CPU = os.environ.get("TRACELAKE_GPU_TESTS_CPU") == "1"
PROBE = """
import importlib.util, json, sys
info = {"modules": {m: importlib.util.find_spec(m) is not None for m in sys.argv[1:]}}
try:
    import torch
    info["cuda"] = torch.cuda.is_available()
    info["device"] = torch.cuda.get_device_name(0) if info["cuda"] else None
except Exception as exc:
    info["cuda"], info["torch_error"] = False, f"{type(exc).__name__}: {exc}"
print(json.dumps(info))
"""


def nvidia_driver() -> bool:
    return Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is not None


@pytest.fixture(scope="session")
def gpu_python() -> tuple[Path, dict]:
    """The engine environment's python and what it holds; skips where the checks cannot run."""
    if not CPU and not nvidia_driver():
        pytest.skip(
            "no NVIDIA GPU here (no /proc/driver/nvidia, no nvidia-smi): the GPU checks run on a GPU "
            "machine (tests/gpu/README.md; TRACELAKE_GPU_TESTS_CPU=1 runs their CPU smoke form)"
        )
    chosen = os.environ.get("TRACELAKE_GPU_PYTHON")
    python = Path(chosen) if chosen else env_program("training", "python")
    if python is None or not python.is_file():
        pytest.skip(
            f"no engine environment: {chosen or '.venv-train/bin/python'} is missing "
            "(bash training/setup-env.sh, or set TRACELAKE_GPU_PYTHON to a python with torch + LLaMA-Factory)"
        )
    proc = subprocess.run(
        [str(python), "-c", PROBE, "torch", "transformers", "llamafactory"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0:
        pytest.skip(f"{python} cannot run the probe: {proc.stderr.strip().splitlines()[-1:]}")
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    if not info["modules"]["torch"]:
        pytest.skip(f"{python} has no torch")
    if not CPU and not info["cuda"]:
        pytest.skip(f"torch in {python} sees no CUDA device {info.get('torch_error', '')}".rstrip())
    return python, info


def tokenizer_dir(tmp_path: Path) -> Path:
    """The pipeline's tokenizer (data/tokenizer), else the same one built now."""
    built = ROOT / "data" / "tokenizer"
    if (built / "tokenizer.json").is_file():
        return built
    try:
        from tracelake.tokens.tokenizer import build_tokenizer
    except ImportError:  # before core/tokens.py became tokens/tokenizer.py
        from tracelake.core.tokens import build_tokenizer

    return build_tokenizer(tmp_path / "tokenizer")


def run_check(script: str, args: list[str], out: Path, timeout: float) -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            str(HERE / script),
            "--out",
            str(out),
            "--work",
            str(out.parent / "work"),
            *args,
            *(["--cpu-smoke"] if CPU else []),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    result_file = out / script.replace(".py", ".json")
    assert result_file.is_file(), (
        f"{script} wrote no result (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    result = json.loads(result_file.read_text())
    assert proc.returncode == 0 and result["status"] == "PASS", (
        f"{proc.stdout[-2000:]}\n{json.dumps({k: v for k, v in result.items() if k != 'losses'}, indent=1)[-3000:]}"
    )
    return result


def test_llamafactory_full_sft_on_the_gpu(gpu_python, tmp_path):
    python, info = gpu_python
    if not info["modules"]["llamafactory"]:
        pytest.skip(f"{python} has no LLaMA-Factory (bash training/setup-env.sh installs the pinned 0.9.5)")
    export = Path(os.environ.get("TRACELAKE_GPU_EXPORT") or ROOT / "lake" / "exports" / "sft" / "316")
    if not (export / "dataset_info.json").is_file():
        pytest.skip(f"no SFT export at {export}: run `uv run --frozen dvc repro` (or set TRACELAKE_GPU_EXPORT)")
    result = run_check(
        "lf_check.py",
        ["--export", str(export), "--python", str(python), "--tokenizer", str(tokenizer_dir(tmp_path))],
        tmp_path / "out",
        900,
    )
    steps = 3 if CPU else 30
    assert result["steps"] == steps and len(result["losses"]) == steps
    assert all(math.isfinite(x) for x in result["losses"])
    if not CPU:
        assert result["cuda"] and result["loss_last_mean"] < result["loss_first_mean"]
        assert result["peak_gpu_mem_bytes"] > 0
    print(
        f"\nLLaMA-Factory on {result['device']}: loss {result['loss_start']} -> {result['loss_end']}, "
        f"{result['samples_per_s']} samples/s, peak {result['peak_gpu_mem_bytes']} bytes"
    )


def test_transformers_scorer_answers_on_the_gpu(gpu_python, tmp_path):
    python, info = gpu_python
    if not info["modules"]["transformers"]:
        pytest.skip(f"{python} has no transformers")
    n = 5 if CPU else 50
    result = run_check(
        "score_check.py",
        [
            "--worker-python",
            str(python),
            "--n",
            str(n),
            "--tasks",
            str(ROOT / "lake" / "tasks"),
            "--tokenizer",
            str(tokenizer_dir(tmp_path)),
        ],
        tmp_path / "out",
        600,
    )
    assert result["answered"] == result["scored"] == n and result["failed"] == 0
    assert result["rerun"] == {**result["rerun"], "answered": 0, "cached": n, "same_scores": True}
    if not CPU and result["nvidia_smi"]:
        assert result["gpu_used"]
    answers = [json.loads(line) for line in (tmp_path / "out" / "score" / "answers.jsonl").read_text().splitlines()]
    assert len(answers) == n and all(a["completion_tokens"] for a in answers)
    print(
        f"\ntransformers scorer: {result['answers_per_s']} answers/s ({result['answers_per_s_after_load']} "
        f"after loading)"
    )


def test_skyrl_trains_three_steps_on_two_harbor_tasks(tmp_path):
    """Check 5 (tests/gpu/skyrl_check.py): SkyRL's Harbor entrypoint, through the generated rl.yaml and
    the launcher, trains a tiny Qwen3 for 3 steps on 2 exported tasks; the trials come back through
    `tracelake ingest harbor`. Needs a GPU, a SkyRL checkout, a SkyRL environment with Ray, vLLM and
    Harbor, a Docker daemon (Harbor's `docker` environment) and the built RL export."""
    if CPU or not nvidia_driver():
        pytest.skip("needs an NVIDIA GPU (SkyRL trains and generates on CUDA): there is no CPU form of it")
    checkout = os.environ.get("TRACELAKE_SKYRL_CHECKOUT")
    if not checkout or not (Path(checkout) / "examples" / "train_integrations" / "harbor").is_dir():
        pytest.skip("set TRACELAKE_SKYRL_CHECKOUT to a SkyRL checkout (git clone https://github.com/NovaSky-AI/SkyRL)")
    python = env_program("skyrl", "python")
    if python is None:
        pytest.skip("no SkyRL environment (bash training/setup-skyrl-env.sh, then its fsdp and harbor extras)")
    proc = subprocess.run(
        [str(python), "-c", PROBE, "ray", "vllm", "harbor", "torch"], capture_output=True, text=True, timeout=300
    )
    info = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {"modules": {}}
    missing = [m for m, ok in info["modules"].items() if not ok] or ([] if info.get("cuda") else ["CUDA torch"])
    if missing:
        pytest.skip(
            f"{python} lacks {', '.join(missing)}: a SkyRL Harbor run needs them (uv sync --extra fsdp --extra harbor in the checkout)"
        )
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.skip("no Docker daemon: Harbor's docker environment runs each trial in a container")
    if not (ROOT / "lake" / "exports" / "rl" / "manifest.json").is_file():
        pytest.skip("no RL export: run `uv run --frozen dvc repro`")
    result = run_check("skyrl_check.py", ["--skyrl-checkout", checkout], tmp_path / "out", 3000)
    assert result["trainer_rc"] == 0 and result["trials"] >= 3 * 2 * 2
    print(f"\nSkyRL Harbor: 3 steps on {result['task_dirs']}, {result['trials']} trials, ingested: {result['ingest']}")
