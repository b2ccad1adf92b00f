"""Modal app for `tracelake score --backend modal` (run it through that command: it sets the
TRACELAKE_MODAL_* variables below from params.yaml `score.modal`, feeds the requests on stdin and
caches each answer as it comes back).

    tracelake score --backend modal --dry-run   # what would run, offline
    tracelake score --backend modal             # = modal run scoring/modal_app.py::score ...

- The local entrypoint reads the uncached requests (worker.py's protocol, one JSON line each) from
  stdin, uploads the model directory to the volume once under its fingerprint when it is local, and
  prints every answer the GPU function streams back as `tracelake-answer <line>`.
- The GPU function runs src/tracelake/curate/scoring/engines/worker.py (vLLM's offline `LLM.generate`, the
  same code as a local run) and yields its protocol lines as they are written.
- Volume: /models/<fingerprint>/ (uploaded models) and /models/hub (the hub cache, so a hub model is
  downloaded once). Credentials: Modal's own token; HF_TOKEN, when set locally, travels as a Modal
  secret built from the local environment. Never run in tests (Modal needs the network and a token).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path, PurePosixPath

import modal

HERE = Path(__file__).resolve().parent
WORKER = HERE.parent / "src" / "tracelake" / "curate" / "scoring" / "engines" / "worker.py"
APP = os.environ.get("TRACELAKE_MODAL_APP", "tracelake-score")
GPU = os.environ.get("TRACELAKE_MODAL_GPU", "H100:1")
TIMEOUT_S = int(os.environ.get("TRACELAKE_MODAL_TIMEOUT_HOURS", "4")) * 3600
VOLUME = os.environ.get("TRACELAKE_MODAL_VOLUME", "tracelake-scoring")
PYTHON = os.environ.get("TRACELAKE_MODAL_PYTHON", "3.12")
VLLM = os.environ.get("TRACELAKE_MODAL_VLLM", "0.32.0")
MODELS = "/models"
PREFIX = "tracelake-answer "
FORWARDED_ENV = ("HF_TOKEN",)

app = modal.App(APP)
volume = modal.Volume.from_name(VOLUME, create_if_missing=True)
secrets = [modal.Secret.from_local_environ([n for n in FORWARDED_ENV if os.environ.get(n)])]
image = (
    modal.Image.debian_slim(python_version=PYTHON)
    .pip_install(f"vllm=={VLLM}")
    .env({"HF_HOME": f"{MODELS}/hub"})
    .add_local_file(WORKER, "/opt/tracelake/worker.py")
)


@app.function(image=image, gpu=GPU, volumes={MODELS: volume}, secrets=secrets, timeout=TIMEOUT_S)
def generate(requests: list[str], model: str, batch_size: int, max_model_len: int | None):
    """worker.py over `requests` (protocol lines); yields each answer line as it is written."""
    command = [
        sys.executable,
        "/opt/tracelake/worker.py",
        "--engine",
        "vllm",
        "--model",
        model,
        "--batch-size",
        str(batch_size),
    ]
    if max_model_len:
        command += ["--max-model-len", str(max_model_len)]
    with tempfile.TemporaryFile("w+") as stdin:
        stdin.writelines(line if line.endswith("\n") else line + "\n" for line in requests)
        stdin.seek(0)
        proc = subprocess.Popen(command, stdin=stdin, stdout=subprocess.PIPE, text=True)
        try:
            for line in proc.stdout:
                yield line
        finally:
            code = proc.wait()
            volume.commit()  # the hub cache, so the next run downloads nothing
    if code:
        raise RuntimeError(f"worker.py exited with code {code}")


def upload_once(local_dir: str, fingerprint: str) -> None:
    present = {PurePosixPath(e.path).name for e in volume.listdir("/")}
    if fingerprint in present:
        print(f"model {fingerprint} is already on volume {VOLUME}: not uploading", file=sys.stderr)
        return
    with volume.batch_upload() as batch:
        batch.put_directory(local_dir, f"/{fingerprint}")
    print(f"uploaded {local_dir} -> {VOLUME}:/{fingerprint}", file=sys.stderr)


@app.local_entrypoint()
def score(
    model: str, batch_size: int = 64, max_model_len: int = 0, local_model_dir: str = "", fingerprint: str = ""
) -> None:
    if local_model_dir:
        upload_once(local_model_dir, fingerprint)
    requests = [line for line in sys.stdin if line.strip()]
    for line in generate.remote_gen(requests, model, batch_size, max_model_len or None):
        if not line.startswith('{"ready"'):
            sys.stdout.write(PREFIX + line)
            sys.stdout.flush()
