"""Where a stage's heavy work runs: in this process (`local`), in this machine's cores
(`processes`), or on a Ray cluster (`ray`). The executor is never part of a version id and never
changes a byte: a stage maps a pure shard function over deterministic shards and gets the results
back in shard order, whoever computed them (docs/cluster.md).

    executor = Executor.open(params.executor)          # or Executor("local")
    for result in executor.map(count_shard, shards):   # in the order of `shards`
        ...

`map` keeps at most `window` shards in flight (two per worker), so memory holds a few shards, never
a whole input. An item wrapped in `Ready` needs no work (a cached result, a marker) and is passed
through in its place. On Ray each shard is a task: a task lost with its worker or node is run again
elsewhere (Ray's `max_retries`), and a shard function writes only files named by its shard, so an
attempt run twice writes the same bytes. The driver (the stage's own process, as DVC runs it) joins
the cluster at `executor.ray_address`, else `RAY_ADDRESS`, else starts a Ray of its own for the run.
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tracelake.core.errors import BadParams

T = TypeVar("T")
R = TypeVar("R")

KINDS = ("local", "processes", "ray")
ENV_KIND = "TRACELAKE_EXECUTOR"  # overrides executor.kind (and is overridden by --executor)
SHARD_LOG_ENV = "TRACELAKE_SHARD_LOG"  # a file: one line per shard execution started and done (run_shard)
RAY_RETRIES = 3  # attempts of a shard lost with its worker or node, after the first


@dataclass(frozen=True)
class Ready:
    """An item that needs no work (a marker, a cached result): passed through in its place."""

    value: Any


def cpu_count() -> int:
    """The CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def worker_count(requested: int) -> int:
    """Worker processes for `executor.workers`: 0 means one per CPU this process may use, and none
    at all (work in this process) on a single CPU, where a worker only adds copying."""
    if requested > 0:
        return requested
    cpus = cpu_count()
    return cpus if cpus > 1 else 0


