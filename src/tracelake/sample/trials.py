"""One planned trial (an agent run on a task), before it is written in any format; writes nothing.

`plan_trial` draws everything about a trial (job, outcome, reward, turns with their commands and
outputs, a summarization hand-off, times, ids) from its own seeded Random, in a fixed order: the
Harbor writer (harbor.py) and the trace-table writer (traces.py) render the same plan. The text
both of them show the model (first message, terminal observations, hand-off summary) is here too.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from tracelake.sample.common import BASE_TIME, MODELS, SourceSpec, lognorm, seeded, uuid4
from tracelake.sample.tasks import Task
from tracelake.sample.text import _C, CONFIRM, OPENERS, REASONING, STYLE, SYSTEM_PROMPT

FLOOD_RATE = 0.006  # harbor trials whose terminal prints ~150K characters at once
OTHER_ERRORS = ("NonZeroAgentExitCodeError", "VerifierTimeoutError", "RewardFileNotFoundError")


@dataclass
class Turn:
    analysis: str
    plan: str
    commands: list[_C]
    reasoning: str | None
    complete: bool
    prompt_tokens: int
    completion_tokens: int


@dataclass
class Trial:
    task: Task
    name: str
    job: int
    model: tuple[str, str, str]
    outcome: str  # "ok" or an exception type
    reward: float | None
    turns: list[Turn]
    split: int | None  # turns before the summarization hand-off
    linear: bool  # hand-off continues in trajectory.cont-1.json
    started: datetime
    finished: datetime
    session_id: str
    trial_id: str
    host: str


def job_names(seed: int, spec: SourceSpec) -> list[str]:
    """The source's 2 to 4 jobs, one model each (trace sources draw them too: same plans)."""
    n_jobs = 2 + seeded(seed, spec.name, "jobs").randrange(3)
    return [f"{spec.name}-{MODELS[j % len(MODELS)][0]}-{j}" for j in range(n_jobs)]


def _outcome(rng: random.Random, difficulty: float) -> tuple[str, float | None]:
    u = rng.random()
    if u < 0.10:
        return "AgentTimeoutError", 0.0
    if u < 0.13:
        return rng.choice(OTHER_ERRORS), None
    return "ok", 1.0 if rng.random() < max(0.05, 0.55 - 0.6 * difficulty) else 0.0


