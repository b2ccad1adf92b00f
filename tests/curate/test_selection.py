"""Selection (mix_v1 + largest_remainder_v1): exactly n rows, deterministic slots, nested datasets,
source mixing (list, top_k, weights) and the dataset label. The quota rule itself is tested in
test_apportion.py; here it is the oracle.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracelake.core.errors import BadInput, BadParams
from tracelake.core.hashing import content_id
from tracelake.core.ids import dataset_label
from tracelake.curate.apportion import apportion, split_by_weights
from tracelake.curate.params import MixParams
from tracelake.curate.select import Task, group_pool, mixed_sources, select

ALL = MixParams(sources="all", weights={}, top_k=None)

# (task_id, source, task name, rollouts, score or None for unscored)
SPEC = [
    ("a1", "alpha", "hello", 3, 120.0),
    ("a2", "alpha", "world", 1, 60.0),
    ("a3", "alpha", "zebra", 2, 15.0),
    ("b1", "beta", "hello", 2, 5.0),  # same task name as a1, another source
    ("b2", "beta", "apple", 4, 0.0),
    ("c1", "gamma", "cli", 1, None),
]
T = len(SPEC)


def pool_rows(spec=SPEC) -> list[dict]:
    return [
        {"trajectory_id": f"{tid}/r{k}", "task_id": tid, "source": src, "task": name}
        for tid, src, name, n_roll, _ in spec
        for k in range(n_roll)
    ]


def scores_of(spec=SPEC) -> dict[str, float]:
    return {tid: s for tid, _, _, _, s in spec if s is not None}


def make_tasks(spec=SPEC) -> dict[str, Task]:
    return group_pool(pool_rows(spec))


def per_task(rows: list[dict]) -> dict[str, list[str]]:
    """task_id -> its rollouts in copy order."""
    out: dict[str, list[tuple[int, str]]] = {}
    for r in rows:
        out.setdefault(r["task_id"], []).append((r["copy"], r["trajectory_id"]))
    return {tid: [rid for _, rid in sorted(v)] for tid, v in out.items()}


# --- group_pool ------------------------------------------------------------------------------


def test_group_pool():
    tasks = make_tasks()
    assert list(tasks) == [s[0] for s in SPEC]
    assert tasks["a1"] == Task("a1", "alpha", "hello", ["a1/r0", "a1/r1", "a1/r2"])
    assert tasks["b1"].source == "beta" and tasks["b1"].task == "hello"
    assert sum(len(t.rollouts) for t in tasks.values()) == len(pool_rows())
    assert group_pool([]) == {}


# --- select: exactly n rows, deterministic slots ---------------------------------------------


@pytest.mark.parametrize("n", [1, T - 1, T, T + 1, 10, 37, 200])
def test_exactly_n_rows(n):
    tasks, scores = make_tasks(), scores_of()
    sel = select(tasks, scores, ALL, n)
    rows = sel.rows
    assert len(rows) == n and sel.counts["rows"] == n
    quotas = Counter(r["task_id"] for r in rows)
    if n >= T:
        assert set(quotas) == set(tasks) and min(quotas.values()) >= 1
    else:
        assert set(quotas.values()) == {1}
    assert dict(quotas) == {t: q for t, q in apportion({t: scores.get(t, 0.0) for t in tasks}, n).items() if q}
    # sorted by (source, task, task_id, copy)
    keys = [(r["source"], r["task"], r["task_id"], r["copy"]) for r in rows]
    assert keys == sorted(keys)
    # copies numbered 0.. per task, named <task>_copyNNNN, cycling the task's sorted rollouts
    for tid, rollouts in per_task(rows).items():
        task = tasks[tid]
        mine = [r for r in rows if r["task_id"] == tid]
        assert [r["copy"] for r in mine] == list(range(len(mine)))
        assert [r["name"] for r in mine] == [f"{task.task}_copy{k:04d}" for k in range(len(mine))]
        ids = sorted(task.rollouts)
        assert rollouts == [ids[k % len(ids)] for k in range(len(mine))]
        assert all(r["source"] == task.source and r["task"] == task.task for r in mine)
        assert all(r["score"] == scores.get(tid, 0.0) for r in mine)
    assert len({r["slot_id"] for r in rows}) == n
    assert len({(r["trajectory_id"], r["copy"]) for r in rows}) == n
    assert set(rows[0]) == {"slot_id", "trajectory_id", "task_id", "source", "task", "copy", "name", "score"}
    c = sel.counts
    assert c["tasks"] == len(quotas) and c["tasks_available"] == T
    assert c["max_rows_per_task"] == max(quotas.values())
    assert c["distinct_trajectories"] == len({r["trajectory_id"] for r in rows})
    assert c["rows_by_source"] == {s: sum(r["source"] == s for r in rows) for s in ("alpha", "beta", "gamma")}


def test_names_example():
    rows = select(make_tasks(), scores_of(), ALL, 10).rows
    a1 = [(r["name"], r["trajectory_id"]) for r in rows if r["task_id"] == "a1"]
    # apportion: R = 4 over 120/60/15/5/0/0 -> a1 gets 1 + 2 (+1 leftover) rows
    assert a1 == [
        ("hello_copy0000", "a1/r0"),
        ("hello_copy0001", "a1/r1"),
        ("hello_copy0002", "a1/r2"),
        ("hello_copy0003", "a1/r0"),
    ]


@pytest.mark.parametrize("seed", range(5))
def test_input_order_does_not_matter(seed):
    rng = random.Random(seed)
    expected = select(make_tasks(), scores_of(), ALL, 23)
    rows = pool_rows()
    rng.shuffle(rows)
    scores = list(scores_of().items())
    rng.shuffle(scores)
    got = select(group_pool(rows), dict(scores), ALL, 23)
    assert got.rows == expected.rows
    assert got.counts == expected.counts


def test_nested_selections_extend():
    """A task's slots at a larger n extend those at a smaller n (the rollout order never changes)."""
    tasks, scores = make_tasks(), scores_of()
    sizes = [1, 3, T, 7, 10, 16, 31, 64, 100]
    seqs = {n: per_task(select(tasks, scores, ALL, n).rows) for n in sizes}
    for small, big in zip(sizes, sizes[1:]):
        for tid in tasks:
            a, b = seqs[small].get(tid, []), seqs[big].get(tid, [])
            if len(b) >= len(a):
                assert b[: len(a)] == a, (tid, small, big)


