"""Sampling profiles of benchmark steps with py-spy, and their summaries.

The pipeline benchmark (benchmarks/pipeline.py --profile) reruns the steps behind a missed target
under `py-spy record --subprocesses` (worker pools included), writes the raw folded stacks next to
its log, and reports each profile as the functions holding the most samples, self and inclusive.
py-spy is installed, pinned, into its own venv under the benchmark's work directory.

    python benchmarks/profiles.py RAW.txt [--top 15]     # the summary of a raw profile
"""

from __future__ import annotations

import argparse
import re
import subprocess
from collections import Counter
from pathlib import Path

PY_SPY_PIN = "py-spy==0.4.3"
RATE = 50  # samples a second in each process: enough for stages of seconds to minutes
_PROCESS = re.compile(r'^process \d+:".*"$')
_FILE = re.compile(r"\((.*)\)$")


def py_spy(work: Path) -> Path:
    """The py-spy binary, installed once into WORK/tools-venv."""
    venv = work / "tools-venv"
    exe = venv / "bin" / "py-spy"
    if not exe.is_file():
        subprocess.run(["uv", "venv", "-q", "--python", "3.11", str(venv)], check=True)
        subprocess.run(["uv", "pip", "install", "-q", "--python", str(venv / "bin" / "python"), PY_SPY_PIN], check=True)
    return exe


def wrap(exe: Path, raw: Path, cmd: list[str]) -> list[str]:
    """cmd run under py-spy: CPU samples of it and every process it starts, folded into raw."""
    return [
        str(exe),
        "record",
        "--subprocesses",
        "--nolineno",
        "--nonblocking",
        "--format",
        "raw",
        "--rate",
        str(RATE),
        "--output",
        str(raw),
        "--",
        *cmd,
    ]


def _frame(frame: str) -> str:
    """'func (path/to/module.py)' with the path cut to what names the module: from `tracelake/`,
    `stages/` or a package under site-packages, never a machine's directories."""
    m = _FILE.search(frame)
    if not m:
        return frame
    path = m.group(1)
    for anchor in ("site-packages/", "/src/", "/lib/python3.11/", "/lib/python3.12/"):
        if anchor in path:
            path = path.rsplit(anchor, 1)[1]
            break
    else:
        if "/stages/" in path:
            path = "stages/" + path.rsplit("/stages/", 1)[1]
        elif path.startswith("/"):
            path = path.rsplit("/", 1)[1]
    return frame[: m.start()] + f"({path})"


def summarize(raw: Path, top: int = 15) -> dict:
    """The functions holding the most samples of a raw py-spy profile, as percentages of all
    samples: self (the sampled frame itself, any code) and inclusive (anywhere on the stack, once a
    sample; tracelake's own functions only, where the stage's time is spent in its terms)."""
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_frame(f) for f in stack.split(";") if not _PROCESS.match(f)]
        if not frames:
            continue
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            if f.endswith(".py)") and "(tracelake/" in f:
                incl[f] += n
    if not total:
        return {"samples": 0, "self": [], "inclusive": []}

    def pct(counter: Counter[str]) -> list[list]:
        return [[f, round(100 * n / total, 1)] for f, n in counter.most_common(top)]

    return {"samples": total, "self": pct(own), "inclusive": pct(incl)}


def render(title: str, summary: dict) -> str:
    """A profile summary as Markdown: the top self and inclusive functions side by side."""
    lines = [
        f"\n**profile: {title}** ({summary['samples']:,} samples at {RATE}/s a process)\n",
        "| self % | function | inclusive % | function |",
        "|---:|---|---:|---|",
    ]
    rows = max(len(summary["self"]), len(summary["inclusive"]))
    for i in range(rows):
        s = summary["self"][i] if i < len(summary["self"]) else ["", ""]
        c = summary["inclusive"][i] if i < len(summary["inclusive"]) else ["", ""]
        lines.append(f"| {s[1]} | `{s[0]}` | {c[1]} | `{c[0]}` |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw", type=Path)
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    print(render(args.raw.name, summarize(args.raw, args.top)))


if __name__ == "__main__":
    main()
