"""The machinery of tests/project/test_dvc_deps.py's dynamic check: dvc.yaml's stages expanded, each run
under an audit hook (and strace), and every project file it opened checked against its deps. The
static deps (import closure, SQL and schemas) are computed by stages/closure.py, which writes them.
"""

from __future__ import annotations

import fnmatch
import json
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import yaml

ROOT = Path(__file__).resolve().parents[1]


TRACER = Path(__file__).with_name("trace_stage.py")


PYTHON_NAMES = {"python", "python3"}  # a cmd's interpreter


class Missing(NamedTuple):
    """A file (or a directory, for a computed asset name) that a stage depends on but does not declare."""

    stage: str
    file: str  # repository-relative, posix
    via: str  # the import chain or the call or the open that brought it in

    def __str__(self) -> str:
        return f"  {self.stage}: {self.file}\n      <- {self.via}"


# --------------------------------------------------------------------------------------------------
# dvc.yaml: stages with ${...} resolved, foreach expanded


_VAR = re.compile(r"\$\{\s*([^}]+?)\s*\}")


def _lookup(context: dict[str, Any], dotted: str) -> Any:
    value: Any = context
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(f"dvc.yaml: ${{{dotted}}} is not defined in params.yaml (or the foreach item)")
        value = value[part]
    return value


def interpolate(value: Any, context: dict[str, Any]) -> Any:
    """Resolve ${a.b} like DVC: a whole-string reference keeps the value's type, else it is text."""
    if isinstance(value, str):
        whole = _VAR.fullmatch(value)
        if whole:
            return _lookup(context, whole.group(1))
        return _VAR.sub(lambda m: str(_lookup(context, m.group(1))), value)
    if isinstance(value, list):
        return [interpolate(v, context) for v in value]
    if isinstance(value, dict):
        return {interpolate(k, context): interpolate(v, context) for k, v in value.items()}
    return value


def _context(dvc: dict[str, Any], params: dict[str, Any], root: Path) -> dict[str, Any]:
    context = dict(params)
    for entry in dvc.get("vars", []):
        context.update(yaml.safe_load((root / entry).read_text()) if isinstance(entry, str) else entry)
    return context


def expand_stages(dvc: dict[str, Any], params: dict[str, Any], root: Path = ROOT) -> dict[str, dict[str, Any]]:
    """Stage name (`name@key` for foreach items) -> the stage with every ${...} resolved."""
    context = _context(dvc, params, root)
    stages: dict[str, dict[str, Any]] = {}
    for name, stage in dvc["stages"].items():
        if "matrix" in stage:
            raise NotImplementedError(f"dvc.yaml stage {name}: `matrix` is not supported by this checker")
        if "foreach" not in stage:
            stages[name] = interpolate(stage, context)
            continue
        items = interpolate(stage["foreach"], context)
        pairs = items.items() if isinstance(items, dict) else ((str(i), i) for i in items)
        for key, item in pairs:
            stages[f"{name}@{key}"] = interpolate(stage["do"], {**context, "key": key, "item": item})
    return stages


def _paths(entries: Iterable[Any]) -> list[str]:
    """deps/outs/metrics entries (a path, or {path: options}) -> normalised posix paths."""
    out = []
    for entry in entries or []:
        for path in entry if isinstance(entry, dict) else [entry]:
            out.append(posixpath.normpath(str(path)))
    return out


def outputs_of(stage: dict[str, Any]) -> list[str]:
    return _paths(stage.get("outs")) + _paths(stage.get("metrics")) + _paths(stage.get("plots"))


def covered(path: str, deps: Iterable[str]) -> bool:
    """A dep covers a path when it is the same path or a directory above it."""
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps)


def script_of(stage_name: str, stage: dict[str, Any]) -> str:
    cmd = stage["cmd"] if isinstance(stage["cmd"], str) else stage["cmd"][0]
    words = shlex.split(cmd)
    if not words or Path(words[0]).name not in PYTHON_NAMES or not any(w.endswith(".py") for w in words):
        raise ValueError(
            f"dvc.yaml stage {stage_name}: cmd {cmd!r} is not `python <script>.py ...`; "
            "this checker cannot find its code"
        )
    return next(w for w in words if w.endswith(".py"))