def test_nested_even_when_a_quota_shrinks():
    # the Alabama paradox from docs/upsampling.md: a has 2 rows at n = 6, 1 at n = 7
    spec = [("a", "s", "a", 2, 1.0), ("b", "s", "b", 2, 3.0), ("c", "s", "c", 2, 3.0)]
    six = per_task(select(make_tasks(spec), scores_of(spec), ALL, 6).rows)
    seven = per_task(select(make_tasks(spec), scores_of(spec), ALL, 7).rows)
    assert {t: len(v) for t, v in six.items()} == {"a": 2, "b": 2, "c": 2}
    assert {t: len(v) for t, v in seven.items()} == {"a": 1, "b": 3, "c": 3}
    assert six["a"][:1] == seven["a"] and seven["b"][:2] == six["b"]


def test_unscored_tasks_get_zero():
    tasks = make_tasks()
    scores = scores_of() | {"not-in-pool": 9.0}
    sel = select(tasks, scores, ALL, 40)
    c1 = [r for r in sel.rows if r["task_id"] == "c1"]
    assert [r["score"] for r in c1] == [0.0]  # score 0: exactly its one guaranteed row
    assert sel.counts["unscored_tasks"] == 1
    sel = select(tasks, {}, ALL, 12)  # nothing scored: an even split
    assert sel.counts["unscored_tasks"] == T
    assert sorted(Counter(r["task_id"] for r in sel.rows).values()) == [2] * T
    assert select(tasks, {}, ALL, 3).counts["tasks"] == 3


# --- mixing ----------------------------------------------------------------------------------


def test_mix_sources_list_restricts():
    tasks, scores = make_tasks(), scores_of()
    mix = MixParams(sources=["beta", "gamma", "absent"], weights={}, top_k=None)
    assert mixed_sources(tasks, scores, mix) == ["beta", "gamma"]
    sel = select(tasks, scores, mix, 9)
    assert {r["source"] for r in sel.rows} == {"beta", "gamma"}
    assert sel.counts["tasks_available"] == 3
    assert sel.counts["rows_by_source"] == {
        "beta": sum(r["source"] == "beta" for r in sel.rows),
        "gamma": sum(r["source"] == "gamma" for r in sel.rows),
    }
    assert sum(sel.counts["rows_by_source"].values()) == 9
    assert mixed_sources(tasks, scores, ALL) == ["alpha", "beta", "gamma"]


