"""The machinery of tests/test_dvc_deps.py: each DVC stage's import closure and the SQL and schema
files its code loads (static), and what a stage opens when it runs (dynamic). See that module's
docstring for the rules.
"""

from __future__ import annotations

import ast
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import yaml

ROOT = Path(__file__).resolve().parents[1]


TRACER = Path(__file__).with_name("trace_stage.py")


PYTHON_NAMES = {"python", "python3"}  # a cmd's interpreter; the stage script is the first *.py after it


@dataclass(frozen=True)
class Asset:
    directory: str  # under the repository root
    suffix: str


# The functions that read a project file by name: qualified name -> what the name maps to. The checker
# stops with an error when one of them is no longer defined where it says, so a move cannot silently
# turn the SQL and schema checks off.
LOADERS: dict[str, Asset] = {
    "tracelake.core.assets.sql": Asset("sql", ".sql"),
    "tracelake.core.schema.load_schema": Asset("schemas", ".yaml"),
}


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


def expand_stages(dvc: dict[str, Any], params: dict[str, Any],
                  root: Path = ROOT) -> dict[str, dict[str, Any]]:
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
        raise ValueError(f"dvc.yaml stage {stage_name}: cmd {cmd!r} is not `python <script>.py ...`; "
                         "this checker cannot find its code")
    return next(w for w in words if w.endswith(".py"))


