"""The package layout is a rule, not a habit: imports point one way through the phases,
core <- tokens <- ingest <- curate <- export <- explore (sample uses core only; the command line and the
params assembly sit on top), and no module imports another in a circle. Loading params.yaml
imports no engine (duckdb, pyarrow, tokenizers, polars).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ..helpers import ROOT

PACKAGE = ROOT / "src" / "tracelake"
# A module may import from its own phase and from phases to its left; `sample` only from core.
RANK = {"core": 0, "tokens": 1, "ingest": 2, "curate": 3, "export": 4, "explore": 5}
MAY_IMPORT = {phase: {p for p, r in RANK.items() if r <= rank} for phase, rank in RANK.items()}
MAY_IMPORT["sample"] = {"sample", "core"}
TOP = "top"  # tracelake/*.py: the command line and the params assembly may import anything


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def phase_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()):
        return parts[1]
    return TOP


def imports_of(path: Path) -> set[str]:
    """Every tracelake module `path` imports, at any depth of the file (lazy imports count)."""
    tree = ast.parse(path.read_text(), str(path))
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "tracelake")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "tracelake":
                continue
            for alias in node.names:  # `from tracelake.explore import svg` imports a module
                candidate = f"{target}.{alias.name}"
                found.add(candidate if _is_module(candidate) else target)
    return found


def _is_module(name: str) -> bool:
    rel = Path(*name.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()


def import_graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_phase_package_exists():
    for phase in [*RANK, "sample"]:
        assert (PACKAGE / phase / "__init__.py").is_file(), phase


def test_imports_point_toward_core():
    wrong = []
    for module, targets in import_graph().items():
        phase = phase_of(module)
        for target in targets:
            other = phase_of(target)
            if target == "tracelake":
                continue  # the package root (__version__) imports nothing itself
            if phase != TOP and (other == TOP or other not in MAY_IMPORT[phase]):
                wrong.append(f"{module} ({phase}) imports {target} ({other})")
    assert not wrong, (
        "imports against the phase order core <- tokens <- ingest <- curate <- export <- explore:\n"
        + "\n".join(sorted(wrong))
    )


def test_no_import_cycles():
    graph = import_graph()
    # the package root's one import is lazy (inside open_lake, run after every module is loaded) and
    # its __version__ is imported by core.lake: that edge is not an import-time cycle
    graph["tracelake"] = set()
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt) :] + [nxt]) if nxt in stack else nxt)
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_package_root_imports_nothing():
    """`import tracelake` loads nothing of its own and no engine: the root's one function, open_lake,
    imports the notebook module when it is called."""
    root = PACKAGE / "__init__.py"
    assert imports_of(root) == {"tracelake.explore.notebook"}
    assert not [n for n in ast.parse(root.read_text()).body if isinstance(n, (ast.Import, ast.ImportFrom))]
    code = (
        "import sys, tracelake; print(sorted(m for m in sys.modules if m.startswith('tracelake.') "
        "or m in ('duckdb', 'polars', 'pyarrow')))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_nothing_in_the_project_calls_the_roots_open_lake():
    """The root's open_lake is for notebooks: the dependency check of dvc.yaml (tests/depcheck.py)
    does not follow its lazy import, which holds only while no module or stage calls it."""
    files = [*sorted(PACKAGE.rglob("*.py")), *sorted((ROOT / "stages").glob("*.py"))]
    callers = [
        str(p.relative_to(ROOT))
        for p in files
        if p != PACKAGE / "__init__.py"
        and re.search(r"\btracelake\.open_lake\b|from tracelake import [^\n]*\bopen_lake\b", p.read_text())
    ]
    assert callers == []


@pytest.mark.parametrize("engine", ["duckdb", "pyarrow", "tokenizers", "polars"])
def test_loading_params_imports_no_engine(engine):
    code = (
        "import sys; from tracelake.params import load_params; load_params('params.yaml'); "
        f"print({engine!r} in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False", f"loading params imported {engine}"


def _is_hand_made_assert(node: ast.AST) -> bool:
    """`assert ...` or `raise AssertionError(...)`: an invariant that is not a `check`."""
    if isinstance(node, ast.Assert):
        return True
    exc = node.exc if isinstance(node, ast.Raise) else None
    target = exc.func if isinstance(exc, ast.Call) else exc
    return isinstance(target, ast.Name) and target.id == "AssertionError"


def test_no_assert_in_the_library():
    """Invariants are `check(...)` (raises Bug, exit 70 with a traceback), never `assert`, which
    `python -O` removes, nor a bare AssertionError, which the entry points do not report as a bug."""
    files = [*sorted(PACKAGE.rglob("*.py")), *sorted((ROOT / "stages").glob("*.py"))]
    found = [
        f"{p.relative_to(ROOT)}:{n.lineno}"
        for p in files
        for n in ast.walk(ast.parse(p.read_text()))
        if _is_hand_made_assert(n)
    ]
    assert not found, "hand-made asserts (use tracelake.core.errors.check): " + ", ".join(found)


def test_check_survives_python_O():
    code = (
        "from tracelake.core.errors import Bug, check\n"
        "try:\n    check(1 + 1 == 3, 'arithmetic')\nexcept Bug as e:\n    print('bug:', e)\n"
    )
    proc = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "bug: arithmetic", proc.stdout + proc.stderr


# The modules that may open an output directory: publish's own (core/stage.py write_output) and the
# directory builder it uses; and the writers of directories that are no stage's output.
OPENS_OUTPUT_DIRS = {
    "src/tracelake/core/outputs.py": "output_dir itself",
    "src/tracelake/core/stage.py": "publish: write_output writes every stage output",
    "src/tracelake/export/task_dirs.py": "`tracelake train rl` extracts a run's task directories under train.runs",
    "src/tracelake/ingest/task_archive.py": "extracts one task archive into a directory its caller names",
}


def _calls(tree: ast.AST, names: set[str]) -> list[ast.Call]:
    """The calls of a function named one of `names`, as `name(...)` or `module.name(...)`."""
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and (
            (isinstance(n.func, ast.Name) and n.func.id in names)
            or (isinstance(n.func, ast.Attribute) and n.func.attr in names)
        )
    ]


def test_only_publish_opens_an_output_directory():
    """The stage contract (core/stage.py): every stage output is written by publish, as an Output or a
    Streamed one, so no stage and no library function opens an output directory (`output_dir`) or
    writes a manifest (`write_manifest`) itself."""
    files = [*sorted(PACKAGE.rglob("*.py")), *sorted((ROOT / "stages").glob("*.py"))]
    found = []
    for p in files:
        rel = p.relative_to(ROOT).as_posix()
        tree = ast.parse(p.read_text())
        if rel not in OPENS_OUTPUT_DIRS:
            found += [f"{rel}:{c.lineno} output_dir" for c in _calls(tree, {"output_dir"})]
        if rel != "src/tracelake/core/stage.py":
            found += [f"{rel}:{c.lineno} write_manifest" for c in _calls(tree, {"write_manifest"})]
    assert not found, "outside publish (return an Output or a Streamed output): " + ", ".join(found)


def test_the_rule_sees_an_output_dir_call():
    """The rule above finds both spellings of the call."""
    tree = ast.parse(
        "from tracelake.core import outputs\n"
        "from tracelake.core.outputs import output_dir\n"
        "with output_dir(p) as tmp:\n    pass\n"
        "with outputs.output_dir(p) as tmp:\n    pass\n"
        "config = {'output_dir': 'runs'}\n"
    )
    assert [c.lineno for c in _calls(tree, {"output_dir"})] == [3, 5]