def _make_turns(
    rng: random.Random, task: Task, n: int, complete: bool, p_reason: float, split: int | None
) -> list[Turn]:
    """Agent turns; commands follow the style's workflow order as the run progresses."""
    data, turns = STYLE[task.style], []
    pool = data["commands"]
    for k in range(n):
        final = complete and k == n - 1
        fill = {
            **task.ctx,
            "a": str(rng.randint(12, 420)),
            "b": str(rng.randint(421, 2400)),
            "s": str(rng.randint(1, 9)),
        }
        lo = max(0, min(len(pool) - 4, k * len(pool) // n - 1))
        width = rng.choice((1, 1, 1, 1, 1, 1, 2, 2, 3))
        picks = [] if final else rng.sample(pool[lo : lo + 4], width)
        commands = [(keys.format(**fill), dur, "\n".join(out).format(**fill)) for keys, dur, out in picks]
        phase = 3 if final else min(3, 4 * k // n)
        plan = data["plan"][phase].format(**fill)
        if commands and rng.random() < 0.3:
            plan += f" Next I will run `{commands[0][0].strip()[:60]}`."
        reasoning = None
        if rng.random() < p_reason:
            reasoning = f"{rng.choice(REASONING)} {plan}"
        context = k - split if split is not None and k >= split else k
        turns.append(
            Turn(
                analysis=rng.choice(OPENERS) + data["analysis"][phase].format(**fill),
                plan="The task is complete." if final else plan,
                commands=commands,
                reasoning=reasoning,
                complete=final,
                prompt_tokens=1400 + 420 * context + rng.randint(0, 300),
                completion_tokens=rng.randint(60, 500) + (rng.randint(200, 1200) if reasoning else 0),
            )
        )
    return turns


def plan_trial(seed: int, spec: SourceSpec, i: int, task: Task, n_jobs: int) -> Trial:
    rng = seeded(seed, spec.name, "trial", i)
    job = rng.randrange(n_jobs)
    outcome, reward = _outcome(rng, task.difficulty)
    if outcome == "AgentTimeoutError":
        n = lognorm(rng, 20 * (1 + 0.5 * task.difficulty), 0.45, 6, 80)
    else:
        n = lognorm(rng, 9 * (1 + 0.8 * task.difficulty), 0.72, 1, 80)
    split = rng.randint(n // 3, 2 * n // 3) if n >= 16 and rng.random() < 0.27 else None
    linear = split is not None and rng.random() < 0.5
    complete = outcome not in ("AgentTimeoutError", "NonZeroAgentExitCodeError")
    turns = _make_turns(rng, task, n, complete, 1.0 if spec.format == "traces" else 0.3, split)
    flood = spec.format == "harbor" and n >= 3
    if flood and seeded(seed, spec.name, "flood", i).random() < FLOOD_RATE:
        turns[1] = _flood(turns[1], seeded(seed, spec.name, "flood-text", i))
    suffix = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") for _ in range(7))
    started = BASE_TIME + timedelta(
        days=2 * job, seconds=rng.randint(0, 3 * 86400), microseconds=rng.randint(0, 999999)
    )
    seconds = 1800 if outcome == "AgentTimeoutError" else 60 + n * rng.randint(8, 40)
    return Trial(
        task,
        f"{task.name}__{suffix}",
        job,
        MODELS[job % len(MODELS)],
        outcome,
        reward,
        turns,
        split,
        linear,
        started,
        started + timedelta(seconds=seconds + rng.randint(30, 120)),
        uuid4(rng),
        uuid4(rng),
        f"{rng.getrandbits(48):012x}",
    )


def is_flooded(trial: Trial) -> bool:
    """Whether the trial's second turn prints the flood (curation material, counted in extras)."""
    return bool(trial.turns[1:2] and trial.turns[1].commands[:1] and len(trial.turns[1].commands[0][2]) > 100_000)


def _flood(turn: Turn, rng: random.Random) -> Turn:
    """The turn's first command prints a huge log (an unbounded `cat`, a verbose build)."""
    lines = [
        f"[{rng.randint(0, 99999):05d}] worker-{rng.randint(1, 64)}: processed batch "
        f"{k} checksum {rng.getrandbits(64):016x} "
        f"status={rng.choice(('ok', 'retry', 'ok', 'skip'))}"
        for k in range(2400)
    ]
    flood = ("cat /var/log/build/full.log\n", 5.0, "\n".join(lines))
    return Turn(
        turn.analysis,
        turn.plan,
        [flood, *turn.commands[1:]],
        turn.reasoning,
        turn.complete,
        turn.prompt_tokens,
        turn.completion_tokens,
    )


# --------------------------------------------------------------------------- what the model sees
def observation(trial: Trial, turn: Turn) -> str:
    prompt = STYLE[trial.task.style]["prompt"].format(host=trial.host)
    if turn.complete:
        return CONFIRM.format(prompt=prompt)
    parts = [f"{prompt}{keys}{out}\n" if out else f"{prompt}{keys}" for keys, _, out in turn.commands]
    return "New Terminal Output:\n\n" + "".join(parts) + prompt


def first_message(trial: Trial) -> str:
    prompt = STYLE[trial.task.style]["prompt"].format(host=trial.host)
    return SYSTEM_PROMPT.format(instruction=trial.task.instruction, prompt=prompt)


def handoff_texts(trial: Trial) -> tuple[str, str, str]:
    """(summary, questions, answers) written by the summarization subagents."""
    done = [keys.strip() for t in trial.turns[: trial.split] for keys, _, _ in t.commands][-4:]
    actions = "\n".join(f"   - Ran `{c}`" for c in done) or "   - Explored the environment"
    summary = (
        f"1. **Major Actions Completed**:\n{actions}\n\n2. **Current Status**:\n   - "
        f"{trial.turns[trial.split - 1].analysis}"
    )
    questions = (
        "1. Which files have been modified so far?\n2. Did the last command succeed?\n"
        "3. Are there any errors I should be aware of?\n4. What remains to be done?"
    )
    answers = (
        f"1. See the actions listed above; the last was `{done[-1] if done else 'ls'}`.\n"
        "2. Yes.\n3. None besides the original failure.\n4. Verify and finish the task."
    )
    return summary, questions, answers
