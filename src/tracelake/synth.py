"""Deterministic synthetic corpus of Harbor-style agent runs: tracelake's embedded sample.

Generates what the terminus-2 agent of Harbor leaves behind, at any scale, from a seed:

    out/<source>/tasks/<task>/{instruction.md, task.toml, environment/Dockerfile,
                               solution/solve.sh, tests/test.sh}
    out/<source>/jobs/<job>/{config.json, result.json}                    (format "harbor")
    out/<source>/jobs/<job>/<task>__<7 chars>/{result.json, verifier/reward.txt,
        agent/trajectory.json, agent/trajectory.cont-1.json (linear-history continuation),
        agent/trajectory.summarization-1-{summary,questions,answers}.json (subagents)}
    out/<source>/traces.jsonl     one published-style trace row per trial  (format "traces"),
                                  then a few extra rows: earlier episodes of some trials
                                  (exports with every episode) and re-published copies
    out/synth_manifest.json       params, per-source counts, injected faults (written last)

Trajectories are ATIF v1.5. Every random choice comes from a `random.Random` seeded by a hash of
(seed, source, what, index), so the same parameters give byte-identical files, and output is
written trial by trial (memory stays flat at 100K+ trials). A few faults (HARBOR_FAULTS,
TRACE_FAULTS) are injected on purpose; the manifest lists each as {source, path, line, fault}
where path is the damaged file, or the trial directory for missing_result_json and
duplicate_trial, and line is the 1-based JSONL line for trace rows.

Curation material, not faults (the filters must deal with them, ingest must keep them): a few
Harbor trials with a flood of terminal output far past a 32K-token context (FLOOD_RATE), and, in
trace tables, earlier-episode rows (EPISODE_RATE) and re-published identical conversations
(REPUBLISH_RATE); the manifest counts them under `extras`.

    uv run python -c "from pathlib import Path; from tracelake.synth import synthesize; \\
        print(synthesize(Path('data/synth'), seed=0, trials=2000, tasks=300))"
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from .synth_text import (
    _C,
    ANSWERS_PREFIX,
    CONFIRM,
    CONTINUE,
    HANDOFF,
    OPENERS,
    PICKUP,
    REASONING,
    STYLE,
    SYSTEM_PROMPT,
)

__all__ = ["DEFAULT_SOURCES", "HARBOR_FAULTS", "TRACE_FAULTS", "SourceSpec", "SynthSummary",
           "synthesize"]

STYLES = ("swesmith", "superuser", "tezos")
FORMATS = ("harbor", "traces")
HARBOR_FAULTS = ("unparsable_json", "missing_result_json", "invalid_utf8", "lone_surrogate",
                 "empty_conversation", "unknown_role", "missing_required_field", "duplicate_trial")
TRACE_FAULTS = ("unparsable_json", "empty_conversation", "unknown_role", "missing_required_field")
FAULT_RATE = 0.015          # harbor faults per trial (at least one of each from 50 trials up)
FLOOD_RATE = 0.006          # harbor trials whose terminal prints ~150K characters at once
EPISODE_RATE = 0.05         # trace rows also exported as an earlier episode
REPUBLISH_RATE = 0.02       # trace rows published twice (another run id, same conversation)
MIN_TRIALS_FOR_ALL_FAULTS = 50
BASE_TIME = datetime(2026, 3, 2, 8, 0, 0)
MODELS = (("glm", "hosted_vllm/glm", "hosted_vllm"),
          ("qwen3-8b", "hosted_vllm/Qwen3-8B", "hosted_vllm"),
          ("gpt-5-mini", "openai/gpt-5-mini", "openai"))
OTHER_ERRORS = ("NonZeroAgentExitCodeError", "VerifierTimeoutError", "RewardFileNotFoundError")
ERROR_MESSAGES = {
    "AgentTimeoutError": "Agent execution timed out after 1800.0 seconds",
    "NonZeroAgentExitCodeError": "Agent command exited with non-zero exit code 137",
    "VerifierTimeoutError": "Verifier execution timed out after 300.0 seconds",
    "RewardFileNotFoundError": "No reward file found at /logs/verifier/reward.txt",
}


@dataclass(frozen=True)
class SourceSpec:
    name: str    # e.g. "swesmith"
    style: str   # "swesmith" | "superuser" | "tezos": task names, instructions, commands
    format: str  # "harbor" (job directories) or "traces" (one JSONL trace table)
    share: float  # fraction of all trials and tasks that belong to this source


@dataclass
class SynthSummary:
    trials: dict[str, int]              # per source: trial dirs (or JSONL rows), faults included
    tasks: dict[str, int]               # per source: task directories written
    faults: dict[str, dict[str, int]]   # per source: fault name -> count injected
    extras: dict[str, dict[str, int]] = field(default_factory=dict)  # per source: curation material


DEFAULT_SOURCES: tuple[SourceSpec, ...] = (
    SourceSpec("swesmith", "swesmith", "harbor", 0.45),
    SourceSpec("superuser", "superuser", "harbor", 0.30),
    SourceSpec("tezos", "tezos", "harbor", 0.15),
    SourceSpec("nl2bash", "superuser", "traces", 0.10),
)



# --------------------------------------------------------------------------- small helpers
def _rng(seed: int, *parts: object) -> random.Random:
    """A Random seeded by a stable hash of (seed, *parts): independent of iteration order."""
    key = "\x1f".join(str(p) for p in (seed, *parts)).encode()
    return random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))


def _apportion(total: int, weights: Sequence[float]) -> list[int]:
    """Split `total` into integers proportional to `weights` (largest remainder, stable ties)."""
    wsum = sum(weights)
    if total <= 0 or wsum <= 0:
        return [0] * len(weights)
    exact = [total * w / wsum for w in weights]
    counts = [math.floor(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (counts[i] - exact[i], i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


def _dumps(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _write(path: Path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="microseconds")


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _lognorm(rng: random.Random, median: float, sigma: float, lo: int, hi: int) -> int:
    return max(lo, min(hi, round(rng.lognormvariate(math.log(median), sigma))))


# --------------------------------------------------------------------------- validation
def _validate(out: Path, trials: int, tasks: int, sources: Sequence[SourceSpec]) -> None:
    if not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials must be an integer >= 1, got {trials!r}")
    if not isinstance(tasks, int) or tasks < 1:
        raise ValueError(f"tasks must be an integer >= 1, got {tasks!r}")
    if not sources:
        raise ValueError("sources must not be empty")
    names = [s.name for s in sources]
    for s in sources:
        if names.count(s.name) > 1:
            raise ValueError(f"duplicate source name {s.name!r}")
        if not s.name or "/" in s.name or s.name.startswith("."):
            raise ValueError(f"invalid source name {s.name!r}")
        if s.style not in STYLES:
            raise ValueError(f"unknown style {s.style!r} for source {s.name!r}; use {STYLES}")
        if s.format not in FORMATS:
            raise ValueError(f"unknown format {s.format!r} for source {s.name!r}; use {FORMATS}")
        if not s.share > 0:
            raise ValueError(f"share must be > 0 for source {s.name!r}, got {s.share!r}")
    total = math.fsum(s.share for s in sources)
    if abs(total - 1.0) > 1e-9:
        raise ValueError(f"source shares must sum to 1, got {total!r}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"output directory exists and is not empty: {out}")


# --------------------------------------------------------------------------- tasks
@dataclass
class _Task:
    name: str
    style: str
    instruction: str
    lines: int
    difficulty: float            # 0 (one-line instruction) .. 1 (40 lines)
    ctx: dict[str, str]
    checksum: str = ""


def _make_task(seed: int, spec: SourceSpec, k: int) -> _Task:
    rng = _rng(seed, spec.name, "task", k)
    data = STYLE[spec.style]
    ctx = {key: rng.choice(values) for key, values in data["ctx"].items()}
    target = _lognorm(rng, 8, 0.9, 1, 40)
    lines = [data["title"].format(**ctx)]
    blocks = data["blocks"][:]
    rng.shuffle(blocks)
    for block in blocks:
        block_lines = [line.format(**ctx) for line in block]
        if len(lines) + 1 + len(block_lines) <= target:
            lines += [""] + block_lines
    name = f"{spec.name}-{k:0{data['digits']}d}"
    return _Task(name, spec.style, "\n".join(lines), len(lines), (len(lines) - 1) / 39, ctx)


def _task_files(task: _Task) -> dict[str, str]:
    level = "easy" if task.lines < 6 else "medium" if task.lines < 16 else "hard"
    toml = (f'version = "1.0"\n\n[metadata]\nauthor_name = "tracelake synth"\ndifficulty = '
            f'"{level}"\ncategory = "{task.style}"\ntags = ["{task.style}", "synthetic"]\n\n'
            f"[verifier]\ntimeout_sec = 300.0\n\n[agent]\ntimeout_sec = 1800.0\n\n[environment]\n"
            f'build_timeout_sec = 600.0\ncpus = 1\nmemory = "2G"\nstorage = "10G"\n')
    workdir = "/testbed" if task.style == "swesmith" else "/app"
    docker = f"FROM {STYLE[task.style]['image']}\n\nWORKDIR {workdir}\n"
    solve = (f"#!/bin/bash\n# Reference solution for {task.name} (synthetic).\nset -euo pipefail\n"
             f"cd {workdir}\necho 'applying fix for {task.name}'\n")
    test = (f"#!/bin/bash\n# Writes 1 or 0 to /logs/verifier/reward.txt.\ncd {workdir}\n"
            f"if {STYLE[task.style]['check']}; then\n  echo 1 > /logs/verifier/reward.txt\n"
            "else\n  echo 0 > /logs/verifier/reward.txt\nfi\n")
    return {"instruction.md": task.instruction + "\n", "task.toml": toml,
            "environment/Dockerfile": docker, "solution/solve.sh": solve, "tests/test.sh": test}


def _write_task(root: Path, task: _Task) -> None:
    digest = hashlib.sha256()
    for rel, text in sorted(_task_files(task).items()):
        _write(root / task.name / rel, text)
        digest.update(rel.encode() + b"\0" + text.encode() + b"\0")
    task.checksum = digest.hexdigest()


# --------------------------------------------------------------------------- trials
@dataclass
class _Turn:
    analysis: str
    plan: str
    commands: list[_C]
    reasoning: str | None
    complete: bool
    prompt_tokens: int
    completion_tokens: int


@dataclass
class _Trial:
    task: _Task
    name: str
    job: int
    model: tuple[str, str, str]
    outcome: str                  # "ok" or an exception type
    reward: float | None
    turns: list[_Turn]
    split: int | None             # turns before the summarization hand-off
    linear: bool                  # hand-off continues in trajectory.cont-1.json
    started: datetime
    finished: datetime
    session_id: str
    trial_id: str
    host: str


def _outcome(rng: random.Random, difficulty: float) -> tuple[str, float | None]:
    u = rng.random()
    if u < 0.10:
        return "AgentTimeoutError", 0.0
    if u < 0.13:
        return rng.choice(OTHER_ERRORS), None
    return "ok", 1.0 if rng.random() < max(0.05, 0.55 - 0.6 * difficulty) else 0.0


def _make_turns(rng: random.Random, task: _Task, n: int, complete: bool, p_reason: float,
                split: int | None) -> list[_Turn]:
    """Agent turns; commands follow the style's workflow order as the run progresses."""
    data, turns = STYLE[task.style], []
    pool = data["commands"]
    for k in range(n):
        final = complete and k == n - 1
        fill = {**task.ctx, "a": str(rng.randint(12, 420)), "b": str(rng.randint(421, 2400)),
                "s": str(rng.randint(1, 9))}
        lo = max(0, min(len(pool) - 4, k * len(pool) // n - 1))
        width = rng.choice((1, 1, 1, 1, 1, 1, 2, 2, 3))
        picks = [] if final else rng.sample(pool[lo:lo + 4], width)
        commands = [(keys.format(**fill), dur, "\n".join(out).format(**fill))
                    for keys, dur, out in picks]
        phase = 3 if final else min(3, 4 * k // n)
        plan = data["plan"][phase].format(**fill)
        if commands and rng.random() < 0.3:
            plan += f" Next I will run `{commands[0][0].strip()[:60]}`."
        reasoning = None
        if rng.random() < p_reason:
            reasoning = f"{rng.choice(REASONING)} {plan}"
        context = k - split if split is not None and k >= split else k
        turns.append(_Turn(
            analysis=rng.choice(OPENERS) + data["analysis"][phase].format(**fill),
            plan="The task is complete." if final else plan,
            commands=commands, reasoning=reasoning, complete=final,
            prompt_tokens=1400 + 420 * context + rng.randint(0, 300),
            completion_tokens=rng.randint(60, 500) + (rng.randint(200, 1200) if reasoning else 0)))
    return turns


def _plan_trial(seed: int, spec: SourceSpec, i: int, task: _Task, n_jobs: int) -> _Trial:
    rng = _rng(seed, spec.name, "trial", i)
    job = rng.randrange(n_jobs)
    outcome, reward = _outcome(rng, task.difficulty)
    if outcome == "AgentTimeoutError":
        n = _lognorm(rng, 20 * (1 + 0.5 * task.difficulty), 0.45, 6, 80)
    else:
        n = _lognorm(rng, 9 * (1 + 0.8 * task.difficulty), 0.72, 1, 80)
    split = rng.randint(n // 3, 2 * n // 3) if n >= 16 and rng.random() < 0.27 else None
    linear = split is not None and rng.random() < 0.5
    complete = outcome not in ("AgentTimeoutError", "NonZeroAgentExitCodeError")
    turns = _make_turns(rng, task, n, complete, 1.0 if spec.format == "traces" else 0.3, split)
    if spec.format == "harbor" and n >= 3 and _rng(seed, spec.name, "flood", i).random() < FLOOD_RATE:
        turns[1] = _flood(turns[1], _rng(seed, spec.name, "flood-text", i))
    suffix = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
                     for _ in range(7))
    started = BASE_TIME + timedelta(days=2 * job, seconds=rng.randint(0, 3 * 86400),
                                    microseconds=rng.randint(0, 999999))
    seconds = 1800 if outcome == "AgentTimeoutError" else 60 + n * rng.randint(8, 40)
    return _Trial(task, f"{task.name}__{suffix}", job, MODELS[job % len(MODELS)], outcome,
                  reward, turns, split, linear, started,
                  started + timedelta(seconds=seconds + rng.randint(30, 120)), _uuid(rng),
                  _uuid(rng), f"{rng.getrandbits(48):012x}")


def _flood(turn: _Turn, rng: random.Random) -> _Turn:
    """The turn's first command prints a huge log (an unbounded `cat`, a verbose build)."""
    lines = [f"[{rng.randint(0, 99999):05d}] worker-{rng.randint(1, 64)}: processed batch "
             f"{k} checksum {rng.getrandbits(64):016x} status={rng.choice(('ok', 'retry', 'ok', 'skip'))}"
             for k in range(2400)]
    flood = ("cat /var/log/build/full.log\n", 5.0, "\n".join(lines))
    return _Turn(turn.analysis, turn.plan, [flood, *turn.commands[1:]], turn.reasoning, turn.complete,
                 turn.prompt_tokens, turn.completion_tokens)


# --------------------------------------------------------------------------- ATIF rendering
def _observation(trial: _Trial, turn: _Turn) -> str:
    prompt = STYLE[trial.task.style]["prompt"].format(host=trial.host)
    if turn.complete:
        return CONFIRM.format(prompt=prompt)
    parts = [f"{prompt}{keys}{out}\n" if out else f"{prompt}{keys}"
             for keys, _, out in turn.commands]
    return "New Terminal Output:\n\n" + "".join(parts) + prompt


def _first_message(trial: _Trial) -> str:
    prompt = STYLE[trial.task.style]["prompt"].format(host=trial.host)
    return SYSTEM_PROMPT.format(instruction=trial.task.instruction, prompt=prompt)


def _agent_step(trial: _Trial, turn: _Turn, k: int, copied: bool = False) -> dict[str, Any]:
    step: dict[str, Any] = {"source": "agent", "model_name": trial.model[1],
                            "message": f"Analysis: {turn.analysis}\nPlan: {turn.plan}"}
    if turn.reasoning:
        step["reasoning_content"] = turn.reasoning
    if turn.complete:
        step["tool_calls"] = [{"tool_call_id": f"call_{k}_task_complete",
                               "function_name": "mark_task_complete", "arguments": {}}]
    else:
        step["tool_calls"] = [{"tool_call_id": f"call_{k}_{j + 1}",
                               "function_name": "bash_command",
                               "arguments": {"keystrokes": keys, "duration": dur}}
                              for j, (keys, dur, _) in enumerate(turn.commands)]
    step["observation"] = {"results": [{"content": _observation(trial, turn)}]}
    if copied:
        step["is_copied_context"] = True
        step["extra"] = {"note": "Metrics omitted to avoid duplication - already recorded in "
                                 "parent trajectory"}
    else:
        step["metrics"] = {"prompt_tokens": turn.prompt_tokens,
                           "completion_tokens": turn.completion_tokens}
    return step


def _text_step(source: str, message: str, model: str | None = None,
               copied: bool = False, tokens: tuple[int, int] | None = None) -> dict[str, Any]:
    step: dict[str, Any] = {"source": source}
    if model:
        step["model_name"] = model
    step["message"] = message
    if copied:
        step["is_copied_context"] = True
    if tokens:
        step["metrics"] = {"prompt_tokens": tokens[0], "completion_tokens": tokens[1]}
    return step


def _atif(trial: _Trial, steps: list[dict[str, Any]], session: str, name: str = "terminus-2",
          extra: dict[str, Any] | None = None) -> dict[str, Any]:
    for n, step in enumerate(steps, 1):
        step_id = {"step_id": n}
        step_id.update(step)
        steps[n - 1] = step_id
    metrics = [s["metrics"] for s in steps if "metrics" in s]
    totals = {"total_prompt_tokens": sum(m["prompt_tokens"] for m in metrics),
              "total_completion_tokens": sum(m["completion_tokens"] for m in metrics),
              "total_cached_tokens": 0}
    return {"schema_version": "ATIF-v1.5", "session_id": session,
            "agent": {"name": name, "version": "2.0.0", "model_name": trial.model[1],
                      "extra": extra or {"parser": "json", "temperature": 0.7}},
            "steps": steps, "final_metrics": totals}


def _handoff_texts(trial: _Trial) -> tuple[str, str, str]:
    """(summary, questions, answers) written by the summarization subagents."""
    done = [keys.strip() for t in trial.turns[: trial.split] for keys, _, _ in t.commands][-4:]
    actions = "\n".join(f"   - Ran `{c}`" for c in done) or "   - Explored the environment"
    summary = (f"1. **Major Actions Completed**:\n{actions}\n\n2. **Current Status**:\n   - "
               f"{trial.turns[trial.split - 1].analysis}")
    questions = ("1. Which files have been modified so far?\n2. Did the last command succeed?\n"
                 "3. Are there any errors I should be aware of?\n4. What remains to be done?")
    answers = (f"1. See the actions listed above; the last was `{done[-1] if done else 'ls'}`.\n"
               "2. Yes.\n3. None besides the original failure.\n4. Verify and finish the task.")
    return summary, questions, answers


def _subagents(trial: _Trial, texts: tuple[str, str, str]) -> dict[str, dict[str, Any]]:
    summary, questions, answers = texts
    model, first = trial.model[1], _first_message(trial)
    handoff = HANDOFF.format(instruction=trial.task.instruction)
    pickup = PICKUP.format(instruction=trial.task.instruction, summary=summary)
    recent = [_agent_step(trial, t, k, copied=True)
              for k, t in enumerate(trial.turns[: trial.split]) if k >= trial.split - 2]
    seq = {"summary": [_text_step("user", first, copied=True), *recent,
                       _text_step("user", handoff),
                       _text_step("agent", summary, model, tokens=(3000, 400))],
           "questions": [_text_step("user", pickup),
                         _text_step("agent", questions, model, tokens=(900, 120))],
           "answers": [_text_step("user", first, copied=True), *recent,
                       _text_step("user", handoff, copied=True),
                       _text_step("agent", summary, model, copied=True),
                       _text_step("user", "The next agent has a few questions for you, please "
                                  "answer each of them one by one in detail:\n\n" + questions),
                       _text_step("agent", answers, model, tokens=(3400, 300))]}
    extra = {"parent_session_id": trial.session_id, "summarization_index": 1}
    return {f"agent/trajectory.summarization-1-{kind}.json":
            _atif(trial, steps, f"{trial.session_id}-summarization-1-{kind}",
                  f"terminus-2-summarization-{kind}", extra)
            for kind, steps in seq.items()}


def _trajectories(trial: _Trial) -> dict[str, dict[str, Any]]:
    """All ATIF files of one trial, keyed by path relative to the trial directory."""
    turns, split, model = trial.turns, trial.split, trial.model[1]
    first = _text_step("user", _first_message(trial))
    steps = [_agent_step(trial, t, k) for k, t in enumerate(turns)]
    if split is None:
        return {"agent/trajectory.json": _atif(trial, [first, *steps], trial.session_id)}
    texts = _handoff_texts(trial)
    refs = [{"session_id": f"{trial.session_id}-summarization-1-{kind}",
             "trajectory_path": f"trajectory.summarization-1-{kind}.json",
             "extra": {"summary": f"Context summarization 1: {label}"}}
            for kind, label in (("summary", "Step 1 - Summary generation"),
                                ("questions", "Step 2 - Question asking"),
                                ("answers", "Step 3 - Answer providing"))]
    hand = _text_step("system", "Performed context summarization and handoff to continue task.")
    hand["observation"] = {"results": [{"subagent_trajectory_ref": refs}]}
    answers = _text_step("user", ANSWERS_PREFIX + texts[2] + CONTINUE)
    files = _subagents(trial, texts)
    if not trial.linear:
        files["agent/trajectory.json"] = _atif(trial, [first, *steps[:split], hand, answers,
                                                       *steps[split:]], trial.session_id)
        return files
    main = _atif(trial, [first, *steps[:split], hand], trial.session_id)
    main["continued_trajectory_ref"] = "trajectory.cont-1.json"
    pickup = PICKUP.format(instruction=trial.task.instruction, summary=texts[0])
    copied = [_text_step("user", _first_message(trial), copied=True),
              _text_step("user", pickup, copied=True),
              _text_step("agent", texts[1], model, copied=True),
              {**answers, "is_copied_context": True}]
    cont = _atif(trial, [*copied, *steps[split:]], trial.session_id,
                 extra={"parser": "json", "temperature": 0.7, "continuation_index": 1})
    files.update({"agent/trajectory.json": main, "agent/trajectory.cont-1.json": cont})
    return files


# --------------------------------------------------------------------------- harbor output
def _result_json(trial: _Trial, job_name: str, source: str) -> dict[str, Any]:
    exc = None
    if trial.outcome != "ok":
        exc = {"exception_type": trial.outcome,
               "exception_message": ERROR_MESSAGES[trial.outcome],
               "exception_traceback": ("Traceback (most recent call last):\n  File \"harbor/trial/"
                                       f"trial.py\", line 241, in run\n{trial.outcome}: "
                                       f"{ERROR_MESSAGES[trial.outcome]}\n"),
               "occurred_at": _iso(trial.finished - timedelta(seconds=5))}
    return {"id": trial.trial_id, "task_name": trial.task.name, "trial_name": trial.name,
            "trial_uri": f"file:///data/harbor/jobs/{job_name}/{trial.name}",
            "task_checksum": trial.task.checksum,
            "config": {"job_id": job_name, "agent": {"name": "terminus-2",
                                                      "model_name": trial.model[1]},
                       "task": {"path": f"{source}/tasks/{trial.task.name}"}},
            "agent_info": {"name": "terminus-2", "version": "2.0.0",
                           "model_info": {"name": trial.model[0], "provider": trial.model[2]}},
            "agent_result": {"n_input_tokens": sum(t.prompt_tokens for t in trial.turns),
                             "n_output_tokens": sum(t.completion_tokens for t in trial.turns)},
            "verifier_result": (None if trial.reward is None
                                else {"rewards": {"reward": trial.reward}}),
            "exception_info": exc, "started_at": _iso(trial.started),
            "finished_at": _iso(trial.finished)}


def _insert_after_message(data: bytes, insert: bytes) -> bytes:
    """Insert raw bytes at the start of the message string of step 2."""
    at = data.index(b'"message": "', data.index(b'"step_id": 2')) + len(b'"message": "')
    return data[:at] + insert + data[at:]


def _apply_object_fault(fault: str, objs: dict[str, Any]) -> None:
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


def _apply_byte_fault(fault: str, data: bytes) -> bytes:
    if fault == "unparsable_json":
        return data[: len(data) * 3 // 5]
    if fault == "invalid_utf8":
        return _insert_after_message(data, b"\xff\xfe")
    if fault == "lone_surrogate":
        return _insert_after_message(data, b"\\ud800")
    return data


def _write_harbor_trial(trial_dir: Path, trial: _Trial, job_name: str, source: str,
                        fault: str | None) -> None:
    objs: dict[str, Any] = {"result.json": _result_json(trial, job_name, source)}
    objs.update(_trajectories(trial))
    if fault:
        _apply_object_fault(fault, objs)
    for rel, obj in objs.items():
        data = _dumps(obj)
        if fault and rel == "agent/trajectory.json":
            data = _apply_byte_fault(fault, data)
        _write(trial_dir / rel, data)
    if trial.reward is not None:
        _write(trial_dir / "verifier" / "reward.txt", f"{int(trial.reward)}\n")


@dataclass
class _JobStats:
    n_trials: int = 0
    n_errors: int = 0
    rewards: dict[str, int] = field(default_factory=dict)
    exceptions: dict[str, int] = field(default_factory=dict)
    started: datetime | None = None
    finished: datetime | None = None

    def add(self, trial: _Trial) -> None:
        self.n_trials += 1
        if trial.outcome != "ok":
            self.n_errors += 1
            self.exceptions[trial.outcome] = self.exceptions.get(trial.outcome, 0) + 1
        if trial.reward is not None:
            key = f"{trial.reward:.1f}"
            self.rewards[key] = self.rewards.get(key, 0) + 1
        self.started = min(self.started or trial.started, trial.started)
        self.finished = max(self.finished or trial.finished, trial.finished)


def _write_job(job_dir: Path, seed: int, source: str, j: int, stats: _JobStats) -> None:
    model = MODELS[j % len(MODELS)]
    config = {"job_name": job_dir.name, "jobs_dir": "jobs", "n_attempts": 1,
              "timeout_multiplier": 1.0,
              "orchestrator": {"type": "local", "n_concurrent_trials": 32},
              "agents": [{"name": "terminus-2", "model_name": model[1],
                          "kwargs": {"parser": "json", "temperature": 0.7}}],
              "datasets": [{"path": f"{source}/tasks"}]}
    n_scored = sum(stats.rewards.values())
    mean = round(stats.rewards.get("1.0", 0) / n_scored, 6) if n_scored else 0.0
    start = stats.started or BASE_TIME + timedelta(days=2 * j)
    result = {"id": _uuid(_rng(seed, source, "job", j)), "started_at": _iso(start),
              "finished_at": _iso(stats.finished or start), "n_total_trials": stats.n_trials,
              "stats": {"n_trials": stats.n_trials, "n_errors": stats.n_errors,
                        "evals": {f"terminus-2__{model[0]}__{source}": {
                            "n_trials": stats.n_trials, "n_errors": stats.n_errors,
                            "metrics": [{"mean": mean}],
                            "reward_stats": {"reward": dict(sorted(stats.rewards.items()))},
                            "exception_stats": dict(sorted(stats.exceptions.items()))}}}}
    _write(job_dir / "config.json", _dumps(config))
    _write(job_dir / "result.json", _dumps(result))


# --------------------------------------------------------------------------- trace rows
def _assistant_text(turn: _Turn) -> str:
    body = {"analysis": turn.analysis, "plan": turn.plan,
            "commands": [{"keystrokes": k, "duration": d} for k, d, _ in turn.commands],
            "task_complete": turn.complete}
    return f"<think>{turn.reasoning or ''}</think>" + json.dumps(body, indent=2, ensure_ascii=False)


def _trace_row(trial: _Trial, rng: random.Random) -> dict[str, Any]:
    turns = trial.turns[: trial.split] if trial.split else trial.turns
    convo = [{"role": "user", "content": _first_message(trial)}]
    for k, turn in enumerate(turns):
        if k:
            warn = ("Previous response had warnings:\nWARNINGS: - Extra text detected before JSON "
                    "object\n\n") if rng.random() < 0.2 else ""
            convo.append({"role": "user", "content": warn + _observation(trial, turns[k - 1])})
        convo.append({"role": "assistant", "content": _assistant_text(turn)})
    if trial.split:
        summary = _handoff_texts(trial)[0]
        convo += [{"role": "user", "content": HANDOFF.format(instruction=trial.task.instruction)},
                  {"role": "assistant", "content": f"<think>{REASONING[0]}</think>{summary}"}]
    result = {"ok": f"{trial.reward}", "AgentTimeoutError": "AgentTimeoutError"}.get(trial.outcome)
    return {"agent": "terminus-2", "conversations": convo, "date": _iso(trial.finished) + "+00:00",
            "episode": "episode-0" if trial.split else f"episode-{len(turns) - 1}",
            "model": trial.model[1], "model_provider": trial.model[2],
            "result": None if rng.random() < 0.25 else result, "run_id": trial.trial_id,
            "task": trial.task.name,
            "trace_source": "summarization-1-summary" if trial.split else "main",
            "trial_name": trial.name}


def _trace_line(trial: _Trial, fault: str | None) -> str:
    row = _trace_row(trial, _rng(trial.session_id, "row"))
    if fault == "empty_conversation":
        row["conversations"] = []
    elif fault == "unknown_role":
        row["conversations"][min(2, len(row["conversations"]) - 1)]["role"] = "narrator"
    elif fault == "missing_required_field":
        del row["task"]
    line = json.dumps(row, ensure_ascii=False)
    return line[: len(line) // 2] if fault == "unparsable_json" else line


# --------------------------------------------------------------------------- driver
def _plan_faults(seed: int, spec: SourceSpec, n: int) -> dict[int, str]:
    """Trial index -> fault name. Index 0 is never faulty (duplicates copy a clean trial)."""
    names = HARBOR_FAULTS if spec.format == "harbor" else TRACE_FAULTS
    if n >= MIN_TRIALS_FOR_ALL_FAULTS:
        k = max(len(names), round(FAULT_RATE * n)) if spec.format == "harbor" else len(names)
    else:
        k = min(round(FAULT_RATE * n), len(names))
    rng = _rng(seed, spec.name, "faults")
    chosen = [names[j % len(names)] for j in range(k)]
    rng.shuffle(chosen)
    return dict(zip(sorted(rng.sample(range(1, n), k)) if k else [], chosen, strict=True))


def _allocate(trials: int, tasks: int, sources: Sequence[SourceSpec]) -> list[tuple[int, int]]:
    """Per source (trials, tasks); with trials >= tasks every source has trials >= tasks."""
    n_tasks = _apportion(tasks, [s.share for s in sources])
    shares = [s.share if t else 0.0 for s, t in zip(sources, n_tasks, strict=True)]
    if trials >= tasks:
        n_trials = [t + x for t, x in zip(n_tasks, _apportion(trials - tasks, shares), strict=True)]
    else:
        n_trials = _apportion(trials, shares)
    return list(zip(n_trials, n_tasks, strict=True))


def _rollouts(seed: int, spec: SourceSpec, n_trials: int, n_tasks: int) -> list[int]:
    """Uneven trials per task (lognormal weights); >= 1 each when n_trials >= n_tasks."""
    rng = _rng(seed, spec.name, "rollouts")
    weights = [rng.lognormvariate(0, 1.1) for _ in range(n_tasks)]
    if n_trials >= n_tasks:
        return [1 + x for x in _apportion(n_trials - n_tasks, weights)]
    return _apportion(n_trials, weights)


class _SourceWriter:
    """Writes one source trial by trial; holds only per-job counters and the last clean trial."""

    def __init__(self, out: Path, seed: int, spec: SourceSpec, n_trials: int,
                 faults: list[dict[str, Any]]) -> None:
        self.out, self.seed, self.spec, self.faults = out, seed, spec, faults
        self.root = out / spec.name
        self.plan = _plan_faults(seed, spec, n_trials)
        n_jobs = 2 + _rng(seed, spec.name, "jobs").randrange(3)
        self.jobs = [f"{spec.name}-{MODELS[j % len(MODELS)][0]}-{j}" for j in range(n_jobs)]
        self.stats = [_JobStats() for _ in self.jobs]
        self.last_clean: tuple[Path, int] | None = None
        self.extra_rows: list[dict[str, Any]] = []
        self.extras = {"flood": 0} if spec.format == "harbor" else {"earlier_episode": 0, "republished": 0}
        self.traces = None
        if spec.format == "traces":
            self.root.mkdir(parents=True, exist_ok=True)
            self.traces = (self.root / "traces.jsonl").open("w", encoding="utf-8", newline="\n")

    def _record(self, path: str, line: int | None, fault: str) -> None:
        self.faults.append({"source": self.spec.name, "path": path, "line": line, "fault": fault})

    def write(self, i: int, task: _Task) -> None:
        fault = self.plan.get(i)
        if fault == "duplicate_trial" and self.last_clean:
            src, j = self.last_clean
            dst = self.root / "jobs" / self.jobs[(j + 1) % len(self.jobs)] / src.name
            shutil.copytree(src, dst)
            return self._record(dst.relative_to(self.out).as_posix(), None, fault)
        fault = None if fault == "duplicate_trial" else fault
        trial = _plan_trial(self.seed, self.spec, i, task, len(self.jobs))
        if self.traces is not None:
            self.traces.write(_trace_line(trial, fault) + "\n")
            if fault:
                self._record(f"{self.spec.name}/traces.jsonl", i + 1, fault)
            else:
                self._plan_extras(trial, i)
            return None
        if trial.turns[1:2] and trial.turns[1].commands[:1] and len(trial.turns[1].commands[0][2]) > 100_000:
            self.extras["flood"] += 1
        job = self.jobs[trial.job]
        trial_dir = self.root / "jobs" / job / trial.name
        _write_harbor_trial(trial_dir, trial, job, self.spec.name, fault)
        self.stats[trial.job].add(trial)
        if fault:
            rel = _fault_path(trial_dir.relative_to(self.out).as_posix(), fault)
            self._record(rel, None, fault)
        else:
            self.last_clean = (trial_dir, trial.job)
        return None

    def _plan_extras(self, trial: _Trial, i: int) -> None:
        """Earlier-episode and re-published rows of this trial, written after every trial row."""
        rng = _rng(self.seed, self.spec.name, "extras", i)
        row = _trace_row(trial, _rng(trial.session_id, "row"))
        n_turns = sum(m["role"] == "assistant" for m in row["conversations"])
        if row["trace_source"] == "main" and n_turns >= 4 and rng.random() < EPISODE_RATE:
            j = rng.randint(1, n_turns - 2)
            self.extra_rows.append({**row, "conversations": row["conversations"][: 2 * (j + 1)],
                                    "episode": f"episode-{j}"})
            self.extras["earlier_episode"] += 1
        if rng.random() < REPUBLISH_RATE:
            self.extra_rows.append({**row, "run_id": _uuid(rng), "trial_name": f"{row['trial_name']}-r1"})
            self.extras["republished"] += 1

    def close(self) -> None:
        if self.traces is not None:
            for row in self.extra_rows:
                self.traces.write(json.dumps(row, ensure_ascii=False) + "\n")
            self.traces.close()
            return
        for j, job in enumerate(self.jobs):
            if (self.root / "jobs" / job).is_dir():  # jobs that received no trial stay absent
                _write_job(self.root / "jobs" / job, self.seed, self.spec.name, j, self.stats[j])


def _run_source(out: Path, seed: int, spec: SourceSpec, n_trials: int, n_tasks: int,
                faults: list[dict[str, Any]], progress: Callable[[int], None] | None) -> dict[str, int]:
    writer = _SourceWriter(out, seed, spec, n_trials, faults)
    i = 0
    try:
        for k, count in enumerate(_rollouts(seed, spec, n_trials, n_tasks)):
            task = _make_task(seed, spec, k)
            _write_task(out / spec.name / "tasks", task)
            for _ in range(count):
                writer.write(i, task)
                i += 1
                if progress:
                    progress(1)
    finally:
        writer.close()
    return writer.extras


def _fault_path(trial_rel: str, fault: str | None) -> str:
    if fault in ("missing_result_json", None):
        return trial_rel
    if fault == "missing_required_field":
        return f"{trial_rel}/result.json"
    return f"{trial_rel}/agent/trajectory.json"


def synthesize(out: Path, *, seed: int = 0, trials: int = 2000, tasks: int = 300,
               sources: Sequence[SourceSpec] = DEFAULT_SOURCES,
               progress: Callable[[int], None] | None = None) -> SynthSummary:
    """Write the synthetic corpus under `out` (must be absent or empty); see the module doc."""
    out = Path(out)
    _validate(out, trials, tasks, sources)
    out.mkdir(parents=True, exist_ok=True)
    faults: list[dict[str, Any]] = []
    summary = SynthSummary({}, {}, {})
    for spec, (n_trials, n_tasks) in zip(sources, _allocate(trials, tasks, sources), strict=True):
        summary.extras[spec.name] = _run_source(out, seed, spec, n_trials, n_tasks, faults, progress)
        counts: dict[str, int] = {}
        for f in faults:
            if f["source"] == spec.name:
                counts[f["fault"]] = counts.get(f["fault"], 0) + 1
        summary.trials[spec.name], summary.tasks[spec.name] = n_trials, n_tasks
        summary.faults[spec.name] = dict(sorted(counts.items()))
    faults.sort(key=lambda f: (f["path"], f["line"] or 0))
    manifest = {"generator": "tracelake.synth", "schema": 1,
                "params": {"seed": seed, "trials": trials, "tasks": tasks,
                           "sources": [asdict(s) for s in sources]},
                "counts": {name: {"trials": summary.trials[name], "tasks": summary.tasks[name],
                                  "faults": summary.faults[name], "extras": summary.extras[name]}
                           for name in summary.trials},
                "faults": faults}
    _write(out / "synth_manifest.json", _dumps(manifest))
    return summary
