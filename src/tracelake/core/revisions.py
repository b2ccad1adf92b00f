"""The lake as it was at a git revision, read through DVC from its cache: no checkout, no copy.

    with tree_at("HEAD~1", ["lake"]) as tree:       # tree.root/lake is the lake at HEAD~1
        con, views = lake_connection(tree.root / "lake")   # explore/sql.py

A revision is anything git or `dvc exp` names: a commit, `HEAD~1`, a branch, a tag, an experiment
name or ref. DVC's filesystem lists each path as that revision's dvc.lock recorded it; each DVC-tracked
file appears as a symlink to its object in the DVC cache (fetched through DVC only when the cache lacks
it: `dvc fetch` / a configured remote), and git-tracked files are copied out of git. The temporary tree
is removed when the block ends.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from tracelake.core.errors import BadInput


@dataclass(frozen=True)
class Revision:
    name: str  # as the user wrote it
    sha: str  # the commit it resolves to


def split_spec(spec: str) -> tuple[str | None, str]:
    """`REV:path` -> (REV, path); anything without a colon -> (None, spec)."""
    rev, sep, path = spec.partition(":")
    if not sep:
        return None, spec
    if not rev or not path:
        raise BadInput(f"{spec!r}: expected REV:PATH (e.g. main:lake/selections/1k or HEAD~1:1k)")
    return rev, path


def inside_repository(path: str) -> str:
    """`path` as a normalised path relative to the repository root, or BadInput when it is not one:
    absolute, empty, the root itself, or climbing out of it with `..`. Every path read at a revision
    passes here, so a revision's files are only ever placed under the temporary tree that holds them."""
    text = str(path)
    norm = posixpath.normpath(text.replace(os.sep, "/")) if text else ""
    if not text.strip() or "\x00" in text or posixpath.isabs(norm) or norm == "." or norm.split("/")[0] == "..":
        raise BadInput(
            f"{text!r} is not a path inside the repository: at a revision, a path names a directory "
            f"below the repository root (e.g. lake)"
        )
    return norm


def _open_repo(root: Path):
    from dvc.exceptions import NotDvcRepoError
    from dvc.repo import Repo

    try:
        return Repo(str(root))
    except NotDvcRepoError:
        raise BadInput(
            f"{root.resolve()} is not a DVC repository: revisions need the project's git "
            f"and DVC history (run from the repository root)"
        ) from None


def resolve(repo, rev: str) -> Revision:
    from dvc.scm import RevError, resolve_rev

    if not rev.strip():
        raise BadInput("the revision is empty: name a commit, branch, tag or `dvc exp` name (e.g. HEAD~1)")
    try:
        return Revision(rev, resolve_rev(repo.scm, rev))
    except RevError:
        raise BadInput(f"unknown revision {rev!r} (a commit, branch, tag or `dvc exp` name)") from None
    except Exception as e:  # scmrepo raises its own types for a repository without commits
        raise BadInput(f"cannot resolve revision {rev!r}: {_first_line(e)}") from None


@dataclass(frozen=True)
class Tree:
    root: Path  # a temporary directory: root/<path> for each path asked for
    revision: Revision
    missing: tuple[str, ...] = ()  # "<path>: <why>" for each directory under a path that DVC could not load


@contextmanager
def tree_at(rev: str, paths: Iterable[str], root: Path | str = ".") -> Iterator[Tree]:
    """A temporary directory holding each of `paths` (relative to the repository root) as it was at
    `rev`. Paths that did not exist at that revision are absent; at least one must exist. Each path
    must lie below the repository root (`inside_repository`), and nothing is written outside the
    temporary directory, which is removed when the block ends."""
    from dvc.api import DVCFileSystem

    root = Path(root)
    paths = [inside_repository(p) for p in paths]
    with _open_repo(root) as repo:
        revision = resolve(repo, rev)
        fs = DVCFileSystem(url=str(root), rev=revision.sha)
        cache = repo.cache.local
        out = Path(tempfile.mkdtemp(prefix=f"tracelake-{revision.sha[:8]}-"))
        try:
            found, missing = 0, []
            for path in paths:
                try:
                    if not fs.exists(path):
                        continue
                except Exception as e:  # DVC raises its own types for a listing it cannot load
                    raise BadInput(_not_cached(path, rev, e)) from None
                files = _listing(fs, path, missing)
                if missing and not files:  # nothing of it in this cache: say how to fetch it
                    raise BadInput(_not_cached(path, rev, missing[0].split(": ", 1)[1]))
                found += 1
                for name, info in files.items():
                    _place(fs, cache, name, info, _target(out, path, name), rev)
            if not found:
                raise BadInput(
                    f"{', '.join(paths)} did not exist at {rev} ({revision.sha[:10]}): "
                    f"was the pipeline built and committed there?"
                )
            yield Tree(out, revision, tuple(missing))
        finally:
            shutil.rmtree(out, ignore_errors=True)


