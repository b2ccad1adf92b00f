"""Harbor task directories: out/<source>/tasks/<task>/{instruction.md, task.toml,
environment/Dockerfile, solution/solve.sh, tests/test.sh}.

A task's instruction is 1 to 40 lines (lognormal, median 8) of its style's blocks; its length is
its difficulty, which later sets how long trials on it run and how often they pass; a planted copy
(near_duplicates.py) is measured again from its new text by `with_instruction`. The checksum of
the files goes into each trial's result.json (`task_checksum`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

from tracelake.sample.common import SourceSpec, lognorm, seeded, write
from tracelake.sample.text import STYLE


@dataclass
class Task:
    name: str
    style: str
    instruction: str
    lines: int
    difficulty: float  # 0 (one-line instruction) .. 1 (40 lines)
    ctx: dict[str, str]
    checksum: str = ""


def make_task(seed: int, spec: SourceSpec, k: int) -> Task:
    rng = seeded(seed, spec.name, "task", k)
    data = STYLE[spec.style]
    ctx = {key: rng.choice(values) for key, values in data["ctx"].items()}
    target = lognorm(rng, 8, 0.9, 1, 40)
    lines = [data["title"].format(**ctx)]
    blocks = data["blocks"][:]
    rng.shuffle(blocks)
    for block in blocks:
        block_lines = [line.format(**ctx) for line in block]
        if len(lines) + 1 + len(block_lines) <= target:
            lines += [""] + block_lines
    name = f"{spec.name}-{k:0{data['digits']}d}"
    return with_instruction(Task(name, spec.style, "", 0, 0.0, ctx), "\n".join(lines))


def with_instruction(task: Task, instruction: str, ctx: dict[str, str] | None = None) -> Task:
    """`task` with a new instruction (and, if given, context), its lines and difficulty measured
    again: trials on a planted copy run as long as its text says, wherever the text came from.

    Difficulty is capped at 1: a near-exact copy may carry one blank line more than the 40 an
    original can have.
    """
    lines = instruction.count("\n") + 1
    return replace(
        task,
        instruction=instruction,
        lines=lines,
        difficulty=min(1.0, (lines - 1) / 39),
        ctx=task.ctx if ctx is None else ctx,
        checksum="",
    )


def task_files(task: Task) -> dict[str, str]:
    level = "easy" if task.lines < 6 else "medium" if task.lines < 16 else "hard"
    toml = (
        f'version = "1.0"\n\n[metadata]\nauthor_name = "tracelake synth"\ndifficulty = '
        f'"{level}"\ncategory = "{task.style}"\ntags = ["{task.style}", "synthetic"]\n\n'
        f"[verifier]\ntimeout_sec = 300.0\n\n[agent]\ntimeout_sec = 1800.0\n\n[environment]\n"
        f'build_timeout_sec = 600.0\ncpus = 1\nmemory = "2G"\nstorage = "10G"\n'
    )
    workdir = "/testbed" if task.style == "swesmith" else "/app"
    docker = f"FROM {STYLE[task.style]['image']}\n\nWORKDIR {workdir}\n"
    solve = (
        f"#!/bin/bash\n# Reference solution for {task.name} (synthetic).\nset -euo pipefail\n"
        f"cd {workdir}\necho 'applying fix for {task.name}'\n"
    )
    test = (
        f"#!/bin/bash\n# Writes 1 or 0 to /logs/verifier/reward.txt.\ncd {workdir}\n"
        f"if {STYLE[task.style]['check']}; then\n  echo 1 > /logs/verifier/reward.txt\n"
        "else\n  echo 0 > /logs/verifier/reward.txt\nfi\n"
    )
    return {
        "instruction.md": task.instruction + "\n",
        "task.toml": toml,
        "environment/Dockerfile": docker,
        "solution/solve.sh": solve,
        "tests/test.sh": test,
    }


def write_task(root: Path, task: Task) -> None:
    """Write the task's directory under `root` and set its checksum."""
    digest = hashlib.sha256()
    for rel, text in sorted(task_files(task).items()):
        write(root / task.name / rel, text)
        digest.update(rel.encode() + b"\0" + text.encode() + b"\0")
    task.checksum = digest.hexdigest()
