"""Whether what the lake holds is what `dvc repro` would build now: DVC's own status of the pipeline.

    fresh = pipeline_freshness(Path("."))
    fresh.stale("export_sft@1k")   # [] when up to date, else the stale stages it is built from

A stage is stale when DVC says it changed (its params, code, inputs or outputs differ from what
dvc.lock recorded, or it never ran), when its source's files differ from their manifest (the stages
DVC runs every time, `scan` and `synth`, are asked what they would change: stages/pending.py), or
when any stage upstream of it did: after a params edit
without `dvc repro`, DVC names the edited stage, and everything built from it is stale too.
`tracelake train` refuses a stale dataset; `status` and `view` flag it. Outside a DVC project, or
while DVC cannot answer (a broken dvc.yaml), nothing is checked and `why` says so.

Reading takes no lock a build would wait for: `dvc status` holds the repository's lock (.dvc/tmp/lock)
and registers its reads in .dvc/tmp/rwlock, so a `dvc repro` started meanwhile fails ("Unable to
acquire lock") after 3 seconds. The status is asked of DVC's own Repo with its lock a no-op and its
rwlock kept in a scratch directory of this process (`_read_only`): it reads dvc.yaml, dvc.lock and the
workspace as they are; while a build writes them it may see the build half done, and calls the stages
it touches stale, which they are until it ends.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

if TYPE_CHECKING:
    import subprocess


@dataclass(frozen=True)
class Freshness:
    checked: bool
    why: str  # one line: how it was checked, or why it was not
    changed: dict[str, list[str]] = field(default_factory=dict)  # stage -> the kinds of change DVC reported
    upstream: dict[str, frozenset[str]] = field(default_factory=dict)  # stage -> every stage it is built from

    def stale(self, stage: str) -> list[str]:
        """The changed stages among `stage` and those upstream of it (sorted); [] when fresh or not checked."""
        if not self.checked:
            return []
        return sorted(s for s in {stage, *self.upstream.get(stage, ())} if s in self.changed)

    def cell(self, stage: str) -> str:
        """What a table shows for a dataset built by `stage`: yes, STALE, or ? when not checked."""
        if not self.checked:
            return "?"
        return "STALE" if self.stale(stage) else "yes"

    def describe(self, stages: Iterable[str]) -> str:
        """`select@1k (changed deps); filter (changed deps)` for the stale ones among `stages`."""
        return "; ".join(f"{s} ({', '.join(self.changed[s])})" for s in sorted(stages))


def _kinds(changes: list) -> list[str]:
    """DVC's status entries for one stage ("always changed", {"changed deps": {...}}, ...) -> their kinds."""
    return sorted({k for c in changes for k in (c if isinstance(c, dict) else {str(c): None})})


def _name(addressing: str) -> str:
    """A stage's name as dvc.yaml gives it: DVC prefixes `path/to/dvc.yaml:` when the project is
    not the working directory."""
    head, _, name = addressing.rpartition(":")
    return name if head.endswith("dvc.yaml") else addressing


