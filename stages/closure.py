"""The code a stage depends on, found from its source: the import closure of its modules over the
project's own packages, and the SQL and schema files that code names through the asset loaders
(LOADERS). `python -m stages.dvc_yaml` lists these files as each stage's deps in dvc.yaml.

The rules, all static (nothing is imported):
- absolute and relative imports, imports inside functions, `from pkg import name` where pkg.name is a
  module, every enclosing package's __init__.py, `importlib.import_module("literal")`; imports under
  `if TYPE_CHECKING:` never run and do not count;
- a loader call's argument names a file: a string literal names one file; a function that passes one
  of its own parameters straight to a loader is a loader too, and its callers' literals name the
  files; a local name bound only to literals names each of them; anything else names a directory
  (the literal text before the first computed part, up to its last "/"), else the loader's whole
  directory. A module counts whole: every loader call in a module of the closure counts.
"""

from __future__ import annotations

import ast
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]


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


def covered(path: str, deps: list[str] | tuple[str, ...]) -> bool:
    """A dep covers a path when it is the same path or a directory above it."""
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps)


def _rel(path: Path, root: Path) -> str:
    return path.resolve().relative_to(root.resolve()).as_posix()


@dataclass
class ModuleFile:
    name: str  # dotted module name ("tracelake.core.tables"; a script's own name is its path)
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
        # a script's own directory first (sys.path[0]); run as `python -m`, the root comes after src/
        self.search = [root / "src", root] if script_dir == root else [script_dir, root / "src"]
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
        if self.root in self.search:
            yield from sorted((self.root / "stages").glob("*.py"))
        else:
            yield from sorted(self.search[0].glob("*.py"))


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


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
        nodes = (
            n
            for stmt in module.tree.body
            if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
            for n in _walk(stmt)
        )
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
        elif (
            isinstance(node, ast.Call)
            and _dotted(node.func) in ("importlib.import_module", "import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value, node.lineno


def import_closure(project: Project, script: Path) -> dict[Path, tuple[str, ...]]:
    """Every project file running `script` imports -> the chain of modules that brings it in."""
    name = project.name_of(script)
    chains: dict[Path, tuple[str, ...]] = {script: (name,)}
    todo = [project.load(script, name)]
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
            func = module and next(
                (n for n in module.tree.body if isinstance(n, ast.FunctionDef) and n.name == func_name), None
            )
            if not func:
                raise LookupError(
                    f"asset loader {qualname} is not defined any more: update LOADERS in {Path(__file__).name}"
                )
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

    def refs(self, scope: FunctionScope, nodes: list[ast.AST]) -> Iterator[tuple[ast.Call, Loader, list[Ref]]]:
        """Each loader call the scope makes itself, with the names it can load (forwarded parameters
        of a wrapper are left to the wrapper's callers)."""
        for call, target, loader in self.calls(scope, nodes):
            arg = self.argument(call, loader)
            if scope.qualname in self.loaders and isinstance(arg, ast.Name) and _parameter(scope.function, arg.id):
                continue
            yield call, loader, (_values(arg, scope) if arg is not None else [Ref("", False)])


def _parameter(
    func: ast.FunctionDef | ast.AsyncFunctionDef | None, name: str
) -> tuple[int | None, str, ast.expr | None] | None:
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
    if (
        isinstance(target, (ast.Tuple, ast.List))
        and isinstance(value, (ast.Tuple, ast.List))
        and len(target.elts) == len(value.elts)
    ):
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
    """The project files running `script` (a file run as a script) depends on."""
    return closure([root / script], root, script_dir=(root / script).parent, resolvers=resolvers)


def closure(
    entries: list[Path],
    root: Path = ROOT,
    script_dir: Path | None = None,
    resolvers: dict[Path, Resolver] | None = None,
) -> Closure:
    """The project files importing `entries` (modules under `root` or src/) depends on: their import
    closure and the assets its code names. Modules are found under `script_dir` (default: the root,
    as `python -m` finds them) and src/; `resolvers` shares parsed modules between calls."""
    base = script_dir or root
    resolvers = {} if resolvers is None else resolvers
    if base not in resolvers:
        resolvers[base] = Resolver(Project(root, base))
    resolver = resolvers[base]
    project = resolver.project
    chains: dict[Path, tuple[str, ...]] = {}
    for entry in entries:
        for path, chain in import_closure(project, entry).items():
            chains.setdefault(path, chain)
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
