"""`tracelake diff A B`: what an ablation changed, row by row, and why.

    with ExitStack() as stack:
        a = resolve_version("main:1k", stack)            # REV:path, a directory, a scale, an id or prefix
        b = resolve_version("fewer-turns:1k", stack)
        report = diff_versions(a, b)                     # plain data: see DIFF_FORMAT below

A version is a built dataset directory with its manifest, of a kind declared in core/datasets.py
(the pool, a scale's selection, its SFT export, the RL export): the kind names its rows' query
(sql/diff/rows_<kind>.sql), what it was drawn from (its parent, walked to the pool), its own dropped
and rejected rows, and the task scores its lineage was drawn by. A dataset of tasks (the RL export:
keyed by task_id) compares only with another. Each side is loaded into DuckDB as one row per dataset
row and compared there by trajectory id (sql/diff/trajectories.sql); nothing loops over rows in
Python. A trajectory that moved is explained from the other side's lineage, the pool and filters it
was built from:
  filter     dropped there by a filter rule (min_assistant_turns_v1, timeout_v1, ...)
  export     rejected there by the export (over_cutoff_len, ...)
  selection  in that side's pool but not selected (or selected with another number of copies); when
             both sides' selections are known (a selection, or the one an export was built from),
             the detail is the task's score on each side, with the scorers' names when the two
             selections were upsampled by different ones (`score proxy_v1 812.5 -> llm_v1 95`)
  input      not among that side's trajectories at all (sources or ingest changed)
The report also has rows per source and per task, turn and token quantiles, the params that differ
(from the manifests of the dataset and its lineage), the scorers both selections upsampled by and the
filter funnel of both pools.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from tracelake.core import assets
from tracelake.core.datasets import KINDS, DatasetKind, dataset_kind, pick_dataset, versions
from tracelake.core.errors import BadInput
from tracelake.core.lake import Lake, is_built
from tracelake.core.outputs import manifest_files, read_manifest
from tracelake.core.revisions import split_spec, tree_at

DIFF_FORMAT = "tracelake_diff_v1"
SCORES = "scores"  # the task scores a lineage names (inputs.scores): params section `score`
STATUSES = ("added", "removed", "reweighted", "changed", "unchanged")
HIST_BINS = 24
TOP_TASKS = 20


@dataclass
class Version:
    """One side of a diff: a built dataset directory and the lineage it was built from."""

    spec: str  # as given on the command line
    rev: str | None  # the git revision it was read at (None: the work tree)
    sha: str | None
    directory: Path  # where its files are (a temporary tree for a revision)
    path: str  # the directory as the user would name it (relative to the repository)
    manifest: dict[str, Any]
    lineage: dict[str, dict[str, Any]] = field(default_factory=dict)  # kind -> manifest, itself first
    homes: dict[str, Path] = field(default_factory=dict)  # kind -> directory, of its lineage found beside it
    notes: list[str] = field(default_factory=list)
    scored: str | None = None  # the lineage kind whose rows carry the task scores it was drawn by, if known

    @property
    def kind(self) -> str:
        return self.manifest["kind"]

    @property
    def declared(self) -> DatasetKind:
        return dataset_kind(self.kind)

    @property
    def pool_kind(self) -> str | None:
        """The lineage kind of the filtered rows it was drawn from (the one with dropped rows keyed by
        trajectory: the pool), when known."""
        return next((k for k in self.homes if dataset_kind(k).dropped and dataset_kind(k).per_trajectory), None)

    @property
    def pool(self) -> Path | None:
        return self.homes[self.pool_kind] if self.pool_kind else None

    @property
    def dataset_id(self) -> str:
        return self.manifest.get("dataset_id") or f"pool-{self.manifest['version_id']}"

    def files(self, table: str = "", kind: str = "") -> list[str]:
        """The Parquet files of the dataset's rows, or of another table of its directory, or of a kind
        of its lineage found beside it (manifests as read when the lineage was found)."""
        kind = kind or self.kind
        table = table or dataset_kind(kind).table
        return [str(f) for f in manifest_files(self.homes[kind], self.lineage[kind], table)]

    @property
    def lineage_known(self) -> bool:
        """Whether a row missing from this side, and not dropped or rejected there, is known to have
        been missing from its input (its pool is known; a dataset of tasks: the tasks are its input)."""
        return self.pool is not None or not self.declared.per_trajectory

    @property
    def scorer(self) -> str | None:
        """The scorer its selection upsampled by (`select.score`), when that selection is known."""
        return self.lineage[self.scored].get("params", {}).get("score") if self.scored else None

    def describe(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "rev": self.rev,
            "commit": self.sha,
            "path": self.path,
            "kind": self.kind,
            "dataset_id": self.dataset_id,
            "version_id": self.manifest["version_id"],
        }


def _find(base: Path, lake: str, ref: str, spec: str) -> Path:
    """A directory (with a manifest), `pool`, a scale name (its selection), `sft-<scale>`, a dataset id
    or a unique prefix of one (6+ hex digits of its hash)."""
    direct = base / ref
    if is_built(direct):
        return direct
    if direct.is_dir() and ("/" in ref or ref.startswith(".")):
        raise BadInput(f"{spec}: {ref} is not a built dataset (no manifest.json)")
    built = versions(Lake(base / lake))
    ids = {name: read_manifest(d).get("dataset_id") or "" for name, d in built.items()}
    where = f" in {lake}/" + (f" at {spec.partition(':')[0]}" if ":" in spec else "")
    try:
        return built[pick_dataset(ref, ids, where=where)]
    except BadInput as e:
        raise BadInput(f"{spec}: {e}") from None


def resolve_version(spec: str, stack: ExitStack, lake: str = "lake", root: Path | str = ".") -> Version:
    """`REV:ref` or `ref`; ref is a directory, `pool`, a scale (its selection), `sft-<scale>` (its SFT
    export), a dataset id or a unique id prefix. A revision is read through DVC into a temporary tree
    that lives as long as `stack`."""
    root = Path(root)
    rev, ref = split_spec(spec)
    sha = None
    if rev is None:
        base = root
    else:
        paths = [lake] + ([ref] if "/" in ref and not _under(ref, lake) else [])
        tree = stack.enter_context(tree_at(rev, paths, root))
        base, sha = tree.root, tree.revision.sha
    directory = _find(base, lake, ref, spec)
    manifest = read_manifest(directory)
    if manifest.get("kind") not in {k.name for k in KINDS}:
        raise BadInput(
            f"{spec}: {ref} holds a {manifest.get('kind')!r} output; diff compares versions of "
            f"{', '.join(k.name for k in KINDS)}"
        )
    path = str(directory.relative_to(base)) if directory.is_relative_to(base) else str(directory)
    version = Version(spec, rev, sha, directory, path, manifest)
    _attach_lineage(version)
    return version


def _under(path: str, lake: str) -> bool:
    parts, lake_parts = Path(path).parts, Path(lake).parts
    return parts[: len(lake_parts)] == lake_parts


def _attach_lineage(v: Version) -> None:
    """Walk what a version was drawn from (core/datasets.py: each kind's parent, in the same lake and
    of the same scale), checking by version id that each is the one its manifest names; then the task
    scores its lineage was drawn by."""
    v.lineage[v.kind] = v.manifest
    v.homes[v.kind] = v.directory
    kind, placed = v.declared, v.declared.lake_of(v.directory)
    if placed is None and kind.parent:
        v.notes.append(f"{v.spec}: not in a lake (no {kind.parent} beside it): moves are explained only in part")
    child = v.manifest
    while placed is not None and kind.parent:
        lake, scale = placed
        parent = dataset_kind(kind.parent)
        if not _link(v, parent.home(lake, scale), parent.name, child.get("inputs", {}).get(kind.parent_input)):
            break
        kind, child = parent, v.lineage[parent.name]
    v.scored = next((k for k in v.homes if dataset_kind(k).task_scores), None)
    scores = next((m["inputs"][SCORES] for m in v.lineage.values() if SCORES in m.get("inputs", {})), None)
    if scores and placed is not None:
        _link(v, placed[0].scores, SCORES, scores, required=False)


def _link(v: Version, directory: Path, kind: str, version_id: str | None, required: bool = True) -> bool:
    if not is_built(directory):
        if required:
            v.notes.append(f"{v.spec}: no {kind} beside it ({directory.name}): moves are explained only in part")
        return False
    m = read_manifest(directory)
    if version_id and m["version_id"] != version_id:
        v.notes.append(
            f"{v.spec}: the {kind} beside it ({m['version_id']}) is not the one it was built from "
            f"({version_id}); run `dvc repro` there: explanations may be off"
        )
    v.lineage[kind] = m
    if kind != SCORES:
        v.homes[kind] = directory
    return True


def flat_params(v: Version) -> dict[str, Any]:
    """The params of a version and its lineage, flat: `filter.min_assistant_turns` -> 5."""
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for k in sorted(value):
                walk(f"{prefix}.{k}", value[k])
        else:
            out[prefix] = value

    for kind, manifest in v.lineage.items():
        params = manifest.get("params", {})
        for key in sorted(params):
            name = param_name(kind, key, params)
            if name is not None:
                walk(name, params[key])
    return out


def param_name(kind: str, key: str, params: dict[str, Any]) -> str | None:
    """The params.yaml name of `key` in the params a `kind` output's manifest records: `<stage>.<key>`,
    or the name its kind declares (core/datasets.py param_names) where the stage records a param of
    another section or its foreach key (None: not a param, e.g. the scale's own name)."""
    if kind == SCORES:
        return f"score.{key}"
    declared = dataset_kind(kind)
    if key in declared.param_names:
        name = declared.param_names[key]
        return None if name is None else name.format(scale=params.get("scale"))
    return f"{declared.stage}.{key}"


def _load_side(con: duckdb.DuckDBPyConnection, side: str, v: Version) -> None:
    """<side>_rows, <side>_pool, <side>_dropped, <side>_xrej, <side>_scores as DuckDB tables, each
    keyed by the kind's key (trajectory_id, or task_id for a dataset of tasks) in `trajectory_id`."""
    kind = v.declared
    query = assets.sql(kind.diff_rows)
    params: dict[str, Any] = {"files": v.files()}
    if "$pool" in query:  # its rows' turns and tokens are the pool's
        if v.pool is None:
            raise BadInput(
                f"{v.spec}: a {kind.name} needs the pool it was drawn from beside it ({kind.parent}) for turns and tokens"
            )
        params["pool"] = v.files(kind=v.pool_kind)
    try:
        con.execute(f"CREATE TABLE {side}_rows AS " + query, params)
    except duckdb.Error as e:
        raise BadInput(f"{v.spec}: cannot read its rows: {str(e).splitlines()[0]}") from None
    if v.pool is not None:
        con.execute(
            f"CREATE TABLE {side}_pool AS SELECT trajectory_id FROM read_parquet($f)", {"f": v.files(kind=v.pool_kind)}
        )
    else:
        con.execute(f"CREATE TABLE {side}_pool (trajectory_id VARCHAR)")
    dropping = v.kind if kind.dropped else v.pool_kind  # its own filters' drops, else its pool's
    dropped = dataset_kind(dropping).dropped if dropping else ""
    if dropped and dropped in v.lineage[dropping]["tables"]:
        con.execute(
            f"CREATE TABLE {side}_dropped AS SELECT {kind.key} AS trajectory_id, rule, detail FROM read_parquet($f)",
            {"f": v.files(dropped, dropping)},
        )
    else:
        con.execute(f"CREATE TABLE {side}_dropped (trajectory_id VARCHAR, rule VARCHAR, detail VARCHAR)")
    if kind.rejects and kind.rejects in v.manifest["tables"]:  # a reject's item: its trajectory, or its task
        item = "trajectory_id" if kind.per_trajectory else "item_id"
        con.execute(
            f"""CREATE TABLE {side}_xrej AS SELECT {item} AS trajectory_id, reason, detail FROM read_parquet($f)
                WHERE {item} IS NOT NULL""",
            {"f": v.files(kind.rejects)},
        )
    else:
        con.execute(f"CREATE TABLE {side}_xrej (trajectory_id VARCHAR, reason VARCHAR, detail VARCHAR)")
    if v.scored is not None:
        declared = dataset_kind(v.scored)
        try:
            con.execute(
                f"CREATE TABLE {side}_scores AS " + assets.sql(declared.task_scores), {"file": v.files(kind=v.scored)}
            )
            return
        except duckdb.Error as e:
            v.notes.append(
                f"{v.spec}: cannot read the task scores of its {declared.name} ({str(e).splitlines()[0]}): "
                f"{declared.name} moves are explained without them"
            )
            v.scored = None
    con.execute(f"CREATE TABLE {side}_scores (task_id VARCHAR, score DOUBLE)")


def _rows(con: duckdb.DuckDBPyConnection, query: str, params: dict | None = None) -> list[dict[str, Any]]:
    rel = con.execute(query, params or {})
    names = [d[0] for d in rel.description]
    return [dict(zip(names, r)) for r in rel.fetchall()]


def diff_versions(a: Version, b: Version) -> dict[str, Any]:
    """The whole comparison as plain data (JSON-ready)."""
    ka, kb = a.declared, b.declared
    if ka.per_trajectory != kb.per_trajectory:
        raise BadInput(
            f"{a.spec} holds {_rows_of(ka)}, {b.spec} {_rows_of(kb)}: a dataset of tasks compares only with "
            f"another dataset of tasks"
        )
    con = duckdb.connect()
    _load_side(con, "a", a)
    _load_side(con, "b", b)
    if a.kind != b.kind:  # contents of different kinds never compare equal: compare ids and copies only
        con.execute("UPDATE a_rows SET content = NULL; UPDATE b_rows SET content = NULL")
    content_stage = "export" if "export" in (ka.content_stage, kb.content_stage) else ka.content_stage
    scores_known = a.scored is not None and b.scored is not None
    con.execute(
        "CREATE TABLE traj AS " + assets.sql("diff/trajectories"),
        {
            "content_stage": content_stage,
            "a_lineage": a.lineage_known,
            "b_lineage": b.lineage_known,
            "missing_rule": "not_in_trajectories" if ka.per_trajectory else "not_in_tasks",
            "scores_known": scores_known,
            "a_scorer": a.scorer,
            "b_scorer": b.scorer,
        },
    )

    totals = _rows(con, assets.sql("diff/status_totals"))
    by_status = {s: {"trajectories": 0, "rows_a": 0, "rows_b": 0} for s in STATUSES}
    for r in totals:
        status = r.pop("status")
        by_status[status] = {k: int(v) for k, v in r.items()}
    rows_a = con.execute("SELECT count(*) FROM a_rows").fetchone()[0]
    rows_b = con.execute("SELECT count(*) FROM b_rows").fetchone()[0]
    explained = _rows(con, assets.sql("diff/explained"))
    moved = _rows(con, assets.sql("diff/moved"))
    con.execute("CREATE TABLE tasks AS " + assets.sql("diff/by_task"))
    task_counts = {s: 0 for s in ("added", "removed", "changed", "unchanged")}
    task_counts |= dict(con.execute("SELECT status, count(*) FROM tasks GROUP BY status").fetchall())
    report = {
        "format": DIFF_FORMAT,
        "a": a.describe() | {"rows": rows_a},
        "b": b.describe() | {"rows": rows_b},
        "identical": a.dataset_id == b.dataset_id,
        "notes": a.notes + b.notes + _kind_notes(a, b),
        "summary": {
            "rows_a": rows_a,
            "rows_b": rows_b,
            "rows_delta": rows_b - rows_a,
            "trajectories": by_status,
            "scorers": _scorers(a, b),
        },
        "explained": explained,
        "sources": _rows(con, assets.sql("diff/by_source")),
        "tasks": {
            "counts": task_counts,
            "top": _rows(
                con, "SELECT * FROM tasks WHERE delta <> 0 ORDER BY abs(delta) DESC, task_id LIMIT $n", {"n": TOP_TASKS}
            ),
        },
        "distributions": _distributions(con),
        "params": _params_diff(a, b),
        "funnel": _funnel_diff(a, b),
        "moved": moved,
    }
    con.close()
    return report


def _rows_of(kind: DatasetKind) -> str:
    return f"{'trajectories' if kind.per_trajectory else 'tasks'} ({kind.name})"


def _scorers(a: Version, b: Version) -> dict[str, Any]:
    """The scorers the two sides' selections upsampled by (None where a side's selection is not known);
    `changed`: both are known and differ."""
    return {"a": a.scorer, "b": b.scorer, "changed": None not in (a.scorer, b.scorer) and a.scorer != b.scorer}


def _kind_notes(a: Version, b: Version) -> list[str]:
    if a.kind == b.kind:
        return []
    return [
        f"comparing {a.kind} with {b.kind}: rows compare by trajectory id and copies only (not content), "
        f"and turns and tokens are counted the way each kind counts them"
    ]


def _distributions(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in _rows(con, assets.sql("diff/quantiles")):
        q = r.pop("q") or [None] * 5
        entry = {
            "n": r["n"],
            "min": r["min"],
            "p10": q[0],
            "p25": q[1],
            "p50": q[2],
            "p75": q[3],
            "p90": q[4],
            "mean": None if r["mean"] is None else round(float(r["mean"]), 2),
            "max": r["max"],
        }
        out.setdefault(r["metric"], {})[r["side"]] = entry
    for metric, column in (("turns", "n_turns"), ("tokens", "n_tokens")):
        sides = out.get(metric, {})
        lo = min((s["min"] for s in sides.values() if s["min"] is not None), default=None)
        hi = max((s["max"] for s in sides.values() if s["max"] is not None), default=None)
        if lo is None:
            out.setdefault(metric, {})["histogram"] = None
            continue
        width = max(1, -(-(hi - lo + 1) // HIST_BINS))
        counts = {"a": [0] * HIST_BINS, "b": [0] * HIST_BINS}
        for r in _rows(con, assets.sql("diff/histogram"), {"metric": column, "lo": lo, "width": width}):
            counts[r["side"]][min(int(r["bin"]), HIST_BINS - 1)] += int(r["rows"])
        n_bins = -(-(hi - lo + 1) // width)
        out[metric]["histogram"] = {
            "lo": lo,
            "hi": hi,
            "width": width,
            "a": counts["a"][:n_bins],
            "b": counts["b"][:n_bins],
        }
    return out


def _params_diff(a: Version, b: Version) -> list[dict[str, Any]]:
    pa_, pb = flat_params(a), flat_params(b)
    return [{"key": k, "a": pa_.get(k), "b": pb.get(k)} for k in sorted(set(pa_) | set(pb)) if pa_.get(k) != pb.get(k)]


def _funnel_diff(a: Version, b: Version) -> dict[str, Any] | None:
    """Per rule: rows dropped in A's pool and in B's, overall and per source."""
    fa, fb = (v.lineage.get("pool", {}).get("counts") for v in (a, b))
    if not fa or not fb:
        return None

    def rows(ca: dict, cb: dict) -> dict[str, Any]:
        rules = list(dict.fromkeys(list(ca.get("dropped", {})) + list(cb.get("dropped", {}))))
        return {
            "in_a": ca.get("in", 0),
            "in_b": cb.get("in", 0),
            "kept_a": ca.get("kept", 0),
            "kept_b": cb.get("kept", 0),
            "rules": [
                {
                    "rule": r,
                    "a": ca.get("dropped", {}).get(r, 0),
                    "b": cb.get("dropped", {}).get(r, 0),
                    "delta": cb.get("dropped", {}).get(r, 0) - ca.get("dropped", {}).get(r, 0),
                }
                for r in rules
            ],
        }

    sources = sorted(set(fa.get("sources", {})) | set(fb.get("sources", {})))
    return {
        "total": rows(fa["total"], fb["total"]),
        "sources": {s: rows(fa["sources"].get(s, {}), fb["sources"].get(s, {})) for s in sources},
    }