def load_yaml(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


# --------------------------------------------------------------------------------------------------
# Static: the import closure of a script and the files its loaders name


def _rel(path: Path, root: Path) -> str:
    return path.resolve().relative_to(root.resolve()).as_posix()


@dataclass
class ModuleFile:
    name: str  # dotted module name ("tracelake.core.lake"; a script's own name is its path)
    path: Path
    is_package: bool
    tree: ast.Module = field(repr=False)
    # top-level name -> ("module", dotted) | ("symbol", dotted module, name) | ("def", name)
    bindings: dict[str, tuple[str, ...]] = field(default_factory=dict)
    scopes: list[tuple[FunctionScope, list[ast.AST]]] = field(default_factory=list, repr=False)
    imports: list[tuple[str, int]] | None = field(default=None, repr=False)  # imported_names, once


class Project:
    """Module lookup over the script's directory and src/ (sys.path[0] and the installed package)."""

    def __init__(self, root: Path, script_dir: Path):
        self.root = root
        self.search = [script_dir, root / "src"]
        self._modules: dict[Path, ModuleFile] = {}
        self._found: dict[str, Path | None] = {}

    def find(self, name: str) -> Path | None:
        """The file of module `name` in the project, or None (stdlib, third party, not a module)."""
        if name not in self._found:
            self._found[name] = None
            parts = name.split(".")
            for base in self.search:
                package = base.joinpath(*parts, "__init__.py")
                module = base.joinpath(*parts).with_suffix(".py")
                if package.is_file() or module.is_file():
                    self._found[name] = package if package.is_file() else module
                    break
        return self._found[name]

    def load(self, path: Path, name: str | None = None) -> ModuleFile:
        if path not in self._modules:
            if name is None:
                name = self.name_of(path)
            tree = ast.parse(path.read_text(), str(path))
            module = ModuleFile(name, path, path.name == "__init__.py", tree)
            module.bindings = _bindings(module, list(tree.body))
            module.scopes = list(_scopes(module))
            self._modules[path] = module
        return self._modules[path]

    def name_of(self, path: Path) -> str:
        for base in self.search:
            try:
                parts = path.relative_to(base).with_suffix("").parts
            except ValueError:
                continue
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        return _rel(path, self.root)

    def module(self, name: str) -> ModuleFile | None:
        path = self.find(name)
        return self.load(path, name) if path else None

    def package_files(self) -> Iterator[Path]:
        """Every module the search path can import (where wrappers of the loaders may live)."""
        yield from sorted((self.root / "src").rglob("*.py"))
        yield from sorted(self.search[0].glob("*.py"))


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """ast.walk that skips the body of `if TYPE_CHECKING:` (it never runs)."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        if isinstance(n, ast.If) and _is_type_checking(n):
            todo.extend(n.orelse)
            continue
        todo.extend(ast.iter_child_nodes(n))


def _from_base(module: ModuleFile, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _bindings(module: ModuleFile, body: list[ast.stmt]) -> dict[str, tuple[str, ...]]:
    """Names bound by imports and defs outside functions (in the module body, if/try blocks included)."""
    bindings: dict[str, tuple[str, ...]] = {}
    todo = list(body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bindings[node.name] = ("def", node.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bindings[alias.asname] = ("module", alias.name)
                else:
                    top = alias.name.split(".")[0]
                    bindings[top] = ("module", top)
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(module, node)
            for alias in node.names:
                if alias.name != "*":
                    bindings[alias.asname or alias.name] = ("symbol", base, alias.name)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    todo.append(child)
                elif isinstance(child, ast.ExceptHandler):
                    todo.extend(child.body)
    return bindings


def imported_names(project: Project, module: ModuleFile) -> list[tuple[str, int]]:
    """(module name, line) for every import in the file, at any depth."""
    if module.imports is None:
        module.imports = list(_imported_names(project, module))
    return module.imports


def _imported_names(project: Project, module: ModuleFile) -> Iterator[tuple[str, int]]:
    nodes = _walk(module.tree)
    if Path(module.path).resolve() == (project.root / "src" / "tracelake" / "__init__.py").resolve():
        # the package root: every module imports it (for __version__), but only its top level runs
        # then; its one function, open_lake, is for notebooks, and no library module or stage calls
        # it (test_architecture.test_nothing_in_the_project_calls_the_roots_open_lake)
        nodes = (n for stmt in module.tree.body if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for n in _walk(stmt))
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(module, node)
            yield base, node.lineno
            for alias in node.names:
                if alias.name != "*" and project.find(f"{base}.{alias.name}"):
                    yield f"{base}.{alias.name}", node.lineno
        elif (isinstance(node, ast.Call) and _dotted(node.func) in ("importlib.import_module", "import_module")
              and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            yield node.args[0].value, node.lineno


def import_closure(project: Project, script: Path) -> dict[Path, tuple[str, ...]]:
    """Every project file running `script` imports -> the chain of modules that brings it in."""
    chains: dict[Path, tuple[str, ...]] = {script: (_rel(script, project.root),)}
    todo = [project.load(script, _rel(script, project.root))]
    while todo:
        module = todo.pop(0)
        for name, _line in imported_names(project, module):
            parts = name.split(".")
            for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__ first
                prefix = ".".join(parts[:i])
                path = project.find(prefix)
                if path and path not in chains:
                    chains[path] = chains[module.path] + (prefix,)
                    todo.append(project.load(path, prefix))
    return chains


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


@dataclass(frozen=True)
class Loader:
    asset: Asset
    position: int | None  # where the name goes: positional index (None: keyword-only) ...
    keyword: str | None  # ... and keyword
    default: ast.expr | None = None


class Ref(NamedTuple):
    text: str
    exact: bool  # False: only the prefix is known


class FunctionScope(NamedTuple):
    module: ModuleFile
    function: ast.FunctionDef | ast.AsyncFunctionDef | None  # None: module level
    qualname: str | None  # "<module>.<function>" for top-level functions, else None
    local: dict[str, tuple[str, ...]]  # names bound by imports inside the function


def _scopes(module: ModuleFile) -> Iterator[tuple[FunctionScope, list[ast.AST]]]:
    """Each function of the module (and the module level) with the nodes it holds itself."""

    def own_nodes(body: list[ast.AST]) -> list[ast.AST]:
        nodes, todo = [], list(body)
        while todo:
            n = todo.pop()
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                if not isinstance(n, ast.Lambda):
                    nodes.extend(n.decorator_list)
                continue
            if isinstance(n, ast.If) and _is_type_checking(n):
                todo.extend(n.orelse)
                continue
            nodes.append(n)
            todo.extend(ast.iter_child_nodes(n))
        return nodes

    yield FunctionScope(module, None, None, {}), own_nodes(module.tree.body)
    top_level = {id(n) for n in module.tree.body}
    for node in ast.walk(module.tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = own_nodes(node.body)
            local = _bindings(module, [n for n in body if isinstance(n, (ast.Import, ast.ImportFrom))])
            qualname = f"{module.name}.{node.name}" if id(node) in top_level else None
            yield FunctionScope(module, node, qualname, local), body


class Resolver:
    """Which calls are loader calls, and what file names their arguments can be."""

    def __init__(self, project: Project):
        self.project = project
        self.loaders: dict[str, Loader] = {}
        for qualname, asset in LOADERS.items():
            module_name, _, func_name = qualname.rpartition(".")
            module = project.module(module_name)
            func = module and next((n for n in module.tree.body if isinstance(n, ast.FunctionDef)
                                    and n.name == func_name), None)
            if not func:
                raise LookupError(f"asset loader {qualname} is not defined any more: update LOADERS in "
                                  f"{Path(__file__).name}")
            self.loaders[qualname] = Loader(asset, 0, func.args.args[0].arg if func.args.args else None)
        self._find_wrappers()

    def canonical(self, module_name: str, name: str, depth: int = 0) -> str:
        """The qualified name of `name` as seen from module `module_name`, following re-exports."""
        module = self.project.module(module_name)
        if module and depth < 20:
            if self.project.find(f"{module_name}.{name}"):
                return f"{module_name}.{name}"
            binding = module.bindings.get(name)
            if binding and binding[0] == "symbol":
                return self.canonical(binding[1], binding[2], depth + 1)
            if binding and binding[0] == "module":
                return binding[1]
        return f"{module_name}.{name}"

    def target(self, scope: FunctionScope, func: ast.expr) -> str | None:
        """The qualified name a call's function refers to, when it is a project function."""
        dotted = _dotted(func)
        if not dotted:
            return None
        head, *rest = dotted.split(".")
        binding = scope.local.get(head) or scope.module.bindings.get(head)
        if binding is None:
            return None
        if binding[0] == "def":
            base = f"{scope.module.name}.{head}"
        elif binding[0] == "symbol":
            base = self.canonical(binding[1], binding[2])
        else:
            base = binding[1]
        if not rest:
            return base
        module, attrs = base, list(rest)
        while len(attrs) > 1 and self.project.find(f"{module}.{attrs[0]}"):
            module = f"{module}.{attrs.pop(0)}"
        return self.canonical(module, attrs[0]) if len(attrs) == 1 else None

    def calls(self, scope: FunctionScope, nodes: list[ast.AST]) -> Iterator[tuple[ast.Call, str, Loader]]:
        for node in nodes:
            if isinstance(node, ast.Call):
                target = self.target(scope, node.func)
                if target in self.loaders:
                    yield node, target, self.loaders[target]

    @staticmethod
    def argument(call: ast.Call, loader: Loader) -> ast.expr | None:
        for kw in call.keywords:
            if kw.arg is not None and kw.arg == loader.keyword:
                return kw.value
        if loader.position is not None and loader.position < len(call.args):
            arg = call.args[loader.position]
            return None if isinstance(arg, ast.Starred) else arg
        return loader.default

    def _find_wrappers(self) -> None:
        """A function that hands one of its own parameters straight to a loader is a loader too."""
        scopes = [s for path in self.project.package_files() for s in self.project.load(path).scopes]
        changed = True
        while changed:
            changed = False
            for scope, nodes in scopes:
                if scope.qualname is None or scope.qualname in self.loaders:
                    continue
                for call, _, loader in self.calls(scope, nodes):
                    arg = self.argument(call, loader)
                    wrapper = isinstance(arg, ast.Name) and _parameter(scope.function, arg.id)
                    if wrapper:
                        self.loaders[scope.qualname] = Loader(loader.asset, *wrapper)
                        changed = True
                        break

    def refs(self, scope: FunctionScope,
             nodes: list[ast.AST]) -> Iterator[tuple[ast.Call, Loader, list[Ref]]]:
        """Each loader call the scope makes itself, with the names it can load (forwarded parameters
        of a wrapper are left to the wrapper's callers)."""
        for call, target, loader in self.calls(scope, nodes):
            arg = self.argument(call, loader)
            if (scope.qualname in self.loaders and isinstance(arg, ast.Name)
                    and _parameter(scope.function, arg.id)):
                continue
            yield call, loader, (_values(arg, scope) if arg is not None else [Ref("", False)])


def _parameter(func: ast.FunctionDef | ast.AsyncFunctionDef | None,
               name: str) -> tuple[int | None, str, ast.expr | None] | None:
    """(position, keyword, default) when `name` is a parameter of func."""
    if func is None:
        return None
    a = func.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for i, arg in enumerate(positional):
        if arg.arg == name:
            return i, (name if arg not in a.posonlyargs else None), defaults[i]
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        if arg.arg == name:
            return None, name, default
    return None


def _values(expr: ast.expr, scope: FunctionScope, depth: int = 0) -> list[Ref]:
    """The strings an expression can be: literals exactly, anything computed as its literal prefix."""
    unknown = [Ref("", False)]
    if depth > 10:
        return unknown
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return [Ref(expr.value, True)]
    if isinstance(expr, ast.JoinedStr):
        prefix = ""
        for part in expr.values:
            if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                return [Ref(prefix, False)]
            prefix += part.value
        return [Ref(prefix, True)]
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        out = []
        for left in _values(expr.left, scope, depth + 1):
            if not left.exact:
                out.append(left)
                continue
            out.extend(Ref(left.text + r.text, r.exact) for r in _values(expr.right, scope, depth + 1))
        return out
    if isinstance(expr, ast.Name):
        if _parameter(scope.function, expr.id):
            return unknown
        own = list(ast.walk(scope.function)) if scope.function else []
        bound = _literal_bindings(expr.id, own, scope, depth)
        if bound == [] and scope.function:  # not bound in the function: a module-level constant?
            bound = _literal_bindings(expr.id, _module_level(scope.module.tree.body), scope, depth)
        return bound or unknown
    return unknown


def _module_level(body: list[ast.stmt]) -> list[ast.AST]:
    """The module's own statements (if/try/with blocks included, function and class bodies not)."""
    nodes: list[ast.AST] = []
    for stmt in body:
        nodes.append(stmt)
        if isinstance(stmt, (ast.If, ast.Try, ast.With, ast.For)):
            children = [c for c in ast.iter_child_nodes(stmt) if isinstance(c, ast.stmt)]
            children += [s for h in getattr(stmt, "handlers", []) for s in h.body]
            nodes.extend(_module_level(children))
    return nodes


def _literal_bindings(name: str, nodes: list[ast.AST], scope: FunctionScope, depth: int) -> list[Ref] | None:
    """What a name is bound to among `nodes`: assignments and for-loop targets over literal tuples and
    lists ([] when it is not bound there); None when a binding is something else (a call, ...)."""
    refs: list[Ref] = []
    for node in nodes:
        if isinstance(node, ast.Assign) and any(name in _names(t) for t in node.targets):
            refs.extend(_values(node.value, scope, depth + 1))
        elif isinstance(node, ast.For) and name in _names(node.target):
            if not isinstance(node.iter, (ast.Tuple, ast.List)):
                return None
            for element in node.iter.elts:
                value = _unpack(node.target, element, name)
                if value is None:
                    return None
                refs.extend(_values(value, scope, depth + 1))
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr, ast.comprehension, ast.withitem)):
            target = getattr(node, "target", None) or getattr(node, "optional_vars", None)
            if target is not None and name in _names(target):
                if isinstance(node, ast.AnnAssign) and node.value is not None:
                    refs.extend(_values(node.value, scope, depth + 1))
                else:
                    return None
    return refs