@dataclass
class Executor:
    """Maps shard functions for one stage run; `describe` and `record` say what ran where (the
    stage summary, `tracelake status`)."""

    kind: str = "local"
    workers: int = 0  # processes: worker processes (0: one per core); ray: shards in flight (0: two per CPU)
    ray_address: str | None = None
    shards: int = 0  # shards mapped (a Ready item is none)
    started: float = field(default_factory=time.monotonic)
    note: str = ""  # why this kind, where it is not the one asked for (describe)
    _ray_owned: bool = False  # this run started its own Ray (no cluster named)
    _ray_nodes: int = 0
    _ray_cpus: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise BadParams(f"executor: unknown kind {self.kind!r} (one of {', '.join(KINDS)})")

    @classmethod
    def open(cls, params: Any = None, kind: str | None = None, uses_every_core: bool = False) -> "Executor":
        """From params.yaml's `executor` section; `kind` (the --executor option), else the
        TRACELAKE_EXECUTOR variable, overrides its kind. For work that already keeps every core of
        this machine busy (`uses_every_core`: token counting), `processes` from params.yaml means
        this process: a worker pool only adds copying there (2 cores: 0.92x for counting, 0.53x
        for the SFT export with its counts recalled; 16 cores: 0.83x for counting)."""
        chosen = kind or os.environ.get(ENV_KIND)
        kind = chosen or (params.kind if params is not None else "local")
        workers = params.workers if params is not None else 0
        address = params.ray_address if params is not None else None
        if uses_every_core and not chosen and kind == "processes":
            return cls("local", workers, address, note="its token counting uses every core itself")
        return cls(kind, workers, address)

    # --- mapping ---------------------------------------------------------------------------------

    def map(self, fn: Callable[[T], R], items: Iterable[T | Ready], window: int | None = None) -> Iterator[R]:
        """fn over items, results in input order (a Ready item's value in its place, untouched),
        with at most `window` shards in flight (default: two per worker)."""
        shards = self._shards(fn, items)
        if self.kind == "ray":
            yield from self._ray_map(shards, window)
            return
        workers = worker_count(self.workers) if self.kind == "processes" else 0
        if workers < 1:
            yield from (item.value if isinstance(item, Ready) else run_shard(item) for item in shards)
            return
        yield from _process_map(shards, workers, window or 2 * workers)

    def _shards(self, fn: Callable[[T], R], items: Iterable[T | Ready]) -> Iterator[Shard | Ready]:
        log = os.environ.get(SHARD_LOG_ENV) or None
        log = os.path.abspath(log) if log else None
        for item in items:
            if isinstance(item, Ready):
                yield item
            else:
                self.shards += 1
                yield Shard(fn, item, self.shards - 1, os.getcwd(), log)

    def _ray_map(self, shards: Iterable[Shard | Ready], window: int | None) -> Iterator[Any]:
        ray = task = None  # Ray is joined at the first shard: a stage with nothing to do never starts it
        pending: deque[Any] = deque()
        for item in shards:
            if not isinstance(item, Ready) and task is None:
                ray = self.join_ray()
                task = ray.remote(max_retries=RAY_RETRIES)(run_shard)
                window = window or 2 * max(1, self.workers or self._ray_cpus)
            pending.append(item if isinstance(item, Ready) else task.remote(item))
            if len(pending) >= (window or 1):
                yield _ray_result(ray, pending.popleft())
        while pending:
            yield _ray_result(ray, pending.popleft())

    def join_ray(self) -> Any:
        """The `ray` module, joined to the cluster (once per run)."""
        # Read when Ray is imported: Ray would otherwise run the workers of a driver started by
        # `uv run` through `uv run` on each node; the nodes run the tracelake installed there
        # (docs/cluster.md). RAY_ENABLE_UV_RUN_RUNTIME_ENV=1 opts in.
        os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
        try:
            import ray
        except ImportError:
            raise BadParams(
                "executor ray: Ray is not installed here; install the extra (pip install 'tracelake[ray]', "
                "or uv sync --extra ray) on this machine and on every node of the cluster"
            ) from None
        if not ray.is_initialized():
            address = self.ray_address or os.environ.get("RAY_ADDRESS") or None
            kwargs: dict[str, Any] = {"logging_level": "WARNING", "log_to_driver": False}
            if address is None:
                self._ray_owned = True
                kwargs |= {"include_dashboard": False, "num_cpus": self.workers or cpu_count()}
            else:
                reachable(address)
            try:
                ray.init(address=address, **kwargs)
            except ConnectionError as e:
                raise BadParams(f"executor ray: cannot join the Ray cluster at {address}: {e}") from None
        if not self._ray_cpus:  # joined here, or by the caller before this run
            self._ray_nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
            self._ray_cpus = int(ray.cluster_resources().get("CPU", 1))
        return ray

    # --- reporting -------------------------------------------------------------------------------

    def describe(self) -> str:
        """What ran where, in words: `processes (2 workers)`, `ray (3 nodes, 3 CPUs)`."""
        if self.kind == "ray":
            if not self._ray_cpus:
                return "ray (not joined: nothing to map)"
            where = "a Ray started for this run" if self._ray_owned else "Ray cluster"
            nodes = f"{self._ray_nodes} node{'s' if self._ray_nodes != 1 else ''}"
            return f"ray ({where}: {nodes}, {self._ray_cpus} CPUs)"
        if self.kind == "processes":
            n = worker_count(self.workers)
            return f"processes ({n} workers)" if n else "processes (1 CPU: in this process)"
        return f"local (this process{': ' + self.note if self.note else ''})"

    def record(self) -> dict[str, Any]:
        """The run record `tracelake status` shows (never an output: the executor changes no byte)."""
        return {
            "executor": self.kind,
            "where": self.describe(),
            "shards": self.shards,
            "seconds": round(time.monotonic() - self.started, 1),
            "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        }

    def close(self) -> None:
        if self.kind == "ray" and self._ray_owned:
            import ray

            ray.shutdown()


RAY_CONNECT_TIMEOUT = 10.0  # seconds to reach a named cluster's address before giving up
_RAY_CLIENT_PORT = 10001


def reachable(address: str, timeout: float = RAY_CONNECT_TIMEOUT) -> None:
    """Stop in one line unless a TCP connection to a Ray address (`host:port`, or `ray://host[:port]`
    for Ray Client) opens within `timeout` seconds: `ray.init` retries an unreachable address for
    minutes, silently. `auto` and `local` are Ray's own words, left to it."""
    import socket

    if address in ("auto", "local"):
        return
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        host, port = rest, str(_RAY_CLIENT_PORT) if address.startswith("ray://") else ""
    if not port:
        return  # not host:port: ray.init says what is wrong with it
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        why = "timed out" if isinstance(e, TimeoutError) else (e.strerror or type(e).__name__).lower()
        raise BadParams(
            f"executor ray: cannot reach the Ray cluster at {address} ({why} within {timeout:g} s); start it "
            f"(`ray start --head` prints its address) or point executor.ray_address or RAY_ADDRESS at its "
            f"head node (host:6379), or leave both unset for a Ray of this run's own"
        ) from None


@dataclass(frozen=True)
class Shard:
    """One shard of a map: the function, its input, its index in the map, the driver's working
    directory (relative paths name the same files on every node), the shard log (or None)."""

    fn: Callable[[Any], Any]
    item: Any
    index: int
    cwd: str
    log: str | None


def run_shard(shard: Shard) -> Any:
    """Run one shard, wherever: this process, a worker process, a Ray task. With TRACELAKE_SHARD_LOG
    set, each execution appends a `start` and a `done` line (JSON: shard, pid, node) to that file:
    how many times each shard ran, and where."""
    if os.getcwd() != shard.cwd:
        os.chdir(shard.cwd)
    if shard.log:
        _log(shard, "start")
    result = shard.fn(shard.item)
    if shard.log:
        _log(shard, "done")
    return result


def _log(shard: Shard, event: str) -> None:
    node = os.uname().nodename
    if "ray" in sys.modules:
        ray = sys.modules["ray"]
        if ray.is_initialized():
            node = ray.get_runtime_context().get_node_id()
    line = json.dumps({"shard": shard.index, "event": event, "pid": os.getpid(), "node": node}) + "\n"
    fd = os.open(shard.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one write of a short line: lines of concurrent shards never mix
    finally:
        os.close(fd)


def _ray_result(ray: Any, ref: Any) -> Any:
    if isinstance(ref, Ready):
        return ref.value
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as e:
        raise_task_error(ray, e)


def raise_task_error(ray: Any, error: BaseException) -> None:
    """Raise what a Ray task raised as itself (a BadInput stays one line), anything else as is."""
    cause = getattr(error, "cause", None) if isinstance(error, ray.exceptions.RayTaskError) else None
    if isinstance(cause, BaseException):
        raise cause from None
    raise error


def _process_map(items: Iterable[Shard | Ready], workers: int, window: int) -> Iterator[Any]:
    """fn over items in forked worker processes, in input order. Fork, not spawn: a caller's script
    needs no `if __name__ == "__main__"` guard, and workers start in milliseconds. They are all forked
    before the first item is taken, so `items` may run on a thread of its own (core.background)."""
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"), initializer=_ignore_ctrl_c)
    try:
        # Fork every worker now, before `items` runs: it may start threads (read_ahead), and a
        # process forked while another thread holds a lock could inherit the lock held forever.
        with _frozen_heap():
            pool.submit(int).result()
        pending: deque[Future] = deque()
        for item in items:
            if isinstance(item, Ready):
                done: Future = Future()
                done.set_result(item.value)
                pending.append(done)
            else:
                pending.append(pool.submit(run_shard, item))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    except BaseException:  # Ctrl-C, an error, a caller that stopped reading: no shard is worth finishing
        _stop_workers(pool)
        raise
    pool.shutdown()


@contextmanager
def _frozen_heap() -> Iterator[None]:
    """Fork with the driver's heap out of the children's garbage collector: the driver's garbage is
    collected here first, and what lives on is frozen (gc.freeze) until the workers are forked, so a
    child never frees an object of the driver's. Native libraries that are not fork-safe (LanceDB
    and lance, imported by a process that searched or deduplicated before it maps) keep handles that
    only their own process may free: a child's collection of them crashed the child (a segfault
    inside "Garbage-collecting", then BrokenProcessPool)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _ignore_ctrl_c() -> None:
    """A worker's first act: Ctrl-C (SIGINT to the terminal's whole process group) is the driver's
    to handle. A worker taking it too would print its own KeyboardInterrupt traceback; the driver
    stops the workers itself (_stop_workers) and prints the one line (core.stage.run_stage)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """End a pool at once: its workers terminated (SIGTERM: no traceback), queued shards cancelled."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        if process.is_alive():
            process.terminate()
    pool.shutdown(wait=True, cancel_futures=True)
