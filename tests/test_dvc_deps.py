"""Every file a DVC stage's output depends on is a declared dependency of that stage in dvc.yaml,
so `dvc repro` never leaves an output stale after a change to code, SQL, a schema or data.

Proven two ways, both computed from the files (no module list is written down here):

1. Static (`missing_deps`): for each stage (each item of a `foreach` stage), the script named in its
   `cmd`, the import closure of that script over the project's own modules (absolute and relative
   imports, imports inside functions, `from pkg import name` where pkg.name is a module, every
   enclosing package's __init__.py; imports under `if TYPE_CHECKING:` never run and do not count),
   and the SQL and schema files the closure's code names through the asset loaders (LOADERS:
   sql("x") -> sql/x.sql, load_schema("x") -> schemas/x.yaml) are each covered by a dep of the
   stage: the same path or a directory above it. `${...}` in dvc.yaml is resolved from params.yaml.
   How a loader's argument becomes a path:
   - a string literal names one file;
   - a function that passes one of its own parameters straight to a loader (core.lake.read_table,
     ingest.common.run_ingest) is a loader too: its callers' literals name the files;
   - a local name bound only to literals (`x = "a"`, `for x, _ in (("a", ...), ("b", ...))`) names
     each of them;
   - anything else names a directory: the literal text before the first computed part up to its
     last "/" (sql('filters/' + rule.query) -> sql/filters), else the loader's whole directory.
   A module counts whole: every loader call in a module of the closure counts, whichever function
   holds it. `test_checker_reports_a_removed_dep` runs this same checker on dvc.yaml with one
   dependency removed and gets back exactly that file.
2. Dynamic (e2e): each stage (each foreach item) of a copy of the built sample project runs once,
   with the copy's own src/ first on sys.path, under an audit hook (tests/trace_stage.py; "open"
   events) and, where strace is installed and allowed, under `strace -f` too (every open(2): DuckDB,
   Arrow and tokenizers open their files themselves, without an audit event). Every project file
   the stage opens for reading before writing it is covered by a dep of that stage, except its own
   outputs (outs, metrics, plots), params.yaml when the stage declares `params` (DVC tracks those
   keys) and content-addressed caches (CACHE_PARAMS). This catches data (a table, a manifest) as
   well as code. The audit test also shows the same check reporting a data dep once it is removed;
   the strace test skips, saying why, where strace cannot run.

`python tests/depcheck.py` prints each stage's closure (the files and why each is needed).
"""

from __future__ import annotations

import json
import posixpath
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .depcheck import (
    FAKE_PROJECT,
    ROOT,
    Project,
    Trace,
    _paths,
    _rel,
    covered,
    expand_stages,
    explain,
    imported_names,
    interpolate,
    load_yaml,
    missing_deps,
    script_of,
    stage_closure,
    strace,
    trace_stage,
    unexplained_reads,
)


def test_every_stage_declares_its_code_and_assets() -> None:
    missing = missing_deps(load_yaml(ROOT / "dvc.yaml"), load_yaml(ROOT / "params.yaml"))
    assert not missing, explain(missing, "code the stage imports, SQL and schemas it loads")


def test_closure_rules(tmp_path: Path) -> None:
    """Lazy, relative and `from pkg import module` imports count, TYPE_CHECKING ones and modules never
    imported do not; loader arguments map to files by the rules in the module docstring."""
    for rel, text in FAKE_PROJECT.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    files = stage_closure("stages/s.py", tmp_path).files
    assert sorted(files) == sorted([
        "stages/s.py", "src/tracelake/__init__.py", "src/tracelake/core/__init__.py",
        "src/tracelake/core/assets.py", "src/tracelake/core/schema.py", "src/tracelake/core/lake.py",
        "src/tracelake/lib.py",
        "sql/filters",  # 'filters/' + rule: the directory its literal prefix names
        "sql",  # f'{rule}.x': no literal prefix, the whole directory
        "schemas/a.yaml", "schemas/b.yaml",  # a loop over literals
        "schemas/const.yaml",  # a module-level constant
        "schemas/pool.yaml",  # through the wrapper read_table(directory, name)
    ]), "\n".join(f"{f}: {why}" for f, why in sorted(files.items()))


def _direct_library_dep(dvc: dict[str, Any], params: dict[str, Any]) -> tuple[str, str]:
    """A plain stage and its own library module: a file dep its script imports itself, which not every
    stage lists (so not the shared params modules)."""
    stages = [(name, stage) for name, stage in dvc["stages"].items() if "foreach" not in stage]
    shared = set.intersection(*(set(stage.get("deps", [])) for _, stage in stages))
    for name, stage in stages:
        script = posixpath.normpath(script_of(name, interpolate(stage, params)))
        project = Project(ROOT, (ROOT / script).parent)
        module = project.load(ROOT / script, script)
        imported = {_rel(p, ROOT) for n, _ in imported_names(project, module) if (p := project.find(n))}
        for dep in stage.get("deps", []):
            if dep in imported and dep not in shared and not dep.endswith("__init__.py"):
                return name, dep
    pytest.fail("no plain stage lists a module its script imports as a file dep; pick another case")


