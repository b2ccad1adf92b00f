"""Each stage's fixed cost: what `python -m stages NAME` spends before it does any work (the
interpreter, imports, its params), measured as `python -m stages NAME [KEY] --help` against the
bare interpreter (`python -c pass`), and, with --before REV, the same for the stage scripts of an
earlier revision (`python stages/<script>.py [KEY] --help`, run in a temporary git worktree).

    uv run python benchmarks/stage_startup.py [--runs 15] [--before c8132b3] [--json out.json]

Prints per stage the median wall time (ms) and the start-up over the bare interpreter. DVC's own
cost (reading dvc.yaml, hashing deps) comes on top of both and is the same for both.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from stages import NAMES  # noqa: E402

KEYS = {"ingest": "swesmith", "select": "1k", "export_sft": "1k"}
OLD_SCRIPTS = {"select": "select_scale.py"}  # stages whose script had another name


def wall_ms(cmd: list[str], cwd: Path, runs: int) -> float:
    """Median wall milliseconds of `cmd` over `runs` runs (after one warm-up run)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(cwd / "src"), str(cwd)])}  # this tree's code
    times = []
    for i in range(runs + 1):
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed in {cwd}:\n{proc.stderr}")
        if i:
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def measure(root: Path, runs: int, old: bool) -> dict[str, float]:
    out = {}
    for name in NAMES:
        key = [KEYS[name]] if name in KEYS else []
        if old:
            script = root / "stages" / OLD_SCRIPTS.get(name, f"{name}.py")
            if not script.is_file():
                continue
            cmd = [sys.executable, str(script), *key, "--help"]
        else:
            cmd = [sys.executable, "-m", "stages", name, *key, "--help"]
        out[name] = wall_ms(cmd, root, runs)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--before", help="a git revision whose stage scripts to measure too")
    parser.add_argument("--json")
    args = parser.parse_args()
    floor = wall_ms([sys.executable, "-c", "pass"], ROOT, args.runs)
    result = {"python_ms": floor, "now": measure(ROOT, args.runs, old=False)}
    if args.before:
        tmp = Path(tempfile.mkdtemp(prefix="startup-"))
        try:
            subprocess.run(
                ["git", "worktree", "add", "-q", "--detach", str(tmp / "wt"), args.before], cwd=ROOT, check=True
            )
            result["before"] = measure(tmp / "wt", args.runs, old=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tmp / "wt")], cwd=ROOT, check=False)
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"python -c pass: {floor:.0f} ms (median of {args.runs})")
    print(f"{'stage':14} {'before':>8} {'now':>8}   start-up over python (before -> now)")
    for name, now in result["now"].items():
        before = result.get("before", {}).get(name)
        b = f"{before:8.0f}" if before is not None else f"{'-':>8}"
        over = f"{before - floor:5.0f} -> " if before is not None else ""
        print(f"{name:14} {b} {now:8.0f}   {over}{now - floor:5.0f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
