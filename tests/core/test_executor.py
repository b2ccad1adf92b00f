"""The executors (core/executor.py): results in input order on each of them, bounded work in flight,
a shard function's own error raised in the driver, and on a real local Ray cluster (a head and two
worker nodes) a worker node killed mid-map: its shards run again elsewhere, each result once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import pytest

from tracelake.core.errors import BadInput, BadParams
from tracelake.core.executor import ENV_KIND, SHARD_LOG_ENV, Executor, Ready

from ..ray_cluster import local_cluster


def square(x: int) -> int:
    return x * x


def fails_on_three(x: int) -> int:
    if x == 3:
        raise BadInput(f"bad item {x}")
    return x


def logged(item: tuple[str, int, float]) -> int:
    """Square an int, leaving one file per execution (which process ran it) under `log`."""
    log, x, pause = item
    time.sleep(pause)
    Path(log, f"{x}-{os.getpid()}-{time.monotonic_ns()}").touch()
    return x * x


@pytest.mark.parametrize("kind,workers", [("local", 0), ("processes", 2), ("processes", 1)])
def test_results_in_input_order_with_ready_items_in_place(kind, workers):
    items = [1, Ready("marker"), 2, 3, Ready(None), 4]
    ex = Executor(kind, workers)
    assert list(ex.map(square, items)) == [1, "marker", 4, 9, None, 16]
    assert ex.shards == 4


def test_at_most_window_items_are_taken_ahead():
    taken = []

    def items():
        for i in range(20):
            taken.append(i)
            yield i

    results = Executor("processes", 2).map(square, items(), window=3)
    assert next(results) == 0
    assert len(taken) <= 4  # the window, plus the one whose result was just given
    assert list(results) == [i * i for i in range(1, 20)]


@pytest.mark.parametrize("kind", ["local", "processes"])
def test_a_shard_functions_error_is_raised_as_itself(kind):
    with pytest.raises(BadInput, match="bad item 3"):
        list(Executor(kind, 2).map(fails_on_three, range(6)))


def test_the_kind_comes_from_the_option_then_the_variable_then_params(monkeypatch):
    class P:
        kind, workers, ray_address = "processes", 3, None

    monkeypatch.delenv(ENV_KIND, raising=False)
    assert Executor.open(P()).kind == "processes" and Executor.open(P()).workers == 3
    monkeypatch.setenv(ENV_KIND, "local")
    assert Executor.open(P()).kind == "local"
    assert Executor.open(P(), "ray").kind == "ray"
    monkeypatch.setenv(ENV_KIND, "spark")
    with pytest.raises(BadParams, match="unknown kind 'spark'"):
        Executor.open(P())


@pytest.mark.parametrize("kind", ["local", "processes"])
def test_the_shard_log_counts_every_execution(kind, tmp_path, monkeypatch):
    monkeypatch.setenv(SHARD_LOG_ENV, str(tmp_path / "shards.jsonl"))
    assert list(Executor(kind, 2).map(square, [5, Ready(0), 6, 7])) == [25, 0, 36, 49]
    lines = [json.loads(line) for line in (tmp_path / "shards.jsonl").read_text().splitlines()]
    assert sorted((e["shard"], e["event"]) for e in lines) == [(i, ev) for i in range(3) for ev in ("done", "start")]


def test_describe_says_where_it_ran():
    assert Executor("local").describe() == "local (this process)"
    assert Executor("processes", 3).describe() == "processes (3 workers)"


def test_work_that_uses_every_core_stays_in_the_process_unless_asked(monkeypatch):
    """A stage whose encoder already uses every core (filter, export_sft) runs locally when params.yaml
    says processes; --executor, TRACELAKE_EXECUTOR and ray still decide."""
    from tracelake.core.params import ExecutorParams

    monkeypatch.delenv(ENV_KIND, raising=False)
    params = ExecutorParams(kind="processes", workers=2)
    assert Executor.open(params).kind == "processes"
    counting = Executor.open(params, uses_every_core=True)
    assert counting.kind == "local" and "uses every core" in counting.describe()
    assert Executor.open(params, "processes", uses_every_core=True).kind == "processes"
    monkeypatch.setenv(ENV_KIND, "processes")
    assert Executor.open(params, uses_every_core=True).kind == "processes"
    monkeypatch.delenv(ENV_KIND)
    ray = ExecutorParams(kind="ray")
    assert Executor.open(ray, uses_every_core=True).kind == "ray"


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(workers=2) as c:
        yield c


@pytest.fixture
def ray_executor(cluster):
    import ray

    ex = Executor("ray", ray_address=cluster.address)
    yield ex
    ex.close()
    ray.shutdown()


def test_ray_results_in_input_order(ray_executor):
    items = [*range(5), Ready("x"), *range(5, 30)]
    assert list(ray_executor.map(square, items)) == [*(i * i for i in range(5)), "x", *(i * i for i in range(5, 30))]
    assert ray_executor.shards == 30
    assert ray_executor.describe() == "ray (Ray cluster: 3 nodes, 2 CPUs)"


def test_ray_raises_the_shard_functions_own_error(ray_executor):
    with pytest.raises(BadInput, match="bad item 3"):
        list(ray_executor.map(fails_on_three, range(6)))


def test_ray_relative_paths_are_the_drivers(ray_executor, tmp_path, monkeypatch):
    assert list(ray_executor.map(square, [3])) == [9]  # joined from the checkout: workers import tests/
    monkeypatch.chdir(tmp_path)
    (tmp_path / "log").mkdir()
    assert list(ray_executor.map(logged, [("log", 2, 0.0)])) == [4]
    assert len(list((tmp_path / "log").iterdir())) == 1


def test_a_worker_node_killed_mid_map_loses_no_shard(cluster, tmp_path):
    """Two worker nodes; one is killed while shards run on both. Ray runs the lost shards again on
    the other node: every result comes back once, in order, and only shards in flight on the
    killed node ran twice (counted by the files each execution leaves)."""
    import ray

    victim = cluster.add_node(num_cpus=1)  # a third worker node: the one to kill
    cluster.wait_for_nodes()
    log = tmp_path / "log"
    log.mkdir()
    n = 24
    ex = Executor("ray", ray_address=cluster.address)
    results: list[int] = []

    def drive() -> None:
        results.extend(ex.map(logged, [(str(log), i, 0.5) for i in range(n)]))

    driver = threading.Thread(target=drive)
    driver.start()
    try:
        deadline = time.monotonic() + 60
        while len(list(log.iterdir())) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(list(log.iterdir())) >= 4, "no shard finished"
        cluster.remove_node(victim, allow_graceful=False)  # mid-map: shards are running on it
        driver.join(timeout=180)
        assert not driver.is_alive(), "the map did not finish after a node was lost"
    finally:
        ex.close()
        ray.shutdown()
    assert results == [i * i for i in range(n)]
    runs = Counter(int(f.name.split("-")[0]) for f in log.iterdir())
    assert set(runs) == set(range(n))
    # one CPU a node: at most the one shard running on the killed node had finished its work (left
    # its file) and not yet returned; its result is small, so no finished result is lost with it
    assert sum(runs.values()) - n <= 1, runs


def test_an_unreachable_ray_address_fails_in_one_line_within_seconds(tmp_path):
    """RAY_ADDRESS at a closed port of this machine: ray.init alone retries it for minutes, silently;
    the run stops within seconds with one line naming the address and what to do."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:  # a port that nothing listens on once it is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (
        "from tracelake.core.executor import Executor\n"
        "from tracelake.core.stage import run_stage\n"
        "run_stage(lambda: list(Executor('ray').map(abs, [1, 2])))\n"
    )
    env = dict(os.environ, RAY_ADDRESS=f"127.0.0.1:{port}")
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=90
    )
    took = time.monotonic() - start
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"cannot reach the Ray cluster at 127.0.0.1:{port}" in proc.stderr and "RAY_ADDRESS" in proc.stderr
    assert took < 45, f"{took:.0f} s"  # ray.init alone: minutes (the 10 s probe, plus importing Ray on a busy machine)


