"""Proportional upsampling: how many rows each task gets, exactly (rule `largest_remainder_v1`).

`apportion` turns per-task scores (>= 0, higher = harder = more valuable) into quotas that sum to
exactly `n`: every task gets one row, the other `n - T` rows are shared out by score (largest
remainder method); when `n < T` the top-`n` tasks get one row each. `assign_rollouts` says which
rollout fills each of a task's slots, cycling when the quota exceeds the distinct rollouts.
`split_by_weights` shares rows between sources by the same rule. `apportion_capped` (rule
`copy_cap_v1`) bounds how often one rollout repeats. See docs/upsampling.md.

All arithmetic is exact: a float score is the rational number it stores (`Fraction(score)`), and
shares are compared as integers over one common denominator, so no result depends on float rounding
or on the order of the input mapping. Changing any rule here means a new `APPORTION_RULE`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from fractions import Fraction

APPORTION_RULE = "largest_remainder_v1"
COPY_CAP_RULE = "copy_cap_v1"


def _check_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return int(value)


def _exact_weights(values: Mapping[str, float], kind: str, what: str) -> dict[str, int]:
    """Validate `values` and return them as integers over one common denominator (order kept)."""
    ratios: dict[str, tuple[int, int]] = {}
    for key, value in values.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"{kind} id must be a non-empty string, got {key!r}")
        plain = type(value) is float or type(value) is int
        if plain:  # fast path for the common case
            ok = value >= 0 and value != math.inf  # nan fails `>= 0`
        else:
            ok = not isinstance(value, bool) and isinstance(value, numbers.Real)
            ok = ok and (isinstance(value, numbers.Rational) or math.isfinite(value)) and value >= 0
        if not ok:
            raise ValueError(f"{what} for {kind} {key!r} must be a finite number >= 0, got {value!r}")
        ratios[key] = (value if plain else Fraction(value)).as_integer_ratio()
    denom = math.lcm(*{d for _, d in ratios.values()}) if ratios else 1
    return {key: num * (denom // d) for key, (num, d) in ratios.items()}


def _largest_remainder(weights: Mapping[str, int], total: int) -> dict[str, int]:
    """Split `total` by integer `weights` (sum > 0): floor of each exact share `total * w / W`, then
    one more to each of the `total - sum(floors)` largest remainders (ties: higher weight, then id)."""
    wsum = sum(weights.values())
    counts: dict[str, int] = {}
    remainders: dict[str, int] = {}  # remainder numerators; all over the same denominator wsum
    for key, w in weights.items():
        counts[key], remainders[key] = divmod(total * w, wsum)
    left = total - sum(counts.values())  # fewer than the keys with a non-zero remainder, or 0
    if left:
        ranked = sorted(weights, key=lambda k: (-remainders[k], -weights[k], k))
        for key in ranked[:left]:
            counts[key] += 1
    return counts


def apportion(scores: Mapping[str, float], n: int) -> dict[str, int]:
    """Quota per task for a dataset of exactly `n` rows (rule `largest_remainder_v1`).

    Rule, with T = len(scores):
      * n == 0 or T == 0: every task gets 0.
      * n < T: the n highest-scoring tasks get 1 each, the rest 0 (ties: task_id ascending).
      * n >= T: every task gets 1; the R = n - T remaining rows are shared by score. With S the sum
        of scores (all scores taken as 1 when S == 0), task t's exact share is e_t = R * s_t / S;
        it gets floor(e_t), and the R - sum(floor) leftover rows go one each to the tasks with the
        largest remainder e_t - floor(e_t) (ties: higher score, then task_id ascending).

    Guarantees:
      * sum of quotas == n exactly; every task >= 1 when n >= T; quotas are 0/1 when n < T;
      * quota_t is 1 + floor(e_t) or 1 + ceil(e_t): within one row of the exact proportional share;
      * monotone in score: s_a > s_b implies quota_a >= quota_b;
      * deterministic and independent of the iteration order of `scores`; scores are exact
        (`Fraction(score)`), so float rounding never decides a quota.

    Raises ValueError (one line, naming the offender) if n is not an int >= 0, a task id is not a
    non-empty string, or a score is not a finite number >= 0. Runs in O(T log T).
    """
    n = _check_count("n", n)
    weights = _exact_weights(scores, "task", "score")
    quotas = dict.fromkeys(weights, 0)
    tasks = len(weights)
    if n == 0 or tasks == 0:
        return quotas
    if n < tasks:
        for task in sorted(weights, key=lambda t: (-weights[t], t))[:n]:
            quotas[task] = 1
        return quotas
    if sum(weights.values()) == 0:
        weights = dict.fromkeys(weights, 1)
    extra = _largest_remainder(weights, n - tasks)
    return {task: 1 + extra[task] for task in weights}


def assign_rollouts(quota: int, rollout_ids: Sequence[str]) -> list[tuple[str, int]]:
    """The `quota` slots of one task as (rollout_id, copy_index) pairs.

    Rollouts are taken in id order (sorted, so the input order never matters), cycling when the
    quota exceeds their number a: slot k uses sorted_ids[k % a], and copy_index is k (the dataset
    names slot k `<task>_copy{k:04d}`). Each rollout is used floor(quota / a) or ceil(quota / a)
    times, and the slots for quota q are a prefix of those for quota q + 1.

    Raises ValueError if quota is not an int >= 0, an id is not a non-empty string, ids repeat,
    or there are no rollouts while quota > 0.
    """
    quota = _check_count("quota", quota)
    for rid in rollout_ids:
        if not isinstance(rid, str) or not rid:
            raise ValueError(f"rollout id must be a non-empty string, got {rid!r}")
    ids = sorted(rollout_ids)
    for prev, rid in zip(ids, ids[1:]):
        if prev == rid:
            raise ValueError(f"rollout ids must be distinct, {rid!r} repeats")
    if quota and not ids:
        raise ValueError(f"quota is {quota} but the task has no rollouts")
    return [(ids[k % len(ids)], k) for k in range(quota)]


def split_by_weights(weights: Mapping[str, float], n: int) -> dict[str, int]:
    """Split `n` rows across sources in proportion to `weights` (rule `largest_remainder_v1`).

    Source s's exact share is e_s = n * w_s / W (W = sum of weights); it gets floor(e_s), and the
    leftover rows go one each to the largest remainders (ties: higher weight, then name ascending).
    The counts sum to n exactly, each is floor(e_s) or ceil(e_s), a source may get 0, and a higher
    weight never gets fewer rows. Raises ValueError if n is not an int >= 0, a name is not a
    non-empty string, a weight is not a finite number >= 0, or no weight is > 0.
    """
    n = _check_count("n", n)
    exact = _exact_weights(weights, "source", "weight")
    if not any(exact.values()):
        raise ValueError(f"at least one source weight must be > 0, got {len(exact)} sources all 0")
    return _largest_remainder(exact, n)


def copies_needed(n: int, rollouts: int) -> int:
    """The fewest copies of each rollout that n rows over `rollouts` distinct rollouts need: ceil(n / rollouts)."""
    return -(-n // rollouts) if rollouts else 0


def apportion_capped(
    scores: Mapping[str, float], rollouts: Mapping[str, int], n: int, cap: int | None
) -> dict[str, int]:
    """`apportion` with no task's rollout repeated more than `cap` times (rule `copy_cap_v1`).

    A task with a distinct rollouts holds at most cap * a rows. Rule: apportion n over the tasks;
    every task whose quota is above its capacity gets exactly its capacity and leaves; the rows left
    are apportioned over the tasks still in, by the same rule, until no quota is above its capacity.
    A task's quota only shrinks to its capacity, and every other task's only grows, so when n >= T
    every task still gets >= 1; when n < T the quotas are apportion's (0 or 1).

    The cap must leave room for n rows: when cap * (all rollouts) < n, the cap used is
    `copies_needed(n, all rollouts)`, the fewest copies that fill n (the caller warns). `cap` None:
    plain `apportion`.
    """
    if cap is None:
        return apportion(scores, n)
    _check_count("cap", cap)
    if cap < 1:
        raise ValueError(f"cap must be >= 1, got {cap}")
    cap = max(cap, copies_needed(n, sum(rollouts[t] for t in scores)))
    quotas: dict[str, int] = {}
    free, left = dict(scores), n
    while True:
        q = apportion(free, left)
        over = sorted(t for t in free if q[t] > cap * rollouts[t])
        if not over:
            return {t: quotas.get(t, q.get(t, 0)) for t in scores}
        for t in over:
            quotas[t] = cap * rollouts[t]
            left -= quotas[t]
            del free[t]
