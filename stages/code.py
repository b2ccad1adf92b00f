"""Stage `code`: what each stage's code is, one digest file a stage, .tracelake/code/<stage>.txt.

    python -m stages.code [--out DIR]

A digest lists every project file running `python -m stages NAME` imports or loads (the import
closure with the params code of its sections, and the SQL and schemas that code names:
stages/closure.py), one `<sha256>  <path>` line each, sorted. Each stage's first dep in dvc.yaml is
its digest, so:

- a change to a module reruns `code` (a second or two), then exactly the stages whose digest changed;
- a module a stage newly imports counts at once, without rewriting dvc.yaml;
- dvc.lock holds one code entry a stage, not the 30 to 60 files behind it. DVC reads and rewrites
  the whole dvc.lock after every stage it runs, so its size is paid once a stage in every
  `dvc repro` (benchmarks/loop.py).

The digests depend on file contents only: the same tree writes the same bytes on every machine.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path

from stages import NAMES, declared
from stages.closure import ROOT

OUT = ".tracelake/code"
# What `code` itself depends on: every directory its digests can name (tests/project/test_dvc_deps.py
# checks that each digest names files under these only).
WATCHED = ("schemas", "sql", "src/tracelake", "stages")


def digest_path(name: str) -> str:
    """A stage's digest file, as dvc.yaml names it."""
    return f"{OUT}/{name}.txt"


def _files(deps: list[str], root: Path) -> list[str]:
    """The deps as files: a directory stands for every file under it (bytecode aside)."""
    out: set[str] = set()
    for dep in deps:
        path = root / dep
        if path.is_dir():
            out.update(
                p.relative_to(root).as_posix() for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts
            )
        else:
            out.add(dep)
    return sorted(out)


def code_files(name: str, root: Path = ROOT) -> list[str]:
    """The files stage `name`'s digest names, sorted."""
    from stages.dvc_yaml import code_deps

    return _files(code_deps(declared(name), root), root)


def digest(name: str, root: Path = ROOT) -> str:
    """The digest of stage `name`'s code: `<sha256>  <path>` lines, sorted by path."""
    lines = [f"{hashlib.sha256((root / rel).read_bytes()).hexdigest()}  {rel}" for rel in code_files(name, root)]
    return "\n".join(lines) + "\n"


def write(out: Path, root: Path = ROOT) -> list[str]:
    """Every stage's digest into `out` (files of stages no longer declared removed); the names written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in NAMES:
        text = digest(name, root)
        target = out / f"{name}.txt"
        if not target.is_file() or target.read_text() != text:
            tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
            tmp.write_text(text)
            os.replace(tmp, target)
        written.append(target.name)
    for stale in out.iterdir():
        if stale.name not in written:
            stale.unlink()
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stages.code", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args(argv)
    written = write(Path(args.out))
    print(f"code: {len(written)} stage digests -> {args.out}")
    return 0


if __name__ == "__main__":
    from tracelake.core.stage import run_stage

    run_stage(lambda: sys.exit(main()))
