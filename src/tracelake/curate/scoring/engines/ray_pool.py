"""The local engines (vLLM's offline `LLM.generate`, transformers' `generate`) on a Ray cluster: one
engine per GPU of the cluster (on a cluster without GPUs, one per node with CPUs), each a Ray task
that runs local.py's worker on its node and streams its answers back as they come.

The requests the answer cache does not hold are dealt round-robin to the engines; every answer is
yielded to the caller as it arrives, and the caller stores it at once. A task lost with its node is
not run again by Ray (its answers so far are stored; asking again would pay for them twice): the
stage stops with the node's error, and a rerun asks only what is still missing. Every node runs
the engine's interpreter at the same path as here (score.model.python, or the default environment:
docs/cluster.md).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from tracelake.core.executor import Executor, raise_task_error
from tracelake.curate.scoring.engines import Answer, Engine, Failure, GenRequest
from tracelake.curate.scoring.engines.local import LocalEngine


def _answer_share(engine: LocalEngine, requests: list[GenRequest]) -> Iterator[Answer | Failure]:
    """A Ray task: one engine on this node answering its share, answers yielded as they come."""
    yield from engine.answers(requests)


class RayEngine(Engine):
    """`engine` (a LocalEngine) replicated over the Ray cluster the executor joins."""

    def __init__(self, engine: LocalEngine, executor: Executor):
        super().__init__()
        self.engine, self.executor = engine, executor
        ray = executor.join_ray()  # made only when some request is not cached: Ray is joined then
        self.gpus = int(ray.cluster_resources().get("GPU", 0))
        nodes = sum(1 for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1)
        self.replicas = self.gpus or max(1, nodes)
        unit = "GPU" if self.gpus else "node"
        self.label = f"{engine.label} on Ray, one engine per {unit}: {self.replicas}"

    def answers(self, requests: Iterable[GenRequest]) -> Iterator[Answer | Failure]:
        requests = list(requests)
        if not requests:
            return
        ray = self.executor.join_ray()
        n = min(len(requests), self.replicas)
        resources = {"num_gpus": 1} if self.gpus else {"num_cpus": 1}
        task = ray.remote(max_retries=0)(_answer_share).options(**resources)
        streams = [task.remote(self.engine, requests[i::n]) for i in range(n)]
        arrived: queue.Queue[tuple[str, Any]] = queue.Queue()

        def drain(stream: Any) -> None:
            try:
                for ref in stream:
                    arrived.put(("answer", ray.get(ref)))
            except BaseException as e:  # raised in the driver's thread below
                arrived.put(("error", e))
            finally:
                arrived.put(("done", None))

        threads = [threading.Thread(target=drain, args=(s,), daemon=True) for s in streams]
        for t in threads:
            t.start()
        running = len(threads)
        try:
            while running:
                kind, value = arrived.get()
                if kind == "done":
                    running -= 1
                elif kind == "error":
                    raise_task_error(ray, value)
                else:
                    self.usage.record(value)  # the engine's own count stayed on its node
                    yield value
        finally:
            for stream in streams:  # a stopped run (Ctrl-C, an error) stops the engines too
                try:
                    ray.cancel(stream, force=True)
                except Exception:  # already finished
                    pass