def slow_square(x: int) -> int:
    time.sleep(0.01)
    return x * x


def slow_items(n: int):
    """Items as a driver that reads its input gives them: a while apart (the workers mostly wait)."""
    for i in range(n):
        time.sleep(0.2)
        yield i


INTERRUPTED = "tracelake: interrupted before any output was started; nothing was written\n"


@contextmanager
def killed_at_the_end(proc: subprocess.Popen):
    """Whatever happens in the block, the process group of `proc` (started in a session of its own) is
    not left running."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def ctrl_c(proc: subprocess.Popen, timeout: float) -> tuple[str, float]:
    """Ctrl-C to the process group of `proc`: its stderr, and the seconds it took to exit."""
    os.killpg(proc.pid, signal.SIGINT)
    interrupted = time.monotonic()
    _, stderr = proc.communicate(timeout=timeout)
    return stderr, time.monotonic() - interrupted


def test_ctrl_c_under_processes_prints_the_one_line_and_exits_130(tmp_path):
    """Ctrl-C in a terminal is SIGINT to the whole process group: the driver and every worker. The
    workers ignore it and the driver ends them: stderr is run_stage's one line, no worker's
    KeyboardInterrupt traceback (each worker waiting for its next shard printed one), exit 130,
    and no waiting for the shards left."""
    import subprocess
    import sys

    log = tmp_path / "shards.log"
    code = (
        "from tracelake.core.executor import Executor\n"
        "from tracelake.core.stage import run_stage\n"
        "from tests.core.test_executor import slow_square, slow_items\n"
        "run_stage(lambda: list(Executor('processes', 2).map(slow_square, slow_items(200))))\n"
    )
    env = dict(os.environ, **{SHARD_LOG_ENV: str(log)})
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=root, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    with killed_at_the_end(proc):
        deadline = time.monotonic() + 60
        while not (log.exists() and log.read_text().count('"done"') >= 3) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        assert log.exists(), "no shard started"
        stderr, seconds = ctrl_c(proc, timeout=30)
    assert stderr == INTERRUPTED, stderr
    assert proc.returncode == 130
    assert seconds < 10  # 200 shards were left: none was waited for


def test_ctrl_c_on_a_ray_cluster_prints_the_one_line_and_exits_130(cluster, tmp_path):
    """A driver joined to a cluster it did not start, interrupted mid-map: run_stage's one line and
    exit 130, then the process leaves at once (Ray's threads are not torn down at interpreter exit,
    where the probe once saw a segfault, exit 139); the cluster keeps running for others."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from tracelake.core.executor import Executor\n"
        "from tracelake.core.stage import run_stage\n"
        "from tests.core.test_executor import slow_square, slow_items\n"
        "def main():\n"
        "    for i, _ in enumerate(Executor('ray', ray_address=sys.argv[1]).map(slow_square, slow_items(600))):\n"
        "        if i == 2:\n"
        "            print('mapping', flush=True)\n"
        "run_stage(main)\n"
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-c", code, cluster.address],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    with killed_at_the_end(proc):
        assert proc.stdout.readline() == "mapping\n", proc.stderr.read()
        stderr, seconds = ctrl_c(proc, timeout=60)
    assert stderr.splitlines()[-1:] == [INTERRUPTED.rstrip("\n")], stderr
    assert "Traceback" not in stderr, stderr
    assert proc.returncode == 130
    assert seconds < 20
    import ray

    ray.init(address=cluster.address)  # the cluster still serves
    try:
        assert ray.get(ray.remote(slow_square).remote(3)) == 9
    finally:
        ray.shutdown()


class _Finalized:
    """Garbage that says which process freed it (a stand-in for a native handle, such as LanceDB's,
    that only its own process may free)."""

    def __init__(self, log: Path):
        self.log, self.me = log, self  # a cycle: only a collection frees it

    def __del__(self):
        with open(self.log, "a") as f:
            f.write(f"{os.getpid()}\n")


def collect_here(_: int) -> int:
    import gc

    gc.collect()
    return os.getpid()


def test_a_worker_never_frees_the_drivers_garbage(tmp_path):
    """The driver's garbage is collected in the driver before the workers are forked, and what lives
    on is out of the workers' collector: a worker's collection frees nothing of the driver's (a
    child collecting a LanceDB handle it inherited crashed the child: BrokenProcessPool)."""
    import gc

    log = tmp_path / "freed.log"
    gc.disable()
    try:
        _Finalized(log)
        workers = set(Executor("processes", 2).map(collect_here, range(8)))
    finally:
        gc.enable()
    freed = log.read_text().split() if log.exists() else []
    assert freed == [str(os.getpid())], (freed, workers)  # freed once, by the driver
    assert os.getpid() not in workers