def test_mix_top_k_by_mean_score():
    spec = [
        ("x1", "x", "t1", 1, 1.0),
        ("x2", "x", "t2", 1, 5.0),  # mean 3
        ("y1", "y", "t1", 1, 3.0),  # mean 3 (ties with x: name wins)
        ("z1", "z", "t1", 1, 10.0),
        ("z2", "z", "t2", 1, None),  # mean 5: unscored counts as 0
        ("w1", "w", "t1", 1, 2.0),
    ]
    tasks, scores = make_tasks(spec), scores_of(spec)

    def top(k, sources="all"):
        return mixed_sources(tasks, scores, MixParams(sources=sources, weights={}, top_k=k))

    assert top(1) == ["z"]
    assert top(2) == ["x", "z"]
    assert top(3) == ["x", "y", "z"]
    assert top(4) == ["w", "x", "y", "z"]
    assert top(1, ["w", "y"]) == ["y"]
    sel = select(tasks, scores, MixParams(sources="all", weights={}, top_k=2), 8)
    assert {r["source"] for r in sel.rows} == {"x", "z"} and len(sel.rows) == 8
    assert sel.counts["tasks_available"] == 4


@pytest.mark.parametrize(
    ("weights", "n", "split"),
    [
        ({"alpha": 0.75, "beta": 0.25}, 10, {"alpha": 8, "beta": 2}),  # remainders tie: higher weight
        ({"alpha": 0.75, "beta": 0.25}, 11, {"alpha": 8, "beta": 3}),
        ({"alpha": 0.5, "beta": 0.25, "gamma": 0.25}, 7, {"alpha": 3, "beta": 2, "gamma": 2}),
        ({"alpha": 0.7, "beta": 0.3}, 10, {"alpha": 7, "beta": 3}),
        ({"alpha": 0.7, "beta": 0.3}, 2, {"alpha": 1, "beta": 1}),  # fewer rows than alpha's tasks
        ({"alpha": 1.0, "beta": 0.0}, 9, {"alpha": 9}),  # weight 0: no rows
        ({"beta": 1.0}, 5, {"beta": 5}),  # no weight: no rows
    ],
)
def test_mix_weights_split_exactly(weights, n, split):
    tasks, scores = make_tasks(), scores_of()
    mix = MixParams(sources="all", weights=weights, top_k=None)
    sel = select(tasks, scores, mix, n)
    assert len(sel.rows) == n
    got = Counter(r["source"] for r in sel.rows)
    assert dict(got) == split
    assert {s: c for s, c in split_by_weights(weights, n).items() if c} == split
    for source, share in split.items():
        own = {t: scores.get(t, 0.0) for t, task in tasks.items() if task.source == source}
        quotas = Counter(r["task_id"] for r in sel.rows if r["source"] == source)
        assert dict(quotas) == {t: q for t, q in apportion(own, share).items() if q}
    assert sel.counts["rows_by_source"] == {s: split.get(s, 0) for s in ("alpha", "beta", "gamma")}


def test_weighted_source_without_pool_tasks():
    tasks, scores = make_tasks(), scores_of()
    mix = MixParams(sources="all", weights={"alpha": 0.5, "delta": 0.5}, top_k=None)
    with pytest.raises(BadInput, match="delta") as err:
        select(tasks, scores, mix, 10)
    assert "\n" not in str(err.value)
    only_absent = MixParams(sources="all", weights={"delta": 1.0}, top_k=None)
    with pytest.raises(BadInput, match="delta"):
        select(tasks, scores, only_absent, 10)
    # weight 0 for the missing source: nothing is asked of it
    zero = MixParams(sources="all", weights={"alpha": 1.0, "delta": 0.0}, top_k=None)
    assert Counter(r["source"] for r in select(tasks, scores, zero, 10).rows) == {"alpha": 10}


def test_empty_pool():
    with pytest.raises(BadInput, match="no task is left"):
        select({}, {}, ALL, 10)
    with pytest.raises(BadInput, match="no task is left"):
        select(make_tasks(), scores_of(), MixParams(sources=["absent"], weights={}, top_k=None), 10)


# --- dataset_label ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "label"),
    [
        (1, "1"),
        (316, "316"),
        (999, "999"),
        (1000, "1k"),
        (3160, "3.16k"),
        (10000, "10k"),
        (31600, "31.6k"),
        (100000, "100k"),
        (1500, "1.5k"),
    ],
)
def test_dataset_label(n, label):
    assert dataset_label(n) == label


# --- property: any pool, any n ---------------------------------------------------------------

