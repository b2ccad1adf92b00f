"""Clusters of near-duplicate tasks (rule task_clusters_v1): union-find over the verified pairs.

A cluster is named by its representative, the member with the most trajectories (ties: the
smallest task id), so the id is stable while the representative stays. Each member records how it
relates to the representative: `exact` (same normalised text), `minhash` (Jaccard over word
shingles >= the threshold), `embedding` (cosine >= the threshold), or `transitive` (joined through
other members, neither similarity reaching its threshold directly); `representative` and
`unique` (a cluster of one) for the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

CLUSTER_RULE = "task_clusters_v1"


class UnionFind:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        parent = self.parent
        root = i
        while parent[root] != root:
            root = parent[root]
        while parent[i] != root:
            parent[i], i = root, parent[i]
        return root

    def union(self, i: int, j: int) -> None:
        a, b = self.find(i), self.find(j)
        if a != b:
            self.parent[max(a, b)] = min(a, b)  # the smaller index is the root: order-free result


@dataclass(frozen=True)
class Member:
    index: int
    cluster: int  # the representative's index
    size: int


def clusters(n: int, pairs: Iterable[tuple[int, int]], weight: list[int], key: list[str]) -> list[Member]:
    """One Member per item: its cluster's representative (most weight, then smallest key) and size."""
    uf = UnionFind(n)
    for i, j in pairs:
        uf.union(i, j)
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(uf.find(i), []).append(i)
    members: list[Member | None] = [None] * n
    for group in groups.values():
        rep = min(group, key=lambda i: (-weight[i], key[i]))
        for i in group:
            members[i] = Member(i, rep, len(group))
    return members  # type: ignore[return-value]
