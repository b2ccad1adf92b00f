"""The trace table of a traces-format source: out/<source>/traces.jsonl, as OpenThoughts-style
trace datasets publish agent runs.

One row per trial (its conversation up to the summarization hand-off, if any), in trial order;
then, after every trial row, a few extra rows that are curation material, not faults: earlier
episodes of some trials (exports with every episode, EPISODE_RATE) and re-published copies under
another run id (REPUBLISH_RATE). Damaged rows (faults.py) are listed in the manifest by line.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from tracelake.sample.common import SourceSpec, iso, seeded, uuid4
from tracelake.sample.faults import damage_line, damage_row, plan_faults
from tracelake.sample.tasks import Task
from tracelake.sample.text import HANDOFF, REASONING
from tracelake.sample.trials import (
    Trial,
    Turn,
    first_message,
    handoff_texts,
    job_names,
    observation,
    plan_trial,
)

EPISODE_RATE = 0.05  # trace rows also exported as an earlier episode
REPUBLISH_RATE = 0.02  # trace rows published twice (another run id, same conversation)


def _assistant_text(turn: Turn) -> str:
    body = {
        "analysis": turn.analysis,
        "plan": turn.plan,
        "commands": [{"keystrokes": k, "duration": d} for k, d, _ in turn.commands],
        "task_complete": turn.complete,
    }
    return f"<think>{turn.reasoning or ''}</think>" + json.dumps(body, indent=2, ensure_ascii=False)


def _trace_row(trial: Trial, rng: random.Random) -> dict[str, Any]:
    turns = trial.turns[: trial.split] if trial.split else trial.turns
    convo = [{"role": "user", "content": first_message(trial)}]
    for k, turn in enumerate(turns):
        if k:
            warn = (
                ("Previous response had warnings:\nWARNINGS: - Extra text detected before JSON object\n\n")
                if rng.random() < 0.2
                else ""
            )
            convo.append({"role": "user", "content": warn + observation(trial, turns[k - 1])})
        convo.append({"role": "assistant", "content": _assistant_text(turn)})
    if trial.split:
        summary = handoff_texts(trial)[0]
        convo += [
            {"role": "user", "content": HANDOFF.format(instruction=trial.task.instruction)},
            {"role": "assistant", "content": f"<think>{REASONING[0]}</think>{summary}"},
        ]
    result = {"ok": f"{trial.reward}", "AgentTimeoutError": "AgentTimeoutError"}.get(trial.outcome)
    return {
        "agent": "terminus-2",
        "conversations": convo,
        "date": iso(trial.finished) + "+00:00",
        "episode": "episode-0" if trial.split else f"episode-{len(turns) - 1}",
        "model": trial.model[1],
        "model_provider": trial.model[2],
        "result": None if rng.random() < 0.25 else result,
        "run_id": trial.trial_id,
        "task": trial.task.name,
        "trace_source": "summarization-1-summary" if trial.split else "main",
        "trial_name": trial.name,
    }


def _trace_line(trial: Trial, fault: str | None) -> str:
    row = _trace_row(trial, seeded(trial.session_id, "row"))
    damage_row(fault, row)
    return damage_line(fault, json.dumps(row, ensure_ascii=False))


class TraceWriter:
    """Writes one traces source row by row; holds the extra rows until `close`."""

    def __init__(self, out: Path, seed: int, spec: SourceSpec, n_trials: int, faults: list[dict[str, Any]]) -> None:
        self.seed, self.spec, self.faults = seed, spec, faults
        self.plan = plan_faults(seed, spec, n_trials)
        self.n_jobs = len(job_names(seed, spec))  # trials are planned as for harbor sources
        self.extra_rows: list[dict[str, Any]] = []
        self.extras = {"earlier_episode": 0, "republished": 0}
        root = out / spec.name
        root.mkdir(parents=True, exist_ok=True)
        self.traces = (root / "traces.jsonl").open("w", encoding="utf-8", newline="\n")

    def write(self, i: int, task: Task) -> None:
        fault = self.plan.get(i)
        trial = plan_trial(self.seed, self.spec, i, task, self.n_jobs)
        self.traces.write(_trace_line(trial, fault) + "\n")
        if fault:
            self.faults.append(
                {"source": self.spec.name, "path": f"{self.spec.name}/traces.jsonl", "line": i + 1, "fault": fault}
            )
        else:
            self._plan_extras(trial, i)

    def _plan_extras(self, trial: Trial, i: int) -> None:
        """Earlier-episode and re-published rows of this trial, written after every trial row."""
        rng = seeded(self.seed, self.spec.name, "extras", i)
        row = _trace_row(trial, seeded(trial.session_id, "row"))
        n_turns = sum(m["role"] == "assistant" for m in row["conversations"])
        if row["trace_source"] == "main" and n_turns >= 4 and rng.random() < EPISODE_RATE:
            j = rng.randint(1, n_turns - 2)
            self.extra_rows.append(
                {**row, "conversations": row["conversations"][: 2 * (j + 1)], "episode": f"episode-{j}"}
            )
            self.extras["earlier_episode"] += 1
        if rng.random() < REPUBLISH_RATE:
            self.extra_rows.append({**row, "run_id": uuid4(rng), "trial_name": f"{row['trial_name']}-r1"})
            self.extras["republished"] += 1

    def close(self) -> None:
        for row in self.extra_rows:
            self.traces.write(json.dumps(row, ensure_ascii=False) + "\n")
        self.traces.close()
