"""vLLM on a Modal GPU (`tracelake score --backend modal`): the local engine's protocol through
`modal run scoring/modal_app.py::score`.

The app's local entrypoint reads the requests on its stdin (as worker.py does), a GPU function runs
worker.py's vllm engine over them and streams every answer back as it is generated, and the
entrypoint prints each one as `tracelake-answer <protocol line>` among Modal's own output. So answers
reach the local cache as they arrive, exactly as with a local worker: an interrupted run loses only
what was in flight.

The model: score.model.path, a local directory, goes to the Modal volume once under its fingerprint
(names, sizes and the first and last MiB of every file); else score.model.name is a hub id,
downloaded on Modal into the volume's hub cache (HF_TOKEN travels by name when it is set).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tracelake.core.envs import env_command
from tracelake.core.errors import BadParams
from tracelake.core.hashing import model_fingerprint
from tracelake.curate.score_params import ModelParams, ScoreModalParams
from tracelake.curate.scoring.engines.local import LocalEngine

PREFIX = b"tracelake-answer "
MODAL_APP_FILE = "scoring/modal_app.py"
FORWARDED_ENV = ("HF_TOKEN",)
MODELS_DIR = "/models"  # on the volume: <fingerprint>/ (uploaded) and hub/ (the hub cache)


@dataclass(frozen=True)
class ModelSource:
    """Where the GPU function finds the model: a local directory uploaded under its fingerprint,
    or a hub id."""

    local_dir: str | None
    fingerprint: str | None
    hub_id: str | None

    @property
    def remote(self) -> str:
        return f"{MODELS_DIR}/{self.fingerprint}" if self.fingerprint else str(self.hub_id)


def model_source(model: ModelParams) -> ModelSource:
    if model.path is None:
        return ModelSource(None, None, model.name)
    directory = Path(model.path)
    if not directory.is_dir():
        raise BadParams(
            f"params.yaml: score.model.path {model.path} is not a directory (on Modal, leave it out "
            f"to download score.model.name from the hub)"
        )
    return ModelSource(directory.as_posix(), model_fingerprint(directory), None)


def modal_command(model: ModelParams, source: ModelSource) -> list[str]:
    command = [
        env_command("training", "modal"),
        "run",
        MODAL_APP_FILE + "::score",
        "--model",
        source.remote,
        "--batch-size",
        str(model.batch_size),
    ]
    if source.local_dir:
        command += ["--local-model-dir", source.local_dir, "--fingerprint", str(source.fingerprint)]
    if model.max_model_len:
        command += ["--max-model-len", str(model.max_model_len)]
    return command


def modal_env(modal: ScoreModalParams) -> dict[str, str]:
    """What scoring/modal_app.py reads at import (no secrets)."""
    return {
        "TRACELAKE_MODAL_APP": modal.app,
        "TRACELAKE_MODAL_GPU": modal.gpu,
        "TRACELAKE_MODAL_TIMEOUT_HOURS": str(modal.timeout_hours),
        "TRACELAKE_MODAL_VOLUME": modal.volume,
        "TRACELAKE_MODAL_PYTHON": modal.image_python,
        "TRACELAKE_MODAL_VLLM": modal.vllm,
    }


class ModalEngine(LocalEngine):
    prefix = PREFIX

    def __init__(self, model: ModelParams, modal: ScoreModalParams, source: ModelSource):
        self.source = source
        super().__init__(
            backend="vllm",
            python=Path(env_command("training", "modal")),
            model_path=source.remote,
            batch_size=model.batch_size,
            max_model_len=model.max_model_len,
        )
        self.command = modal_command(model, source)
        self.env = modal_env(modal)
        self.label = f"vllm {model.name} on Modal {modal.gpu}"

    def _command(self) -> list[str]:
        return self.command
