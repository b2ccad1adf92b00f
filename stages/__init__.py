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


def source_items(sources: dict[str, Any]) -> dict[str, dict[str, str]]:
    """What dvc.yaml's `ingest` lists for each source: its inputs, `tasks` being the trace table
    itself where the source has no tasks of its own (DVC cannot interpolate a missing key, so dvc.yaml
    carries the sources, written from params.yaml by `python -m stages.dvc_yaml`)."""
    return {name: {"path": s.path, "tasks": s.path if s.derives_tasks else s.tasks} for name, s in sources.items()}


def check_sources_current(params: Any, dvc_yaml: str = "dvc.yaml") -> None:
    """Stop, in one line, when params.yaml's sources differ from those dvc.yaml ingests: a source
    added, removed or moved since dvc.yaml was written would otherwise be silently left out."""
    from pathlib import Path

    import yaml

    from tracelake.core.errors import BadParams

    path = Path(dvc_yaml)
    if not path.is_file():
        return  # run outside a pipeline (a scratch copy of a stage)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    listed = (yaml.load(path.read_text(), Loader=loader) or {}).get("stages", {}).get("ingest", {}).get("foreach")
    if listed != source_items(params.sources):
        raise BadParams(
            "dvc.yaml does not ingest the sources params.yaml names (sources changed): run "
            "`python -m stages.dvc_yaml` to rewrite it, then `dvc repro`"
        )