def _reachable(graph, start) -> set:
    """Every node reachable from `start` along the graph's edges (DVC's index graph: a stage points at
    the stages it reads from)."""
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.successors(todo.pop()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


CODE_STAGE = "code"  # stages/code.py: every stage's code digest, the first dep of each


def _code_changes(project: Path, changed: dict[str, list[str]], upstream: dict) -> dict[str, list[str]]:
    """DVC says `code` changed (a file under src/, stages/, sql/ or schemas/ was edited), which is
    upstream of every stage; but only the stages whose digest changes are stale. The digests are
    computed again, into a scratch directory, and compared with those the stages were built from;
    if that fails, every stage stays stale (never fresh by mistake)."""
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tracelake-code-") as scratch:
        proc = subprocess.run(
            [sys.executable, "-m", "stages.code", "--out", scratch], cwd=project, capture_output=True, text=True
        )
        if proc.returncode != 0:
            return changed
        now = {p.stem: p.read_bytes() for p in Path(scratch).glob("*.txt")}
    built = project / ".tracelake" / "code"
    out = {stage: kinds for stage, kinds in changed.items() if stage != CODE_STAGE}
    for stage, above in upstream.items():
        name = stage.split("@")[0]
        if CODE_STAGE not in above or name not in now:
            continue
        before = built / f"{name}.txt"
        if not before.is_file() or before.read_bytes() != now[name]:
            out[stage] = sorted({*out.get(stage, []), "changed code"})
    return out


def _always_run(project: Path) -> list[str]:
    """The stages dvc.yaml has DVC run at every repro (`always_changed`: synth, scan)."""
    import yaml

    try:
        stages = yaml.safe_load((project / "dvc.yaml").read_text()).get("stages") or {}
    except (OSError, yaml.YAMLError, AttributeError):
        return []
    return sorted(n for n, s in stages.items() if isinstance(s, dict) and s.get("always_changed") is True)


def _ask_pending(project: Path) -> "subprocess.Popen | None":
    """`python -m stages.pending` for the always-run stages, started at once: it stats every source
    file while DVC's status runs in this process (the two overlap on two cores)."""
    import subprocess
    import sys

    always = _always_run(project)
    if not always:
        return None
    return subprocess.Popen(
        [sys.executable, "-m", "stages.pending", *always],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


def _pending(asked: "subprocess.Popen | None", changed: dict[str, list[str]]) -> dict[str, list[str]]:
    """DVC calls the stages it runs at every repro (synth, scan: they are how inputs DVC does not
    walk are seen) "always changed". In their place, what running them now would change (`python -m
    stages.pending`: the stages whose inputs differ from what they were built from); if that cannot
    be asked, they stay changed (never fresh by mistake)."""
    import orjson

    if asked is None:
        return changed
    out_bytes, _ = asked.communicate()
    try:
        found = orjson.loads(out_bytes) if asked.returncode == 0 else None
    except orjson.JSONDecodeError:
        found = None
    if not isinstance(found, dict):
        return changed
    out = {stage: kinds for stage, kinds in changed.items() if "always changed" not in kinds}
    for stage, kinds in found.items():
        out[stage] = sorted({*out.get(stage, []), *kinds})
    return out


@contextmanager
def _read_only(repo) -> Iterator[None]:
    """`repo` (a dvc.repo.Repo) reading without its locks: the repository lock a no-op, and the
    stage read locks (dvc.rwlock, kept under repo.tmp_dir) in a scratch directory nobody else reads."""
    import tempfile

    from dvc.lock import LockNoop

    with tempfile.TemporaryDirectory(prefix="tracelake-dvc-tmp-") as scratch:
        repo.lock = LockNoop()
        repo.tmp_dir = scratch  # a cached property: the instance's value wins
        yield


def pipeline_freshness(project: Path, targets: list[str] | None = None) -> Freshness:
    """DVC's status of the pipeline at `project` (of `targets` and what they are built from, or of
    every stage), in process. Costs what `dvc status` costs (it hashes the workspace's outputs)."""
    if not (Path(project) / "dvc.yaml").is_file():
        return Freshness(False, "not checked: no dvc.yaml here")
    try:
        from dvc.repo import Repo
    except ImportError:
        return Freshness(False, "not checked: dvc is not installed")
    asked = _ask_pending(Path(project))
    try:
        with Repo(str(project)) as repo, _read_only(repo), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # DVC's own, about its graph library
            status = repo.status(targets=targets, with_deps=bool(targets))
            graph = repo.index.graph  # stage -> the stages whose outputs it reads
            upstream = {
                _name(s.addressing): frozenset(_name(d.addressing) for d in _reachable(graph, s)) for s in graph.nodes
            }
    except Exception as e:  # noqa: BLE001 - DVC's own errors (a broken dvc.yaml, a file half written): reported
        if asked is not None:
            asked.kill()
            asked.wait()
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return Freshness(False, f"not checked: dvc status failed ({first[:200]})")
    changed = {_name(stage): _kinds(changes) for stage, changes in status.items()}
    changed = _pending(asked, changed)
    if CODE_STAGE in changed:
        changed = _code_changes(Path(project), changed, upstream)
    what = ", ".join(targets) + " and what they read" if targets else "every stage"
    why = f"up to date (dvc status: {what})" if not changed else f"dvc status: {len(changed)} stage(s) changed"
    return Freshness(True, why, changed, upstream)
