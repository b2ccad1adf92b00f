"""One dataset per scale: mix sources, then upsample tasks in proportion to their scores.

    pool (filtered rollouts) + scores + mix params + N  ->  N slots (task, rollout, copy number)

Mixing (params `mix`): keep the listed sources (or all); `top_k` keeps the k sources whose pool
tasks have the highest mean score; `weights` first splits N across sources (largest remainder) and
apportions each source's share over its own tasks. Without weights every task of every mixed
source competes for the same N. The apportionment rule is in apportion.py and docs/upsampling.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from tracelake.core.errors import BadInput, BadParams, check
from tracelake.core.hashing import content_id
from tracelake.core.ids import copy_name
from tracelake.curate.apportion import (
    APPORTION_RULE,
    COPY_CAP_RULE,
    apportion_capped,
    assign_rollouts,
    copies_needed,
    split_by_weights,
)
from tracelake.curate.params import MixParams

SELECTION_RULE = f"mix_v1+{APPORTION_RULE}+cluster_quota_v1+{COPY_CAP_RULE}"


@dataclass
class Task:
    task_id: str
    source: str
    task: str
    rollouts: list[str] = field(default_factory=list)


@dataclass
class Selection:
    rows: list[dict[str, Any]]
    counts: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


def group_pool(rows: Iterable[dict[str, Any]]) -> dict[str, Task]:
    """task_id -> Task with its rollout ids, from pool rows (trajectory_id, task_id, source, task)."""
    tasks: dict[str, Task] = {}
    for r in rows:
        t = tasks.setdefault(r["task_id"], Task(r["task_id"], r["source"], r["task"]))
        t.rollouts.append(r["trajectory_id"])
    return tasks


def mixed_sources(tasks: dict[str, Task], scores: dict[str, float], mix: MixParams) -> list[str]:
    present = sorted({t.source for t in tasks.values()})
    chosen = present if mix.sources == "all" else [s for s in present if s in mix.sources]
    if mix.top_k is not None:

        def mean_score(source: str) -> float:
            values = [scores.get(t.task_id, 0.0) for t in tasks.values() if t.source == source]
            return sum(values) / len(values)

        chosen = sorted(chosen, key=lambda s: (-mean_score(s), s))[: mix.top_k]
    return sorted(chosen)


def select(
    tasks: dict[str, Task],
    scores: dict[str, float],
    mix: MixParams,
    n: int,
    unscored: str = "zero",
    clusters: dict[str, str] | None = None,
    max_copies: int | None = None,
    copy_cap: str = "strict",
    scale: str | None = None,
) -> Selection:
    """The slots of one dataset of exactly n rows (fewer only when the pool is empty: an error).

    A task without a score (select.unscored): `zero` scores it 0 (it keeps the one rollout every
    task gets), `drop` leaves it out, `error` stops with the count.

    `clusters` (task_id -> cluster_id, from the dedup stage): the tasks of one cluster that are still
    in the pool (dedup.keep: all) share one quota, as one task would, scored by their mean score, and
    their rollouts are pooled (cluster_quota_v1): upsampling never multiplies one idea. A task
    alone in its cluster (every task, with keep: one) is its own unit, as without clusters.

    `max_copies` (select.max_copies_per_trajectory): no rollout fills more than that many rows
    (copy_cap_v1, apportion_capped). Where a source's share (or, without weights, n) needs more
    copies than that of every rollout it has, `copy_cap` (select.copy_cap) decides: `strict` raises
    BadParams, one line naming the scale (`scale`, for the message), the source, its distinct
    trajectories, the copies it would need and the ways out (the first such source; the others are
    counted); `warn` gives each the fewest copies that fill it, and a warning says so. Either way the
    rows of a selection that is built are the same."""
    if copy_cap not in ("strict", "warn"):
        raise ValueError(f"copy_cap must be strict or warn, got {copy_cap!r}")
    sources = mixed_sources(tasks, scores, mix)
    candidates = {tid: t for tid, t in tasks.items() if t.source in sources}
    missing = sorted(tid for tid in candidates if tid not in scores)
    if missing and unscored == "error":
        t = candidates[missing[0]]
        raise BadInput(
            f"{len(missing)} of {len(candidates)} tasks have no score (first: {t.task!r} of {t.source}, "
            f"{missing[0]}); select.unscored: zero or drop selects without them"
        )
    if unscored == "drop":
        candidates = {tid: t for tid, t in candidates.items() if tid in scores}
    if not candidates:
        why = (
            f"select.unscored: drop left out all {len(missing)} unscored tasks"
            if missing and unscored == "drop"
            else "the filters dropped every rollout of the mixed sources (see metrics/filter.json)"
        )
        raise BadInput(f"no task is left to select from: {why}")
    score_of = {tid: scores.get(tid, 0.0) for tid in candidates}
    for tid, value in score_of.items():
        if not value >= 0:  # also catches NaN
            t = candidates[tid]
            raise BadInput(
                f"task {t.task!r} of {t.source} ({tid}) has score {value}: upsampling by score "
                f"share needs scores >= 0 (rescale the scorer's values)"
            )
    units = _units(candidates, clusters or {}, by_source=bool(mix.weights))
    unit_score = {u: sum(score_of[t] for t in members) / len(members) for u, members in units.items()}
    unit_rollouts = {u: sum(len(candidates[t].rollouts) for t in members) for u, members in units.items()}
    warnings: list[str] = []
    over_cap: list[tuple[str, str, str]] = []  # copy_cap: strict: (source, what is over the cap, ways out)

    def capped(scores_of_units: dict[str, float], rows: int, source: str | None) -> dict[str, int]:
        distinct = sum(unit_rollouts[u] for u in scores_of_units)
        need = copies_needed(rows, distinct)
        if max_copies is not None and need > max_copies:
            had = f"{distinct} distinct trajector{'y' if distinct == 1 else 'ies'}"
            if source:
                what = f"mix.weights gives {source} {rows} of {n} rows but it has {had}"
            else:  # the warning keeps its words; the error names the sources
                what = (
                    f"{n} rows from {had}" if copy_cap == "warn" else f"{n} rows from the {had} of {', '.join(sources)}"
                )
            copies = f"{need} copies of {'it' if distinct == 1 else 'some'}"
            what += f": {copies}, above select.max_copies_per_trajectory {max_copies}"
            if copy_cap == "warn":
                warnings.append(f"{what} (lower the weight, add data or raise the cap)")
            else:
                first = "lower its weight" if source else "build a smaller scale"
                over_cap.append((source or "", what, f"{first}, add data, raise the cap or set select.copy_cap: warn"))
        return apportion_capped(scores_of_units, unit_rollouts, rows, max_copies)

    if mix.weights:
        # a weighted source with no task in the pool still takes its share, so that it is an error
        # below instead of its rows silently going to the other sources
        weighted = sorted({*sources, *(s for s in mix.weights if mix.sources == "all" or s in mix.sources)})
        share = split_by_weights({s: float(mix.weights.get(s, 0.0)) for s in weighted}, n)
        quotas: dict[str, int] = {}
        for source in weighted:
            own = {u: unit_score[u] for u, members in units.items() if candidates[members[0]].source == source}
            if share[source] and not own:
                raise BadInput(
                    f"mix.weights gives {source} {share[source]} rows but no rollout of it survived the filters"
                )
            quotas.update(capped(own, share[source], source) if own else {})
    else:
        quotas = capped(unit_score, n, None)
    if over_cap:
        (_, what, ways), others = over_cap[0], [source for source, _, _ in over_cap[1:]]
        also = f" ({', '.join(others)} {'is' if len(others) == 1 else 'are'} over it too)" if others else ""
        raise BadParams(f"{f'select {scale}: ' if scale else ''}{what}{also}; {ways}")

    task_of = {rid: tid for tid, t in candidates.items() for rid in t.rollouts}
    rows = []
    for unit, members in units.items():
        pooled = [rid for tid in members for rid in candidates[tid].rollouts]
        for trajectory_id, copy in assign_rollouts(quotas.get(unit, 0), pooled):
            tid = task_of[trajectory_id]
            task = candidates[tid]
            rows.append(
                {
                    "slot_id": content_id("slot", [trajectory_id, copy]),
                    "trajectory_id": trajectory_id,
                    "task_id": tid,
                    "source": task.source,
                    "task": task.task,
                    "copy": copy,
                    "name": copy_name(task.task, copy),
                    "score": score_of[tid],
                }
            )
    rows.sort(key=lambda r: (r["source"], r["task"], r["task_id"]))  # stable: a task's slots in copy order
    check(len(rows) == n, f"selected {len(rows)} rows for n={n}")
    counts = _counts(rows, candidates, scores, sources)
    counts["max_copies_per_trajectory"] = {"cap": max_copies, "largest": _largest_copies(rows)}
    counts["unscored_tasks"] = len(missing)  # with unscored: drop, those left out
    shared = [members for members in units.values() if len(members) > 1]
    counts["shared_quotas"] = {"clusters": len(shared), "tasks": sum(len(m) for m in shared)}
    return Selection(rows, counts, warnings)


def _units(candidates: dict[str, Task], clusters: dict[str, str], by_source: bool) -> dict[str, list[str]]:
    """unit -> its task ids: a cluster's tasks in the pool share one unit (within one source when
    sources are weighted); every other task is its own. A unit is named by its cluster or task id."""
    units: dict[str, list[str]] = {}
    for tid in sorted(candidates):
        unit = clusters.get(tid, tid)
        if by_source:
            unit = f"{unit}/{candidates[tid].source}" if unit != tid else tid
        units.setdefault(unit, []).append(tid)
    return units


def _largest_copies(rows: list[dict]) -> int:
    uses: dict[str, int] = {}
    for r in rows:
        uses[r["trajectory_id"]] = uses.get(r["trajectory_id"], 0) + 1
    return max(uses.values(), default=0)


def _counts(
    rows: list[dict], candidates: dict[str, Task], scores: dict[str, float], sources: list[str]
) -> dict[str, Any]:
    per_task: dict[str, int] = {}
    by_source = {s: 0 for s in sources}
    distinct_by_source: dict[str, set[str]] = {s: set() for s in sources}
    for r in rows:
        per_task[r["task_id"]] = per_task.get(r["task_id"], 0) + 1
        by_source[r["source"]] += 1
        distinct_by_source[r["source"]].add(r["trajectory_id"])
    return {
        "rows": len(rows),
        "tasks": len(per_task),
        "tasks_available": len(candidates),
        "unscored_tasks": sum(tid not in scores for tid in candidates),
        "distinct_trajectories": len({r["trajectory_id"] for r in rows}),
        "max_rows_per_task": max(per_task.values(), default=0),
        "rows_by_source": by_source,
        "distinct_trajectories_by_source": {s: len(ids) for s, ids in distinct_by_source.items()},
    }