pools = st.lists(
    st.tuples(
        st.sampled_from(["s1", "s2", "s3"]),
        st.integers(1, 5),
        st.one_of(st.none(), st.integers(0, 50), st.floats(0, 1e3, allow_nan=False, allow_infinity=False)),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(pools, st.integers(1, 300))
def test_property_any_pool(pool, n):
    spec = [(f"t{i:02d}", src, f"task{i % 7}", a, s) for i, (src, a, s) in enumerate(pool)]
    tasks, scores = make_tasks(spec), scores_of(spec)
    sel = select(tasks, scores, ALL, n)
    rows = sel.rows
    assert len(rows) == n
    quotas = apportion({t: scores.get(t, 0.0) for t in tasks}, n)
    assert Counter(r["task_id"] for r in rows) == Counter({t: q for t, q in quotas.items() if q})
    for tid, q in quotas.items():
        uses = Counter(r["trajectory_id"] for r in rows if r["task_id"] == tid)
        a = len(tasks[tid].rollouts)
        assert all(uses.get(rid, 0) in (q // a, math.ceil(q / a)) for rid in tasks[tid].rollouts)
    assert len({r["slot_id"] for r in rows}) == n
    keys = [(r["source"], r["task"], r["task_id"], r["copy"]) for r in rows]
    assert keys == sorted(keys)
    assert sel.counts["unscored_tasks"] == sum(s is None for *_, s in spec)


def test_negative_score_is_a_clear_error():
    from tracelake.core.errors import BadInput as _BadInput

    tasks = group_pool([{"trajectory_id": "r1", "task_id": "t1", "source": "s", "task": "a"}])
    with pytest.raises(_BadInput, match=r"task 'a' of s \(t1\) has score -1.0: .*scores >= 0"):
        select(tasks, {"t1": -1.0}, MixParams(), 3)


# --- clusters of near-duplicate tasks (dedup.keep: all) share one quota ---------------------------


def _cluster_tasks() -> dict[str, Task]:
    tasks = {f"t{i}": Task(f"t{i}", "s", f"task-{i}", [f"t{i}-r{j}" for j in range(2)]) for i in range(6)}
    return tasks


def test_a_cluster_gets_the_quota_of_one_task_spread_over_its_members():
    tasks = _cluster_tasks()
    scores = {tid: 1.0 for tid in tasks}
    clusters = {"t0": "t0", "t1": "t0", "t2": "t0"}  # t0, t1, t2: one idea in three phrasings
    plain = select(tasks, scores, ALL, 40)
    shared = select(tasks, scores, ALL, 40, clusters=clusters)
    per_task = Counter(r["task_id"] for r in shared.rows)
    assert len(shared.rows) == 40 and shared.counts["shared_quotas"] == {"clusters": 1, "tasks": 3}
    # four units of equal score: 10 rows each; the cluster's 10 go over its 6 pooled rollouts
    assert per_task["t3"] == per_task["t4"] == per_task["t5"] == 10
    assert per_task["t0"] + per_task["t1"] + per_task["t2"] == 10
    uses = Counter(r["trajectory_id"] for r in shared.rows if r["task_id"] in clusters)
    assert len(uses) == 6 and set(uses.values()) <= {1, 2}  # every member's rollouts, evenly
    assert sum(Counter(r["task_id"] for r in plain.rows)[t] for t in clusters) >= 20  # without: 3 of 6 shares
    assert len({r["slot_id"] for r in shared.rows}) == 40 and len({(r["task"], r["name"]) for r in shared.rows}) == 40


def test_clusters_of_one_task_change_nothing():
    tasks = _cluster_tasks()
    scores = {tid: float(i + 1) for i, tid in enumerate(sorted(tasks))}
    assert select(tasks, scores, ALL, 25, clusters={"t0": "t0", "t1": "t1"}).rows == select(tasks, scores, ALL, 25).rows


# --- max_copies_per_trajectory (copy_cap_v1) ---------------------------------------------------


def uses(rows: list[dict]) -> Counter:
    return Counter(r["trajectory_id"] for r in rows)


LONELY = [*SPEC, ("d1", "delta", "lonely", 1, 10.0)]
HEAVY = MixParams(sources="all", weights={"alpha": 0.5, "beta": 0.45, "delta": 0.05}, top_k=None)


def test_with_copy_cap_warn_a_weight_on_a_one_trajectory_source_is_a_warning_with_its_distinct_count():
    """The finding: 5% of 10k on a source with one trajectory made 500 copies of it, silently.
    select.copy_cap: warn lets it through, and says so."""
    spec, mix = LONELY, HEAVY
    sel = select(make_tasks(spec), scores_of(spec), mix, 10_000, max_copies=64, copy_cap="warn")
    assert len(sel.rows) == 10_000 and uses(sel.rows)["d1/r0"] == 500  # the weight still holds
    # the sources in name order; alpha's 5,000 rows over 6 rollouts and beta's 4,500 over 6 need more
    # than 64 copies too
    assert [w.split(" rows")[0] for w in sel.warnings] == [
        "mix.weights gives alpha 5000 of 10000",
        "mix.weights gives beta 4500 of 10000",
        "mix.weights gives delta 500 of 10000",
    ]
    assert sel.warnings[2] == (
        "mix.weights gives delta 500 of 10000 rows but it has 1 distinct trajectory: 500 copies of it, above "
        "select.max_copies_per_trajectory 64 (lower the weight, add data or raise the cap)"
    )
    assert sel.counts["distinct_trajectories_by_source"] == {"alpha": 6, "beta": 6, "delta": 1, "gamma": 0}
    assert sel.counts["max_copies_per_trajectory"] == {"cap": 64, "largest": max(uses(sel.rows).values())}
    assert max(uses(r for r in sel.rows if r["source"] == "alpha").values()) == math.ceil(5000 / 6)  # evened out


def test_the_cap_moves_rows_to_other_tasks_and_keeps_n_exact():
    tasks, scores = make_tasks(), scores_of()
    plain = select(tasks, scores, ALL, 40)
    assert max(uses(plain.rows).values()) > 4  # a1's score gives it more than 4 copies of a rollout
    sel = select(tasks, scores, ALL, 40, max_copies=4)
    assert len(sel.rows) == 40 and sel.warnings == []
    assert max(uses(sel.rows).values()) <= 4
    assert sel.counts["max_copies_per_trajectory"] == {"cap": 4, "largest": max(uses(sel.rows).values())}
    assert {r["task_id"] for r in sel.rows} == {r["task_id"] for r in plain.rows}  # every task keeps its row
    # a cap that never binds changes nothing
    assert select(tasks, scores, ALL, 40, max_copies=1000).rows == plain.rows


def test_with_copy_cap_warn_a_cap_too_small_for_n_uses_the_fewest_copies_that_fill_it_and_warns():
    tasks, scores = make_tasks(), scores_of()
    distinct = len(pool_rows())  # 13 rollouts
    sel = select(tasks, scores, ALL, 100, max_copies=2, copy_cap="warn")
    assert len(sel.rows) == 100
    assert max(uses(sel.rows).values()) == math.ceil(100 / distinct)
    assert sel.warnings == [
        f"100 rows from {distinct} distinct trajectories: {math.ceil(100 / distinct)} copies of some, above "
        "select.max_copies_per_trajectory 2 (lower the weight, add data or raise the cap)"
    ]


@settings(max_examples=60, deadline=None)
@given(
    pool=st.lists(st.tuples(st.integers(1, 4), st.floats(0, 100)), min_size=1, max_size=12),
    n=st.integers(0, 300),
    cap=st.integers(1, 20),
)
def test_property_the_cap_holds_wherever_it_can(pool, n, cap):
    spec = [(f"t{i}", "s", f"task{i}", a, score) for i, (a, score) in enumerate(pool)]
    tasks, scores = make_tasks(spec), scores_of(spec)
    distinct = sum(a for a, _ in pool)
    bound = max(cap, math.ceil(n / distinct))
    if bound > cap:  # copy_cap: strict (the default) refuses what copy_cap: warn lets through
        with pytest.raises(BadParams, match=f"{n} rows from the {distinct} distinct trajector"):
            select(tasks, scores, ALL, n, max_copies=cap)
    else:
        assert (
            select(tasks, scores, ALL, n, max_copies=cap).rows
            == select(tasks, scores, ALL, n, max_copies=cap, copy_cap="warn").rows
        )
    sel = select(tasks, scores, ALL, n, max_copies=cap, copy_cap="warn")
    assert len(sel.rows) == n
    assert max(uses(sel.rows).values(), default=0) <= bound
    assert bool(sel.warnings) == (bound > cap)
    if n >= len(pool):
        assert {r["task_id"] for r in sel.rows} == set(tasks)  # every task keeps >= 1 row
    if bound * distinct >= n and max(uses(select(tasks, scores, ALL, n).rows).values(), default=0) <= cap:
        assert sel.rows == select(tasks, scores, ALL, n).rows  # where the cap does not bind, nothing moves


# --- select.copy_cap: strict (the default) holds the cap; warn is the old behaviour ----------------


def test_strict_stops_a_weight_that_needs_more_copies_than_the_cap_in_one_line():
    """The finding, refused: 5% of 10k on a source with one trajectory would be 500 copies of it."""
    spec = [("b1", "big", "busy", 200, 1.0), ("d1", "delta", "lonely", 1, 10.0)]
    mix = MixParams(sources="all", weights={"big": 0.95, "delta": 0.05}, top_k=None)
    tasks, scores = make_tasks(spec), scores_of(spec)
    with pytest.raises(BadParams) as err:
        select(tasks, scores, mix, 10_000, max_copies=64, scale="10k")  # strict is the default
    assert str(err.value) == (
        "select 10k: mix.weights gives delta 500 of 10000 rows but it has 1 distinct trajectory: 500 copies of "
        "it, above select.max_copies_per_trajectory 64; lower its weight, add data, raise the cap or set "
        "select.copy_cap: warn"
    )
    assert err.value.exit_code == 2
    # big's 9,500 rows over its 200 rollouts need 48 copies: under the cap, so that weight alone is built
    ok = MixParams(sources="all", weights={"big": 1.0}, top_k=None)
    assert Counter(uses(select(tasks, scores, ok, 9_500, max_copies=64, copy_cap="strict").rows).values()) == {
        48: 100,
        47: 100,
    }


def test_strict_names_the_first_source_over_the_cap_and_the_others():
    with pytest.raises(BadParams) as err:
        select(make_tasks(LONELY), scores_of(LONELY), HEAVY, 10_000, max_copies=64, copy_cap="strict")
    assert str(err.value) == (
        "mix.weights gives alpha 5000 of 10000 rows but it has 6 distinct trajectories: 834 copies of some, above "
        "select.max_copies_per_trajectory 64 (beta, delta are over it too); lower its weight, add data, raise the "
        "cap or set select.copy_cap: warn"
    )
    assert "\n" not in str(err.value)


def test_strict_without_weights_names_n_and_the_mixed_sources():
    with pytest.raises(BadParams) as err:
        select(make_tasks(), scores_of(), ALL, 100, max_copies=2, scale="316")
    assert str(err.value) == (
        "select 316: 100 rows from the 13 distinct trajectories of alpha, beta, gamma: 8 copies of some, above "
        "select.max_copies_per_trajectory 2; build a smaller scale, add data, raise the cap or set "
        "select.copy_cap: warn"
    )


def test_warn_keeps_the_rows_of_before_strict_existed():
    """copy_cap: warn builds exactly what the selection built before the option (slot ids pinned from
    that code), warnings included."""
    sel = select(make_tasks(LONELY), scores_of(LONELY), HEAVY, 10_000, max_copies=64, copy_cap="warn")
    assert content_id("slots", [r["slot_id"] for r in sel.rows]) == "e521a86193e63b95"
    assert len(sel.warnings) == 3
    sel = select(make_tasks(), scores_of(), ALL, 100, max_copies=2, copy_cap="warn")
    assert content_id("slots", [r["slot_id"] for r in sel.rows]) == "03d4cb86af124ad2"
    assert len(sel.warnings) == 1


def test_strict_builds_what_warn_builds_when_the_cap_can_hold():
    tasks, scores = make_tasks(), scores_of()
    strict = select(tasks, scores, ALL, 40, max_copies=4)
    assert strict.rows == select(tasks, scores, ALL, 40, max_copies=4, copy_cap="warn").rows
    assert strict.warnings == [] and max(uses(strict.rows).values()) <= 4


def test_a_null_cap_is_no_cap_even_when_strict():
    """max_copies_per_trajectory: null: 500 copies of one trajectory is what the weight asks, and strict
    has no cap to hold."""
    tasks, scores = make_tasks(LONELY), scores_of(LONELY)
    sel = select(tasks, scores, HEAVY, 10_000, max_copies=None, copy_cap="strict")
    assert sel.warnings == [] and uses(sel.rows)["d1/r0"] == 500
    assert sel.rows == select(tasks, scores, HEAVY, 10_000, max_copies=None, copy_cap="warn").rows
    assert sel.counts["max_copies_per_trajectory"]["cap"] is None


def test_copy_cap_is_strict_or_warn():
    with pytest.raises(ValueError, match="copy_cap must be strict or warn, got 'maybe'"):
        select(make_tasks(), scores_of(), ALL, 10, max_copies=4, copy_cap="maybe")