def _listing(fs, path: str, missing: list[str]) -> dict[str, dict]:
    """Every file under `path` (name -> info). A directory DVC cannot load (an output whose data is
    not in this cache) is left out and noted in `missing`, and its siblings are still listed: a query
    at a revision needs the directories it reads, not every output the lake had."""
    try:
        return fs.find(path, detail=True) if fs.isdir(path) else {path: fs.info(path)}
    except Exception as whole:  # DVC raises its own types for a directory listing it cannot load
        try:
            children = fs.ls(path, detail=False)
        except Exception:
            missing.append(f"{path}: {_first_line(whole)}")
            return {}
    files: dict[str, dict] = {}
    for child in children:
        files.update(_listing(fs, child, missing))
    return files


def _not_cached(path: str, rev: str, why: object) -> str:
    reason = _first_line(why) if isinstance(why, Exception) else why
    return (
        f"cannot list {path} at {rev}: its DVC data is not in the cache "
        f"(`dvc fetch --rev {rev}` or `dvc pull` first): {reason}"
    )


def _target(out: Path, path: str, name: str) -> Path:
    """Where file `name` of a listing under `path` goes in the temporary tree `out`: below `out`,
    with no existing link on the way, or BadInput (a listing is never trusted to stay inside)."""
    rel = posixpath.normpath(name.replace(os.sep, "/").lstrip("/"))
    if rel.split("/")[0] == ".." or not (rel == path or rel.startswith(path + "/")):
        raise BadInput(f"{name!r} is listed under {path!r} but lies outside it: refusing to place it")
    target = out.joinpath(*rel.split("/"))
    real_out = os.path.realpath(out)
    ancestor = target.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if os.path.commonpath([real_out, os.path.realpath(ancestor)]) != real_out:
        raise BadInput(f"{name!r} would be written outside the temporary tree: refusing to place it")
    return target


def _place(fs, cache, name: str, info: dict, target: Path, rev: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    md5 = (info.get("dvc_info") or {}).get("md5")
    if md5 and not md5.endswith(".dir"):
        obj = cache.oid_to_path(md5)
        if os.path.isfile(obj):
            os.symlink(obj, target)
            return
    try:
        fs.get_file(name, str(target))
    except Exception as e:
        raise BadInput(
            f"{name} at {rev} is neither in the DVC cache nor fetchable "
            f"(`dvc fetch --rev {rev}` or `dvc pull` first): {_first_line(e)}"
        ) from None


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


@dataclass(frozen=True)
class Recorded:
    """A revision that recorded the pipeline's outputs: a commit that changed dvc.lock, a branch, a
    tag or a `dvc exp` experiment. `name` is what `REV:` takes (diff, view --rev, train --dataset)."""

    kind: str  # commit | branch | tag | experiment
    name: str
    sha: str
    date: str  # committer date, YYYY-MM-DD
    subject: str


def recorded_versions(root: Path | str = ".", commits: int = 10) -> list[Recorded]:
    """Where other versions of the datasets are: experiments (`dvc exp run`, under refs/exps), branches
    and tags, then the last `commits` commits that changed dvc.lock. [] outside a git repository."""
    import subprocess

    def git(*args: str) -> list[list[str]]:
        proc = subprocess.run(["git", *args], cwd=root, capture_output=True, check=False)
        # lines end at \n only: a subject may hold \r, \x85 or \x1c, which splitlines would split at
        lines = proc.stdout.decode("utf-8", "replace").split("\n")
        return [line.split("\x1f") for line in lines if line] if proc.returncode == 0 else []

    ref_format = "--format=%(refname)\x1f%(objectname)\x1f%(committerdate:short)\x1f%(subject)"
    found = []
    for ref, sha, date, subject in git("for-each-ref", "--sort=-committerdate", ref_format, "refs/exps"):
        found.append(Recorded("experiment", ref.rsplit("/", 1)[-1], sha, date, subject))
    for kind, refs in (("branch", "refs/heads"), ("tag", "refs/tags")):
        for ref, sha, date, subject in git("for-each-ref", "--sort=-committerdate", ref_format, refs):
            found.append(Recorded(kind, ref.split("/", 2)[2], sha, date, subject))
    for sha, date, subject in git("log", f"-n{commits}", "--format=%H\x1f%cs\x1f%s", "--", "dvc.lock"):
        found.append(Recorded("commit", sha[:10], sha, date, subject))
    return found
