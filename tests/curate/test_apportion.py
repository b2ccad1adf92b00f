"""Proportional upsampling (largest_remainder_v1): exact quotas, checked against a Fraction oracle.

The oracle here recomputes each exact share e_t = R * s_t / S with `fractions.Fraction`, independently
of the integer arithmetic in the module, and the properties are the guarantees docs/upsampling.md
promises: exact total, at least one row per task, within one row of the exact share, monotone in
score, independent of input order, top-n when n < T.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracelake.curate.apportion import APPORTION_RULE, apportion, assign_rollouts, split_by_weights

PROPS = settings(max_examples=300, deadline=None)

task_ids = st.text(alphabet="abcdefgh", min_size=1, max_size=4)
scores_values = st.one_of(
    st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False),
    st.integers(min_value=0, max_value=1000),
    st.sampled_from([0.0, 0.1, 0.2, 0.3, 1.0, 1e-300, 5e-324, 1e300]),
)
score_maps = st.dictionaries(task_ids, scores_values, max_size=25)
counts = st.integers(min_value=0, max_value=300)


def exact_shares(scores: dict, n: int) -> dict[str, Fraction]:
    """e_t = (n - T) * s_t / S, all scores taken as 1 when S == 0."""
    fr = {t: Fraction(s) for t, s in scores.items()}
    if sum(fr.values()) == 0:
        fr = dict.fromkeys(fr, Fraction(1))
    total = sum(fr.values())
    rest = n - len(fr)
    return {t: rest * s / total for t, s in fr.items()}


# --- apportion: properties -------------------------------------------------------------------


@PROPS
@given(score_maps, counts)
def test_quotas_sum_to_n_exactly(scores, n):
    q = apportion(scores, n)
    assert set(q) == set(scores)
    assert sum(q.values()) == (n if scores else 0)
    assert all(isinstance(v, int) and v >= 0 for v in q.values())


@PROPS
@given(score_maps, counts)
def test_every_task_gets_one_when_n_covers_tasks(scores, n):
    q = apportion(scores, n)
    if n >= len(scores):
        assert all(v >= 1 for v in q.values())
    else:
        assert set(q.values()) <= {0, 1}


@PROPS
@given(score_maps, counts)
def test_quota_within_one_of_exact_share(scores, n):
    n = n + len(scores)  # the n >= T case
    q = apportion(scores, n)
    for t, e in exact_shares(scores, n).items():
        assert q[t] in (1 + math.floor(e), 1 + math.ceil(e)), (t, e, q[t])
        if e.denominator == 1:
            assert q[t] == 1 + e


@PROPS
@given(score_maps, counts)
def test_monotone_in_score(scores, n):
    q = apportion(scores, n)
    for a, sa in scores.items():
        for b, sb in scores.items():
            if Fraction(sa) > Fraction(sb):
                assert q[a] >= q[b], (a, sa, q[a], b, sb, q[b])


@PROPS
@given(score_maps, counts, st.data())
def test_independent_of_input_order(scores, n, data):
    order = data.draw(st.permutations(list(scores)))
    shuffled = {t: scores[t] for t in order}
    assert apportion(shuffled, n) == apportion(scores, n)


@PROPS
@given(score_maps, st.data())
def test_fewer_rows_than_tasks_gives_top_n(scores, data):
    n = data.draw(st.integers(min_value=0, max_value=max(len(scores) - 1, 0)))
    q = apportion(scores, n)
    top = sorted(scores, key=lambda t: (-Fraction(scores[t]), t))[:n]
    assert {t for t, v in q.items() if v == 1} == set(top)
    assert sum(q.values()) == n


@PROPS
@given(st.lists(task_ids, unique=True, min_size=1, max_size=30), counts)
def test_all_zero_scores_split_evenly(tasks, n):
    q = apportion(dict.fromkeys(tasks, 0.0), n)
    assert sum(q.values()) == n
    assert max(q.values()) - min(q.values()) <= 1
    if n >= len(tasks):  # the extra rows go to the first task ids
        extra = sorted(tasks)[: (n - len(tasks)) % len(tasks)]
        assert {t for t in tasks if q[t] == max(q.values())} == set(extra or tasks)


# --- apportion: examples ---------------------------------------------------------------------


def test_rule_name():
    assert APPORTION_RULE == "largest_remainder_v1"


def test_worked_example_from_docs():
    scores = {"a": 120, "b": 60, "c": 15, "d": 5}
    e = exact_shares(scores, 10)
    assert e == {"a": Fraction(18, 5), "b": Fraction(9, 5), "c": Fraction(9, 20), "d": Fraction(3, 20)}
    assert apportion(scores, 10) == {"a": 5, "b": 3, "c": 1, "d": 1}
    assert apportion(scores, 3) == {"a": 1, "b": 1, "c": 1, "d": 0}
    assert apportion(scores, 4) == {"a": 1, "b": 1, "c": 1, "d": 1}
    assert apportion(scores, 0) == {"a": 0, "b": 0, "c": 0, "d": 0}
    assert assign_rollouts(5, ["r2", "r1"]) == [("r1", 0), ("r2", 1), ("r1", 2), ("r2", 3), ("r1", 4)]


def test_tie_breaks():
    # equal remainders (1/2 each): the higher score takes the leftover row
    assert apportion({"p": 3, "q": 1}, 4) == {"p": 3, "q": 1}
    # equal scores: task_id ascending, both for leftovers and for n < T
    assert apportion({"y": 1.0, "x": 1.0, "z": 1.0}, 4) == {"x": 2, "y": 1, "z": 1}
    assert apportion({"y": 2.0, "x": 2.0, "z": 1.0}, 1) == {"x": 1, "y": 0, "z": 0}


def test_scores_are_exact_not_rounded():
    # the stored binaries of 0.1, 0.2, 0.3 give shares just above 1 and 2 and just below 3:
    # floors 1 + 2 + 2 leave one row, which goes to c's remainder (closest to 1)
    scores = {"a": 0.1, "b": 0.2, "c": 0.3}
    e = exact_shares(scores, 9)
    assert 1 < e["a"] < Fraction(1001, 1000) and 2 < e["b"] < Fraction(2001, 1000) and Fraction(2999, 1000) < e["c"] < 3
    assert apportion(scores, 9) == {"a": 2, "b": 3, "c": 4}


def test_empty_pool():
    assert apportion({}, 0) == {}
    assert apportion({}, 5) == {}


@pytest.mark.parametrize("bad", [-1.0, -1e-300, math.nan, math.inf, -math.inf, True, "3"])
def test_invalid_score_names_the_task(bad):
    with pytest.raises(ValueError) as err:
        apportion({"good": 1.0, "task-17": bad}, 5)
    msg = str(err.value)
    assert "task-17" in msg and repr(bad) in msg and "\n" not in msg


@pytest.mark.parametrize("bad", [-1, 2.0, 1.5, True, None])
def test_invalid_n(bad):
    with pytest.raises(ValueError, match="n must be an int >= 0"):
        apportion({"a": 1.0}, bad)


@pytest.mark.parametrize("bad", ["", 3, None])
def test_invalid_task_id(bad):
    with pytest.raises(ValueError, match="task id"):
        apportion({bad: 1.0}, 2)


def test_hundred_thousand_tasks():
    rng = random.Random(20240601)
    scores = {f"task-{i:06d}": rng.random() * 100 for i in range(100_000)}
    scores.update({f"zero-{i}": 0.0 for i in range(10)})
    q = apportion(scores, 1_000_000)
    assert sum(q.values()) == 1_000_000
    assert min(q.values()) >= 1


# --- assign_rollouts -------------------------------------------------------------------------

rollout_lists = st.lists(st.text(alphabet="rstuvw0123", min_size=1, max_size=5), unique=True, max_size=12)


@PROPS
@given(st.integers(min_value=0, max_value=60), rollout_lists)
def test_assign_rollouts_cycles_evenly(quota, ids):
    if quota > 0 and not ids:
        with pytest.raises(ValueError):
            assign_rollouts(quota, ids)
        return
    slots = assign_rollouts(quota, ids)
    assert len(slots) == quota
    assert [k for _, k in slots] == list(range(quota))
    assert all(rid == sorted(ids)[k % len(ids)] for rid, k in slots)
    used = Counter(rid for rid, _ in slots)
    uses = [used.get(rid, 0) for rid in ids]
    if ids:
        assert max(uses) - min(uses) <= 1
        assert set(uses) <= {quota // len(ids), -(-quota // len(ids))}


@PROPS
@given(st.integers(min_value=0, max_value=60), rollout_lists.filter(bool), st.data())
def test_assign_rollouts_nested_and_order_free(quota, ids, data):
    slots = assign_rollouts(quota, ids)
    assert assign_rollouts(quota + 1, ids)[:quota] == slots
    assert assign_rollouts(quota, data.draw(st.permutations(ids))) == slots


def test_assign_rollouts_errors():
    assert assign_rollouts(0, []) == []
    with pytest.raises(ValueError, match="no rollouts"):
        assign_rollouts(1, [])
    with pytest.raises(ValueError, match="'r1' repeats"):
        assign_rollouts(2, ["r1", "r2", "r1"])
    with pytest.raises(ValueError, match="quota must be an int >= 0"):
        assign_rollouts(-1, ["r1"])
    with pytest.raises(ValueError, match="rollout id"):
        assign_rollouts(1, ["r1", ""])


# --- split_by_weights ------------------------------------------------------------------------

weight_maps = st.dictionaries(task_ids, scores_values, min_size=1, max_size=10).filter(
    lambda w: any(Fraction(v) > 0 for v in w.values())
)


@PROPS
@given(weight_maps, counts, st.data())
def test_split_by_weights(weights, n, data):
    split = split_by_weights(weights, n)
    assert set(split) == set(weights) and sum(split.values()) == n
    total = sum(Fraction(w) for w in weights.values())
    for s, w in weights.items():
        e = n * Fraction(w) / total
        assert split[s] in (math.floor(e), math.ceil(e))
        for s2, w2 in weights.items():
            if Fraction(w) > Fraction(w2):
                assert split[s] >= split[s2]
    order = data.draw(st.permutations(list(weights)))
    assert split_by_weights({s: weights[s] for s in order}, n) == split


def test_split_by_weights_examples_and_errors():
    assert split_by_weights({"main": 3, "extra": 1}, 10) == {"main": 8, "extra": 2}
    assert split_by_weights({"main": 1, "never": 0}, 7) == {"main": 7, "never": 0}
    with pytest.raises(ValueError, match="at least one source weight"):
        split_by_weights({"a": 0, "b": 0.0}, 3)
    with pytest.raises(ValueError, match="at least one source weight"):
        split_by_weights({}, 3)
    with pytest.raises(ValueError, match="'b'"):
        split_by_weights({"a": 1, "b": -2}, 3)