def _names(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def _unpack(target: ast.expr, value: ast.expr, name: str) -> ast.expr | None:
    if isinstance(target, ast.Name):
        return value if target.id == name else None
    if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
            and len(target.elts) == len(value.elts):
        for t, v in zip(target.elts, value.elts):
            found = _unpack(t, v, name)
            if found is not None:
                return found
    return None


def asset_path(asset: Asset, ref: Ref) -> str:
    """sql/x.sql for an exact name; for a computed one the directory its literal prefix reaches."""
    if ref.exact:
        return posixpath.normpath(f"{asset.directory}/{ref.text}{asset.suffix}")
    return posixpath.normpath(f"{asset.directory}/{posixpath.dirname(ref.text)}")


def _call_text(call: ast.Call, loader: Loader) -> str:
    """The call, shortened to the argument that names the file: run_ingest(table='tasks')."""
    arg = Resolver.argument(call, loader)
    named = next((kw.arg for kw in call.keywords if kw.value is arg), None)
    shown = "" if arg is None else f"{named}={ast.unparse(arg)}" if named else ast.unparse(arg)
    return f"{ast.unparse(call.func)}({shown}{', ...' if len(call.args) + len(call.keywords) > 1 else ''})"


@dataclass
class Closure:
    files: dict[str, str]  # repository-relative file (or directory) -> why the stage needs it


def stage_closure(script: str, root: Path = ROOT, resolvers: dict[Path, Resolver] | None = None) -> Closure:
    """The project files running `script` depends on: its import closure and the assets it names.
    `resolvers` shares the parsed modules between scripts of one directory (one checker run)."""
    script_path = root / script
    resolvers = {} if resolvers is None else resolvers
    if script_path.parent not in resolvers:
        resolvers[script_path.parent] = Resolver(Project(root, script_path.parent))
    resolver = resolvers[script_path.parent]
    project = resolver.project
    chains = import_closure(project, script_path)
    files: dict[str, str] = {}
    for path, chain in chains.items():
        files[_rel(path, root)] = "import: " + " -> ".join(chain)
    for path, chain in chains.items():
        module = project.load(path)
        for scope, nodes in module.scopes:
            for call, loader, refs in resolver.refs(scope, nodes):
                for ref in refs:
                    target = asset_path(loader.asset, ref)
                    where = f"{_rel(path, root)}:{call.lineno}"
                    files.setdefault(target, f"{_call_text(call, loader)} at {where} (import: {' -> '.join(chain)})")
    return Closure(files)


def missing_deps(dvc: dict[str, Any], params: dict[str, Any], root: Path = ROOT) -> list[Missing]:
    """Every (stage, file) where the stage's code needs the file and no dep of the stage covers it."""
    missing: list[Missing] = []
    closures: dict[str, Closure] = {}
    resolvers: dict[Path, Resolver] = {}
    for name, stage in expand_stages(dvc, params, root).items():
        script = posixpath.normpath(script_of(name, stage))
        if script not in closures:
            closures[script] = stage_closure(script, root, resolvers)
        deps = _paths(stage.get("deps"))
        for file, why in closures[script].files.items():
            if not covered(file, deps):
                missing.append(Missing(name, file, why))
    return missing


def explain(missing: list[Missing], what: str) -> str:
    stages = sorted({m.stage for m in missing})
    return (f"dvc.yaml misses {len(missing)} dependenc{'y' if len(missing) == 1 else 'ies'} of "
            f"{len(stages)} stage(s) ({what}); `dvc repro` would not rerun them when these change:\n"
            + "\n".join(map(str, missing))
            + "\nAdd each file, or a directory above it, to the stage's deps in dvc.yaml.")


FAKE_PROJECT = {  # a tiny project exercising each rule of the closure and of loader arguments
    "src/tracelake/__init__.py": "",
    "src/tracelake/core/__init__.py": "",
    "src/tracelake/core/assets.py": "def sql(name):\n    return name\n",
    "src/tracelake/core/schema.py": "def load_schema(name):\n    return name\n",
    "src/tracelake/core/lake.py": ("from .schema import load_schema\n\n"
                                   "def read_table(directory, name):\n    return load_schema(name)\n"),
    "src/tracelake/lib.py": (
        "from tracelake.core import assets\n"
        "from .core.assets import sql as q\n"
        "from tracelake.core.schema import load_schema\n"
        "TABLE = 'const'\n\n"
        "def f(rule, con):\n"
        "    assets.sql('filters/' + rule)\n"
        "    q(f'{rule}.x')\n"
        "    con.sql('not a loader')\n"
        "    for name, _ in (('a', 1), ('b', 2)):\n"
        "        load_schema(name)\n\n"
        "def g():\n"
        "    from tracelake.core.schema import load_schema as ls\n"
        "    ls(TABLE)\n"),
    "src/tracelake/typed.py": "from tracelake.core.assets import sql\nsql('typed')\n",
    "src/tracelake/unused.py": "from tracelake.core.assets import sql\nsql('unused')\n",
    "stages/s.py": (
        "from typing import TYPE_CHECKING\n"
        "from tracelake.core.lake import read_table\n"
        "if TYPE_CHECKING:\n    from tracelake import typed\n\n"
        "def main():\n"
        "    import tracelake.lib\n"
        "    read_table('.', 'pool')\n"),
}


IGNORED_PARTS = {".venv", ".git", ".dvc"}  # environment and DVC's own files, never stage inputs


# Content-addressed caches (params.yaml keys): a stage may read them, but what it finds there never
# changes its output (score.cache: known (task, scorer) keys are not recomputed; tokenizer.cache:
# token counts of known (tokenizer, segment) pairs are not re-encoded; ingest.cache: unchanged input
# files are not parsed again; see params.yaml).
CACHE_PARAMS = ["score.cache", "tokenizer.cache", "ingest.cache", "dedup.cache"]


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
    r'^(\d+)\s+(?:open|openat|openat2)\((?:(AT_FDCWD|\d+), )?"((?:[^"\\]|\\.)*)", ([^,)<]+)')


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
    env = dict(os.environ, PYTHONPATH=str(project / "src"), PYTHONDONTWRITEBYTECODE="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    args = [sys.executable, str(TRACER), f"{logs}.json", *words[1:]]
    if strace_path:
        args = [strace_path, "-f", "-qq", "-s", "65535", "-e", "trace=open,openat,openat2", "-e", "signal=none",
                "-o", f"{logs}.strace", *args]
    proc = subprocess.run(args, cwd=project, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"`{cmd}` failed in {project}:\n{proc.stdout}\n{proc.stderr}"
    record = json.loads(Path(f"{logs}.json").read_text())
    native = None
    if strace_path:
        native = _reads(strace_opens(Path(f"{logs}.strace").read_text(errors="replace")), project, cmd)
    return Trace(_reads(record["opens"], project, cmd), native, record["tracelake"])


def unexplained_reads(name: str, stage: dict[str, Any], reads: list[Read],
                      params: dict[str, Any]) -> list[Missing]:
    """The reads no dep of the stage covers (its own outputs, caches, and params.yaml when the stage
    declares `params` aside)."""
    deps, outs = _paths(stage.get("deps")), outputs_of(stage)
    caches = [posixpath.normpath(str(_lookup(params, key))) for key in CACHE_PARAMS]
    missing = []
    for read in reads:
        if covered(read.file, outs + caches) or (read.file == "params.yaml" and stage.get("params")):
            continue
        if not covered(read.file, deps):
            missing.append(Missing(name, read.file, f"opened for reading by `{read.cmd}`"))
    return missing


def print_closures() -> None:
    """Each stage's closure: the files it needs and why (`!` marks one dvc.yaml misses)."""
    dvc_, params_ = load_yaml(ROOT / "dvc.yaml"), load_yaml(ROOT / "params.yaml")
    seen: set[str] = set()
    shared: dict[Path, Resolver] = {}
    for stage_name, stage_ in expand_stages(dvc_, params_).items():
        script_ = posixpath.normpath(script_of(stage_name, stage_))
        if script_ in seen:
            continue
        seen.add(script_)
        print(f"{stage_name.split('@')[0]} ({script_}):")
        for file_, why_ in sorted(stage_closure(script_, ROOT, shared).files.items()):
            mark = " " if covered(file_, _paths(stage_.get("deps"))) else "!"
            print(f"  {mark} {file_:48} {why_}")



if __name__ == "__main__":
    print_closures()
