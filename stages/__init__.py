"""The pipeline's stages, one module each, in pipeline order. Each module declares `STAGE`
(tracelake.core.stage.Stage): what it reads and writes and the params it uses, and its `run`.

    python -m stages NAME [KEY]       run one stage (what dvc.yaml's commands do)
    python -m stages.dvc_yaml         write dvc.yaml from the declarations (--check: only compare)
"""

from __future__ import annotations

import importlib
from typing import Any

NAMES = (
    "synth",
    "tokenizer",
    "scan",
    "ingest",
    "score",
    "dedup",
    "filter",
    "select",
    "export_sft",
    "export_rl",
    "train_config",
    "report",
    "check",
)


def declared(name: str) -> Any:
    """The `Stage` declared by stages/<name>.py."""
    if name not in NAMES:
        raise KeyError(name)
    return importlib.import_module(f"stages.{name}").STAGE
