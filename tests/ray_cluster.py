"""A real Ray cluster on this machine for tests: a head and worker nodes of one CPU each, started
by Ray's own `ray.cluster_utils.Cluster` (separate raylets, as `ray start` makes them)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def local_cluster(workers: int = 2) -> Iterator[object]:
    """A head node (no CPU: it schedules nothing) and `workers` worker nodes of one CPU each; yields
    the Cluster (its `.address` is what RAY_ADDRESS or executor.ray_address name)."""
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # before Ray is imported (core/executor.py)
    pytest.importorskip("ray", reason="Ray is the `ray` extra: uv sync --extra ray (tests/setup.sh installs it)")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        for _ in range(workers):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        cluster.shutdown()