def load_yaml(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def explain(missing: list[Missing], what: str) -> str:
    stages = sorted({m.stage for m in missing})
    return (
        f"dvc.yaml misses {len(missing)} dependenc{'y' if len(missing) == 1 else 'ies'} of "
        f"{len(stages)} stage(s) ({what}); `dvc repro` would not rerun them when these change:\n"
        + "\n".join(map(str, missing))
        + "\nAdd each file, or a directory above it, to the stage's deps in dvc.yaml."
    )


FAKE_PROJECT = {  # a tiny project exercising each rule of the closure and of loader arguments
    "src/tracelake/__init__.py": "",
    "src/tracelake/core/__init__.py": "",
    "src/tracelake/core/assets.py": "def sql(name):\n    return name\n",
    "src/tracelake/core/schema.py": "def load_schema(name):\n    return name\n",
    "src/tracelake/core/tables.py": (
        "from .schema import load_schema\n\ndef read_table(directory, name):\n    return load_schema(name)\n"
    ),
    "src/tracelake/lib.py": (
        "from tracelake.core import assets\n"
        "from .core.assets import sql as q\n"
        "from tracelake.core.schema import load_schema\n"
        "TABLE = 'const'\n\n"
        "def f(rule, con):\n"
        "    assets.sql('filter_rules/' + rule)\n"
        "    q(f'{rule}.x')\n"
        "    con.sql('not a loader')\n"
        "    for name, _ in (('a', 1), ('b', 2)):\n"
        "        load_schema(name)\n\n"
        "def g():\n"
        "    from tracelake.core.schema import load_schema as ls\n"
        "    ls(TABLE)\n"
    ),
    "src/tracelake/typed.py": "from tracelake.core.assets import sql\nsql('typed')\n",
    "src/tracelake/unused.py": "from tracelake.core.assets import sql\nsql('unused')\n",
    "stages/s.py": (
        "from typing import TYPE_CHECKING\n"
        "from tracelake.core.tables import read_table\n"
        "if TYPE_CHECKING:\n    from tracelake import typed\n\n"
        "def main():\n"
        "    import tracelake.lib\n"
        "    read_table('.', 'pool')\n"
    ),
}


IGNORED_PARTS = {".venv", ".git", ".dvc"}  # environment and DVC's own files, never stage inputs


# Content-addressed caches (params.yaml keys): a stage may read them, but what it finds there never
# changes its output (score.cache: known (task, scorer) keys are not recomputed; tokenizer.cache:
# token counts of known (tokenizer, segment) pairs are not re-encoded; ingest.cache: unchanged input
# files are not parsed again; see params.yaml).
CACHE_PARAMS = ["score.cache", "tokenizer.cache", "ingest.cache", "dedup.cache"]

# Files a stage reads that are no input of its outputs:
# - the code the ingest cache is keyed by (ingest/file_cache.py code_digest: every module of core/ and
#   ingest/): a change to one makes the cached parses stale, it changes no output byte.
NOT_INPUTS = {"*": [], "ingest": ["src/tracelake/core/*.py", "src/tracelake/ingest/*.py"]}


def manifest_inputs(project: Path, entry: str) -> list[str]:
    """The inputs a manifest stands for (core/scan.py), when `entry` (a dep or an out) is one: the
    source manifests `scan` writes (.tracelake/scan, each listing a source's path and tasks) and
    synth's record (naming synth.out). A stage that depends on one, or writes it, may read the files
    it lists: DVC tracks them through it. Anything else: []."""
    from stages.synth import RECORD
    from tracelake.ingest.sources import MANIFESTS

    path = project / entry
    if entry == str(RECORD) and path.is_file():
        return [json.loads(path.read_text())["made"]["out"]]
    if entry == str(MANIFESTS) and path.is_dir():
        return sorted({i for m in path.glob("*.json") for i in manifest_inputs(project, f"{entry}/{m.name}")})
    if entry.startswith(f"{MANIFESTS}/") and path.is_file():
        return [posixpath.normpath(i) for i in json.loads(path.read_text())]
    return []


@dataclass(frozen=True)
class Read:
    file: str  # project-relative
    cmd: str


@dataclass
class Trace:
    reads: list[Read]  # opens through Python (audit hook)
    native: list[Read] | None  # every open(2) of the process tree (strace); None without strace
    package: str | None  # where tracelake was imported from


def _project_file(path: str, project: Path) -> str | None:
    """A path the stage opened -> the project file it stands for (a .pyc for its .py), or None."""
    try:
        parts = list(Path(os.path.realpath(project / path)).relative_to(project).parts)
    except ValueError:
        return None
    if not parts or parts[0] in IGNORED_PARTS:
        return None
    if "__pycache__" in parts:
        i = parts.index("__pycache__")
        parts = parts[:i] + [parts[-1].split(".")[0] + ".py"]
    return "/".join(parts)


def _reads(opens: Iterable[tuple[str, str]], project: Path, cmd: str) -> list[Read]:
    """(path, "r"/"w") in order -> the project files read before the stage wrote them; paths that are
    not files after the run (directories, what the stage deleted: no dep can name those) left out."""
    written: set[str] = set()
    reads: list[Read] = []
    for path, how in opens:
        file = _project_file(path, project)
        if file is None or file in written:
            continue
        if how == "w":
            written.add(file)
        elif (project / file).is_file() and Read(file, cmd) not in reads:
            reads.append(Read(file, cmd))
    return reads


_STRACE_OPEN = re.compile(  # pid, dirfd, path (C-escaped), flags
    r'^(\d+)\s+(?:open|openat|openat2)\((?:(AT_FDCWD|\d+), )?"((?:[^"\\]|\\.)*)", ([^,)<]+)'
)


_STRACE_RESUMED = re.compile(r"^(\d+)\s+<\.\.\. (?:open|openat|openat2) resumed>.*= (-?\d+)")


_STRACE_RESULT = re.compile(r"= (-?\d+)(?: \w+ \(.*\))?$")


def strace_opens(log: str) -> Iterator[tuple[str, str]]:
    """Successful opens in an `strace -f` log as (path, "r"/"w"); directories and opens relative to a
    directory descriptor (shutil.rmtree walking what it deletes) are left out."""
    pending: dict[str, tuple[str, str] | None] = {}
    for line in log.splitlines():
        if m := _STRACE_RESUMED.match(line):
            opened = pending.pop(m.group(1), None)
            if opened and int(m.group(2)) >= 0:
                yield opened
            continue
        m = _STRACE_OPEN.match(line)
        if not m:
            continue
        pid, dirfd, raw, flags = m.groups()
        path = raw.encode("latin-1").decode("unicode_escape").encode("latin-1").decode("utf-8", "replace")
        usable = "O_DIRECTORY" not in flags and (dirfd in (None, "AT_FDCWD") or path.startswith("/"))
        how = "r" if "O_RDONLY" in flags or "O_RDWR" in flags else "w"
        opened = (path, how) if usable else None
        if line.endswith("<unfinished ...>"):
            pending[pid] = opened
        elif opened and (r := _STRACE_RESULT.search(line)) and int(r.group(1)) >= 0:
            yield opened


def strace() -> str | None:
    """strace, when it is installed and may trace here (ptrace can be forbidden in containers)."""
    path = shutil.which("strace")
    probe = [path, "-f", "-qq", "-o", os.devnull, "true"] if path else None
    if probe and subprocess.run(probe, capture_output=True, check=False).returncode == 0:
        return path
    return None


def trace_stage(project: Path, cmd: str, strace_path: str | None) -> Trace:
    """Run a stage's cmd in `project` under tests/trace_stage.py (and strace, when given)."""
    words = shlex.split(cmd)
    assert Path(words[0]).name in PYTHON_NAMES, f"{cmd!r}: not a python command"
    logs = project.parent / f"trace-{time.monotonic_ns()}"
    env = dict(
        os.environ,
        PYTHONPATH=str(project / "src"),
        PYTHONDONTWRITEBYTECODE="1",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    )
    args = [sys.executable, str(TRACER), f"{logs}.json", *words[1:]]
    if strace_path:
        args = [
            strace_path,
            "-f",
            "-qq",
            "-s",
            "65535",
            "-e",
            "trace=open,openat,openat2",
            "-e",
            "signal=none",
            "-o",
            f"{logs}.strace",
            *args,
        ]
    proc = subprocess.run(args, cwd=project, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"`{cmd}` failed in {project}:\n{proc.stdout}\n{proc.stderr}"
    record = json.loads(Path(f"{logs}.json").read_text())
    native = None
    if strace_path:
        native = _reads(strace_opens(Path(f"{logs}.strace").read_text(errors="replace")), project, cmd)
    return Trace(_reads(record["opens"], project, cmd), native, record["tracelake"])


def unexplained_reads(name: str, stage: dict[str, Any], reads: list[Read], params: dict[str, Any]) -> list[Missing]:
    """The reads no dep of the stage covers (its own outputs, caches, and params.yaml when the stage
    declares `params` aside)."""
    deps, outs = _paths(stage.get("deps")), outputs_of(stage)
    caches = [posixpath.normpath(str(_lookup(params, key))) for key in CACHE_PARAMS]
    exempt = NOT_INPUTS["*"] + NOT_INPUTS.get(name.split("@")[0], [])
    missing = []
    for read in reads:
        if covered(read.file, outs + caches) or (read.file == "params.yaml" and stage.get("params")):
            continue
        if any(fnmatch.fnmatch(read.file, pattern) for pattern in exempt):
            continue
        if not covered(read.file, deps):
            missing.append(Missing(name, read.file, f"opened for reading by `{read.cmd}`"))
    return missing