def _remove_dep(dvc: dict[str, Any], stage: str, dep: str) -> dict[str, Any]:
    changed = json.loads(json.dumps(dvc))
    body = changed["stages"][stage].get("do", changed["stages"][stage])
    assert dep in body["deps"], f"{stage} has no dep {dep}"
    body["deps"].remove(dep)
    return changed


@pytest.mark.parametrize("case", ["library module", "sql file", "foreach stage"])
def test_checker_reports_a_removed_dep(case: str) -> None:
    """The checker the main test runs, on dvc.yaml less one dep: exactly that file is reported."""
    dvc, params = load_yaml(ROOT / "dvc.yaml"), load_yaml(ROOT / "params.yaml")
    if case == "library module":
        stage, dep = _direct_library_dep(dvc, params)
        expected = [(stage, dep)]
    elif case == "sql file":
        stage, dep = next((name, d) for name, s in dvc["stages"].items() for d in s.get("deps", [])
                          if d.startswith("sql/") and d.endswith(".sql"))
        expected = [(stage, dep)]
    else:
        stage, body = next((name, s["do"]) for name, s in dvc["stages"].items() if "foreach" in s)
        dep = next(d for d in body["deps"] if d.startswith("stages/"))
        expected = [(name, dep) for name in expand_stages(dvc, params) if name.startswith(f"{stage}@")]
    missing = missing_deps(_remove_dep(dvc, stage, dep), params)  # exactly what the main test runs
    # Exactly: nothing else is missing (dvc.yaml passes) and the removed dep is caught.
    assert [(m.stage, m.file) for m in missing] == expected, explain(missing, f"without {stage}: {dep}")


# --------------------------------------------------------------------------------------------------
# Dynamic: run each stage in a copy of the built sample project and record what it reads


def _copy(src: Path, dst: Path) -> Path:
    def ignore(directory: str, names: list[str]) -> set[str]:
        return {"cache", "tmp"} & set(names) if Path(directory).name == ".dvc" else set()
    shutil.copytree(src, dst, symlinks=True, ignore=ignore)
    return dst


@dataclass
class Traced:
    params: dict[str, Any]
    stages: dict[str, dict[str, Any]]
    traces: dict[str, Trace]
    seconds: float


@pytest.fixture(scope="module")
def traced(sample_project: Path, tmp_path_factory: pytest.TempPathFactory) -> Traced:
    """Every stage (every foreach item) run once, in dvc.yaml order, in a copy of the built sample."""
    start = time.monotonic()
    project = _copy(sample_project, tmp_path_factory.mktemp("deps") / "project").resolve()
    dvc, params = load_yaml(project / "dvc.yaml"), load_yaml(project / "params.yaml")
    stages = expand_stages(dvc, params, project)
    strace_path = strace()
    traces = {}
    for name, stage in stages.items():
        traces[name] = trace_stage(project, stage["cmd"], strace_path)
        package = traces[name].package
        assert package is None or Path(package).resolve().is_relative_to(project), (
            f"{name}: tracelake was imported from {package}, not from the copy's src/: its reads are unseen")
    return Traced(params, stages, traces, time.monotonic() - start)


@pytest.mark.e2e
def test_every_stage_declares_what_it_opens(traced: Traced) -> None:
    print(f"{len(traced.traces)} stage runs traced in {traced.seconds:.1f}s")
    missing = [m for name, stage in traced.stages.items()
               for m in unexplained_reads(name, stage, traced.traces[name].reads, traced.params)]
    assert not missing, explain(missing, "files the stage opened through Python while it ran")

    # The same check reports a data dependency once it is gone from the stage's deps.
    name, dep = next((n, d) for n, t in reversed(traced.traces.items()) for r in t.reads
                     if r.file.endswith("manifest.json") for d in _paths(traced.stages[n].get("deps"))
                     if covered(r.file, [d]))
    stage = traced.stages[name]
    without = {**stage, "deps": [d for d in _paths(stage["deps"]) if d != dep]}
    reads = traced.traces[name].reads
    gone = {r.file for r in reads if covered(r.file, [dep]) and not covered(r.file, _paths(without["deps"]))}
    reported = unexplained_reads(name, without, reads, traced.params)
    assert gone and {m.file for m in reported} == gone, explain(reported, f"without {name}: {dep}")


@pytest.mark.e2e
def test_every_stage_declares_what_native_code_reads(traced: Traced) -> None:
    """The same over every open(2) (DuckDB, Arrow and tokenizers open their files themselves)."""
    if any(t.native is None for t in traced.traces.values()):
        pytest.skip("strace is not installed or may not trace here (apt-get install strace): "
                    "reads by native code were not recorded")
    missing = [m for name, stage in traced.stages.items()
               for m in unexplained_reads(name, stage, traced.traces[name].native or [], traced.params)]
    assert not missing, explain(missing, "files the stage's process opened while it ran (strace)")

