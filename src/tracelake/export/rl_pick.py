"""Which tasks the RL export keeps (`export_rl.pick`): N tasks of a pool, RL-5K style, by a seeded
uniform order or by a scorer's task scores, within optional score bounds, split across sources by
optional weights. Each task left out is an rl_dropped row with its rule:

  rl_score_bounds_v1  its score (pick.score) is below min_score or above max_score, or it has none
  rl_pick_v1          it passed curation, the bounds and the export's checks, and is not among the N

The pool is what would be exported without a count: the tasks the curation rules keep, within the
bounds, that can run (no export reject): so N is exactly N, or the stage stops and says how many
there are. The order (rule `rl_pick_v1`):

  uniform  sha256("<seed>\\0<task_id>") ascending: a seeded shuffle in which a task's place against
           another never depends on which other tasks are in the pool (adding a source keeps the
           order of the rest)
  highest  score descending, then task_id;   lowest: score ascending, then task_id

With weights, `split_by_weights` (curate/apportion.py, largest remainder) gives each source its
quota of N, and each source takes the first tasks of its own order. Tasks are not repeated: a
source with fewer tasks than its quota stops the stage (SkyRL samples every task of data.train_data
equally; a repeated task would be a second directory of the same environment).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from tracelake.core.errors import BadInput
from tracelake.curate.apportion import split_by_weights

if TYPE_CHECKING:
    from tracelake.export.params import RlPickParams

SCORE_RULE = "rl_score_bounds_v1"
PICK_RULE = "rl_pick_v1"
PICK_RULES = (SCORE_RULE, PICK_RULE)


def out_of_bounds(
    tasks: list[tuple[str, str]], scores: dict[str, float], pick: RlPickParams
) -> dict[str, tuple[str, str]]:
    """task_id -> (SCORE_RULE, detail) for each (task_id, source) of `tasks` whose score is missing
    or outside [pick.min_score, pick.max_score]; nothing when pick.score is unset."""
    if pick.score is None:
        return {}
    bounded = pick.min_score is not None or pick.max_score is not None
    needs = "bounds and orders" if bounded and pick.order != "uniform" else "bounds" if bounded else "orders"
    out: dict[str, tuple[str, str]] = {}
    for task_id, _ in tasks:
        value = scores.get(task_id)
        if value is None:
            detail = f"no {pick.score} score (export_rl.pick.score {needs} the pick)"
        elif pick.min_score is not None and value < pick.min_score:
            detail = f"{pick.score} {value:g} < min_score {pick.min_score:g}"
        elif pick.max_score is not None and value > pick.max_score:
            detail = f"{pick.score} {value:g} > max_score {pick.max_score:g}"
        else:
            continue
        out[task_id] = (SCORE_RULE, detail)
    return out


def ordered(tasks: list[tuple[str, str]], scores: dict[str, float], pick: RlPickParams) -> list[tuple[str, str]]:
    """`tasks` in the pick's order (see the module docstring)."""
    if pick.order == "uniform":
        seed = str(pick.seed).encode()
        return sorted(tasks, key=lambda t: (hashlib.sha256(seed + b"\0" + t[0].encode()).digest(), t[0]))
    sign = -1 if pick.order == "highest" else 1
    return sorted(tasks, key=lambda t: (sign * scores[t[0]], t[0]))


def picked_out(
    eligible: list[tuple[str, str]], scores: dict[str, float], pick: RlPickParams
) -> dict[str, tuple[str, str]]:
    """task_id -> (PICK_RULE, detail) for each of the `eligible` (task_id, source) pairs not among
    the pick.tasks picked; nothing when pick.tasks is unset. Raises BadInput when the pool (or a
    source's part of it) holds fewer tasks than asked."""
    n = pick.tasks
    if n is None:
        return {}
    how = f"{pick.order}, seed {pick.seed}" if pick.order == "uniform" else f"{pick.order} {pick.score}"
    if not pick.weights:
        if len(eligible) < n:
            raise BadInput(
                f"export_rl.pick.tasks is {n}, but only {len(eligible)} tasks pass curation, the score bounds "
                f"and the export's checks: lower it, widen the bounds, or add sources"
            )
        rest = ordered(eligible, scores, pick)[n:]
        return {
            tid: (PICK_RULE, f"rank {n + i + 1} of {len(eligible)} ({how}): not among the {n} picked")
            for i, (tid, _) in enumerate(rest)
        }
    quotas = split_by_weights(dict(pick.weights), n)
    out: dict[str, tuple[str, str]] = {}
    sources = sorted({s for _, s in eligible} | set(quotas))
    for source in sources:
        own = [t for t in eligible if t[1] == source]
        quota = quotas.get(source, 0)
        if len(own) < quota:
            raise BadInput(
                f"export_rl.pick.weights give {source} {quota} of {n} tasks, but only {len(own)} of its tasks "
                f"pass curation, the score bounds and the export's checks (tasks are not repeated): lower its "
                f"weight or export_rl.pick.tasks"
            )
        for i, (tid, _) in enumerate(ordered(own, scores, pick)[quota:]):
            out[tid] = (
                PICK_RULE,
                f"rank {quota + i + 1} of {len(own)} in {source} ({how}): not among its {quota} of {n} "
                f"(export_rl.pick.weights)",
            )
    return out
