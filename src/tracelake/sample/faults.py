"""Injected faults: which trials are damaged, and how their files or trace rows are damaged.

About 1.5% of Harbor trials (at least one of each HARBOR_FAULTS from 50 trials up) and one trace
row of each TRACE_FAULTS are damaged on purpose; ingest must reject exactly these. The harbor
writer (harbor.py) damages a trial's parsed objects (`damage_objects`) and then the bytes of its
agent/trajectory.json (`damage_bytes`); the trace writer (traces.py) a row (`damage_row`) and its
JSONL line (`damage_line`). `duplicate_trial` is done by the harbor writer itself: it copies the
last clean trial directory into the next job. The manifest lists each fault at `fault_path`.
"""

from __future__ import annotations

from typing import Any

from tracelake.sample.common import SourceSpec, seeded

HARBOR_FAULTS = (
    "unparsable_json",
    "missing_result_json",
    "invalid_utf8",
    "lone_surrogate",
    "empty_conversation",
    "unknown_role",
    "missing_required_field",
    "duplicate_trial",
)
TRACE_FAULTS = ("unparsable_json", "empty_conversation", "unknown_role", "missing_required_field")
FAULT_RATE = 0.015  # harbor faults per trial (at least one of each from 50 trials up)
MIN_TRIALS_FOR_ALL_FAULTS = 50


def plan_faults(seed: int, spec: SourceSpec, n: int) -> dict[int, str]:
    """Trial index -> fault name. Index 0 is never faulty (duplicates copy a clean trial)."""
    names = HARBOR_FAULTS if spec.format == "harbor" else TRACE_FAULTS
    if n >= MIN_TRIALS_FOR_ALL_FAULTS:
        k = max(len(names), round(FAULT_RATE * n)) if spec.format == "harbor" else len(names)
    else:
        k = min(round(FAULT_RATE * n), len(names))
    rng = seeded(seed, spec.name, "faults")
    chosen = [names[j % len(names)] for j in range(k)]
    rng.shuffle(chosen)
    return dict(zip(sorted(rng.sample(range(1, n), k)) if k else [], chosen, strict=True))


def fault_path(trial_rel: str, fault: str | None) -> str:
    """The damaged file of a harbor trial (the trial directory itself for a missing file)."""
    if fault in ("missing_result_json", None):
        return trial_rel
    if fault == "missing_required_field":
        return f"{trial_rel}/result.json"
    return f"{trial_rel}/agent/trajectory.json"


# --------------------------------------------------------------------------- harbor trials
def damage_objects(fault: str, objs: dict[str, Any]) -> None:
    """Damage a trial's files (path -> parsed JSON) before they are rendered."""
    traj = objs["agent/trajectory.json"]
    if fault == "missing_result_json":
        del objs["result.json"]
    elif fault == "missing_required_field":
        del objs["result.json"]["task_name"]
    elif fault == "empty_conversation":
        traj["steps"] = traj["steps"][:1]
        traj["final_metrics"].update(total_prompt_tokens=0, total_completion_tokens=0)
        traj.pop("continued_trajectory_ref", None)
        for rel in [r for r in objs if r.startswith("agent/") and r != "agent/trajectory.json"]:
            del objs[rel]
    elif fault == "unknown_role":
        agent_steps = [s for s in traj["steps"] if s["source"] == "agent"]
        agent_steps[len(agent_steps) // 2]["source"] = "environment"


def damage_bytes(fault: str, data: bytes) -> bytes:
    """Damage the rendered bytes of agent/trajectory.json."""
    if fault == "unparsable_json":
        return data[: len(data) * 3 // 5]
    if fault == "invalid_utf8":
        return _insert_after_message(data, b"\xff\xfe")
    if fault == "lone_surrogate":
        return _insert_after_message(data, b"\\ud800")
    return data


def _insert_after_message(data: bytes, insert: bytes) -> bytes:
    """Insert raw bytes at the start of the message string of step 2."""
    at = data.index(b'"message": "', data.index(b'"step_id": 2')) + len(b'"message": "')
    return data[:at] + insert + data[at:]


# --------------------------------------------------------------------------- trace rows
def damage_row(fault: str | None, row: dict[str, Any]) -> None:
    """Damage a trace row before it is rendered."""
    if fault == "empty_conversation":
        row["conversations"] = []
    elif fault == "unknown_role":
        row["conversations"][min(2, len(row["conversations"]) - 1)]["role"] = "narrator"
    elif fault == "missing_required_field":
        del row["task"]


def damage_line(fault: str | None, line: str) -> str:
    """Damage a rendered trace row (one JSONL line, no newline)."""
    return line[: len(line) // 2] if fault == "unparsable_json" else line
