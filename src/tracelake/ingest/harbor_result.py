"""A Harbor trial's result.json: the fields ingest reads, each checked for its type.

Names (task, trial, job, agent, model, provider, start time, exception type) must be strings or null:
an exception type given as an object must not become its Python repr (the timeout filter would miss
the run). The reward must be a finite number (or a numeric string), as trace ingest requires of
`result`. Where a field has two homes (`agent_info.name`, `config.agent.name`), the first one set wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracelake.ingest.common import Reject
from tracelake.ingest.validate import finite_reward, optional_str
from tracelake.ingest.walk import display


@dataclass
class TrialResult:
    """What result.json says about a trial."""

    task: str
    trial_name: str
    run_id: str | None
    agent: str | None
    model: str | None
    provider: str | None
    date: str | None
    exception_type: str | None
    reward: float | None

    @property
    def result(self) -> str | None:
        if self.exception_type:
            return self.exception_type
        return None if self.reward is None else str(float(self.reward))


def _dig(d: Any, *keys: str) -> Any:
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def _name(data: Any, *paths: tuple[str, ...]) -> str | None:
    """The first of the fields at `paths` that is set (not null nor empty): a string, else invalid_field."""
    for path in paths:
        v = _dig(data, *path)
        if v is not None and v != "":
            return optional_str(v, ".".join(path))
    return None


def parse_result(data: Any, trial: Path) -> TrialResult:
    if not isinstance(data, dict):
        raise Reject("invalid_field", "result.json is not a JSON object")
    """result.json -> TrialResult; a field of the wrong type is invalid_field (validate.py)."""
    task = _name(data, ("task_name",), ("config", "task_name"))
    if not task:
        raise Reject("missing_required_field", "result.json has no task_name")
    return TrialResult(
        task=task,
        trial_name=_name(data, ("trial_name",)) or display(trial.name),
        run_id=_name(data, ("config", "job_id"), ("job_id",)) or display(trial.parent.name),
        agent=_name(data, ("agent_info", "name"), ("config", "agent", "name")),
        model=_name(data, ("agent_info", "model_info", "name"), ("config", "agent", "model_name")),
        provider=_name(data, ("agent_info", "model_info", "provider")),
        date=_name(data, ("started_at",)),
        exception_type=_name(data, ("exception_info", "exception_type")),
        reward=finite_reward(_dig(data, "verifier_result", "rewards", "reward"), "verifier_result.rewards.reward"),
    )
