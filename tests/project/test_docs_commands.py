"""Every command the documentation shows runs: each line of a ```bash / ```sh / ```console block in
README.md and docs/*.md, each inline `uv run ...` span, and each command docs/commands.md's table
names (as `COMMAND --help`). A `tracelake`, `dvc` or `python` command runs, `uv run ` stripped and
its placeholders (ID, REV, TABLE, ...) replaced by values read from the build, in a committed
scratch copy of the built sample, and must exit 0 in bounded time; `tracelake view` starts and
answers a page. A command that cannot run in a test is in NOT_RUN with the reason, and that list
names only commands the docs still show."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.request import urlopen

import pytest

from ..helpers import ROOT, start_view, stop_process

COMMAND_TIMEOUT = 120
"""Seconds any one doc command may run on the sample."""

# Doc commands that are not run here, each with the reason. A key ending in a space or "/" matches
# every command that starts with it; any other key matches that command exactly (so the real
# training run is listed while its --dry-run still runs).
NOT_RUN: dict[str, str] = {
    "python3 -m pip install ": "installs uv and the project (network)",
    "bash tests/setup.sh ": "installs the test environments (network)",
    "uv run pytest ": "the test suite itself",
    "TRACELAKE_LONG=1 uv run pytest ": "the test suite itself (its long variants)",
    "xdg-open ": "opens a desktop browser (the report page is checked to exist)",
    "TRACELAKE_EXECUTOR=ray RAY_ADDRESS=10.0.0.5:6379 uv run dvc repro": "needs a Ray cluster",
    "RAY_ADDRESS=HEAD:6379 TRACELAKE_EXECUTOR=ray uv run dvc repro score": "needs a Ray cluster",
    "uv run python -m stages filter --executor ray": "starts a Ray cluster (tests/project/test_executors_e2e.py)",
    "uv run python benchmarks/": "a benchmark: minutes of load (BENCHMARKS.md)",
    "uv run tracelake train sft --dataset 3k": "trains a model (GPUs; tests/gpu); its --dry-run runs",
    "uv run tracelake train rl --dataset rl": "trains a model (GPUs; tests/gpu)",
    "uv run dvc exp run -n six-turns -S filter.min_assistant_turns=6": (
        "rebuilds the pipeline from filter on as an experiment (tests/explore/test_diff.py)"
    ),
}

# Doc commands that need the setup their page describes first: command as written -> the params.yaml
# keys (dotted) set for that command alone.
DOC_SETUP: dict[str, dict] = {
    # scoring.md: a model scorer turned on, on the vllm backend Modal runs
    "uv run tracelake score --backend modal --dry-run": {
        "score.scorers": ["response_length_proxy_v1", "llm_response_length_v1"],
        "score.model": {"backend": "vllm", "name": "Qwen/Qwen3-8B"},
    },
}

# Doc commands that fail because of a bug in the code (not the doc): each runs as its own case,
# xfail(strict=True), so that the fix shows as an unexpected pass. Command as written -> the bug.
KNOWN_BUGS: dict[str, str] = {}

_FENCED_LANGS = {"bash", "sh", "shell", "console"}
_FENCE = re.compile(r"^ {0,3}(```|~~~)\s*([\w-]*)")
_SPAN = re.compile(r"(`+)\s*((?:(?!\1).)+?)\s*\1")
_RUNNABLE = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S+\s+)*(?:uv run\s+)?(tracelake|dvc|python3?)\b")


@dataclass(frozen=True)
class DocCommand:
    page: str  # the page, relative to the repository root
    line: int  # its first line there
    text: str  # as written: continuations joined, the comment and a console prompt removed

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def strip_comment(line: str) -> str:
    """The line up to a `#` that starts a shell comment (after whitespace, outside quotes)."""
    quote, escaped = None, False
    for i, ch in enumerate(line):
        if escaped:
            escaped = False
        elif ch == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def fenced_commands(page: str, text: str) -> list[DocCommand]:
    out: list[DocCommand] = []
    fence = lang = None
    pending, start = "", 0
    for n, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line)
        if m and (fence is None or (m.group(1) == fence and not m.group(2))):
            fence, lang = (m.group(1), m.group(2).lower()) if fence is None else (None, None)
            continue
        if fence is None or lang not in _FENCED_LANGS:
            continue
        if lang == "console" and not pending:
            if not line.lstrip().startswith("$ "):
                continue  # output
            line = line.lstrip()[2:]
        code = strip_comment(line)
        if not pending:
            start = n
        if code.endswith("\\"):
            pending += code[:-1].rstrip() + " "
            continue
        command = (pending + code.strip()).strip()
        pending = ""
        if command:
            out.append(DocCommand(page, start, command))
    return out


def inline_commands(page: str, text: str) -> list[DocCommand]:
    """Inline code spans that are whole commands: `uv run ...`."""
    out = []
    fenced_lines = _fenced_line_numbers(text)
    for n, line in enumerate(text.splitlines(), 1):
        if n in fenced_lines:
            continue
        for m in _SPAN.finditer(line):
            if m.group(2).startswith("uv run "):
                out.append(DocCommand(page, n, m.group(2)))
    return out


def _fenced_line_numbers(text: str) -> set[int]:
    inside, fence = set(), None
    for n, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line)
        if m and (fence is None or m.group(1) == fence):
            fence = m.group(1) if fence is None else None
            inside.add(n)
        elif fence is not None:
            inside.add(n)
    return inside


def table_commands(page: str, text: str) -> list[DocCommand]:
    """docs/commands.md's table: each command it names, as `COMMAND --help`."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r"^\|\s*`(tracelake [a-z ]+)`\s*\|", line)
        if m:
            out.append(DocCommand(page, n, f"{m.group(1)} --help"))
    return out


def doc_commands() -> list[DocCommand]:
    found = []
    for path in doc_pages():
        page, text = path.relative_to(ROOT).as_posix(), path.read_text()
        found += fenced_commands(page, text) + inline_commands(page, text)
        if page == "docs/commands.md":
            found += table_commands(page, text)
    return sorted(found, key=lambda c: (c.page, c.line))


def not_run_key(command: str) -> str | None:
    for key in NOT_RUN:
        if command == key or (key.endswith((" ", "/")) and command.startswith(key)):
            return key
    return None


def runnable(commands: list[DocCommand]) -> list[DocCommand]:
    return [c for c in commands if not_run_key(c.text) is None and _RUNNABLE.match(c.text)]


# ---- extraction and the NOT_RUN list (no build needed) ----


def test_extraction():
    text = (
        "Run `uv run tracelake status` or `tracelake sql`.\n"
        "```bash\n"
        'uv run tracelake sql "SELECT 1 # not a comment"   # a comment\n'
        "uv run pytest a.py \\\n"
        "    b.py -n auto       # CI\n"
        "```\n"
        "```console\n$ tracelake version\ntracelake 1.0\n```\n"
        "```yaml\nkey: uv run x\n```\n"
    )
    found = [c.text for c in sorted(fenced_commands("p", text) + inline_commands("p", text), key=lambda c: c.line)]
    assert found == [
        "uv run tracelake status",
        'uv run tracelake sql "SELECT 1 # not a comment"',
        "uv run pytest a.py b.py -n auto",
        "tracelake version",
    ]


def test_the_docs_show_commands():
    commands = doc_commands()
    assert len(commands) > 40, commands  # the extraction reads the pages
    assert len(runnable(commands)) > 30


def test_every_doc_command_is_run_or_listed():
    neither = [str(c) for c in doc_commands() if not_run_key(c.text) is None and not _RUNNABLE.match(c.text)]
    assert not neither, "doc commands this test neither runs nor lists in NOT_RUN (add a reason there):\n" + "\n".join(
        neither
    )


def test_not_run_entries_match_a_doc_command():
    texts = [c.text for c in doc_commands()]
    stale = [key for key in NOT_RUN if not any(not_run_key(t) == key for t in texts)]
    assert not stale, f"NOT_RUN lists commands the docs no longer show: {stale}"
    for name, listed in (("KNOWN_BUGS", KNOWN_BUGS), ("DOC_SETUP", DOC_SETUP)):
        stale = [cmd for cmd in listed if cmd not in texts]
        assert not stale, f"{name} lists commands the docs no longer show: {stale}"


def test_not_run_commands_name_files_that_exist():
    """The scripts and test files a listed command names are in the tree (generated ones, under
    reports/, in a build)."""
    missing = []
    for c in doc_commands():
        if not_run_key(c.text) is None:
            continue
        for word in shlex.split(c.text):
            if re.fullmatch(r"[\w.-]+(/[\w.-]+)+\.(py|sh)", word) and not (ROOT / word).is_file():
                missing.append(f"{c}: {word}")
    assert not missing, "\n".join(missing)


# ---- running them on the built sample ----


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True, capture_output=True
    )


def scratch_copy(sample_project: Path, dest: Path) -> Path:
    """The built sample, committed on `main` (HEAD~1), an empty commit on top (HEAD), and the branch
    `my-ablation` the docs compare with."""
    shutil.copytree(sample_project, dest, symlinks=True)
    git(dest, "add", "-A")
    git(dest, "commit", "-qm", "built")
    git(dest, "branch", "-M", "main")
    git(dest, "branch", "my-ablation")
    git(dest, "commit", "-q", "--allow-empty", "-m", "on top")
    return dest


def placeholders(repo: Path) -> list[tuple[str, str]]:
    """(regex, value) for each placeholder the docs write, its value read from the build."""
    import yaml

    from tracelake import open_lake

    params = yaml.safe_load((repo / "params.yaml").read_text())
    source = next(iter(params["sources"]))
    harbor = next(s for s in params["sources"].values() if s["format"] == "harbor")
    scale = next(iter(params["scales"]))
    with open_lake(repo / "lake") as lake:
        sft = sorted(t for t in lake.tables() if t.startswith("sft_"))[0]
        trajectory = lake.sql(f"SELECT min(trajectory_id) FROM {sft}").fetchall()[0][0]
    rl_tasks = sorted((repo / "lake/exports/rl/tasks").glob("*.parquet"))[0].relative_to(repo).as_posix()
    word = r"(?<![\w/@<-]){}(?![\w>-])"
    return [
        (word.format("ID"), trajectory),
        (word.format("REV"), "HEAD~1"),
        (word.format("STAGE"), "score"),
        (r"(?<=tasks extract )TABLE\b", rl_tasks),
        (word.format("TABLE"), "pool"),
        (word.format("DIR"), "extracted-tasks/"),
        (r"<scale>", str(scale)),
        (r"<name>", source),
        (r"<source>", source),
        (r"\bpath/to/jobs\b", harbor["path"]),
    ]


def shell_command(command: str, values: list[tuple[str, str]]) -> str:
    """A doc command as it runs here: `uv run ` dropped (the project's venv is first on PATH), its
    placeholders replaced."""
    command = re.sub(r"(^|&& |\s)uv run ", r"\1", command)
    for pattern, value in values:
        command = re.sub(pattern, value.replace("\\", r"\\"), command)
    return command


def run_view(command: str, repo: Path, log: Path) -> str | None:
    """`tracelake view ARGS`: started, its first page fetched, stopped. The failure, or None."""
    args = shlex.split(command)[2:]
    proc, port = start_view(args, repo, log)
    try:
        with urlopen(f"http://127.0.0.1:{port}/", timeout=30) as response:
            if response.status != 200:
                return f"GET / answered {response.status}"
    finally:
        stop_process(proc)
    return None


@contextmanager
def params_set(repo: Path, keys: dict):
    """params.yaml with these dotted keys set, restored on leaving."""
    import yaml

    if not keys:
        yield
        return
    path = repo / "params.yaml"
    before = path.read_text()
    params = yaml.safe_load(before)
    for dotted, value in keys.items():
        *parents, last = dotted.split(".")
        section = params
        for key in parents:
            section = section[key]
        section[last] = value
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        yield
    finally:
        path.write_text(before)


def run_doc_command(command: DocCommand, repo: Path, values: list[tuple[str, str]], log: Path) -> str | None:
    """Run one doc command in repo (with its DOC_SETUP): None when it exits 0, else what went wrong."""
    with params_set(repo, DOC_SETUP.get(command.text, {})):
        return _run(command, repo, values, log)


def _run(command: DocCommand, repo: Path, values: list[tuple[str, str]], log: Path) -> str | None:
    shell = shell_command(command.text, values)
    if re.match(r"^tracelake view\b", shell) and "--help" not in shell:
        return run_view(shell, repo, log)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "200"}
    try:
        proc = subprocess.run(
            ["bash", "-c", shell],
            cwd=repo,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        return f"{command}\n  ran: {shell}\n  still running after {COMMAND_TIMEOUT} s"
    if proc.returncode != 0 or "Traceback (most recent call last)" in proc.stderr:
        tail = (proc.stdout[-1500:] + "\n" + proc.stderr[-3000:]).strip()
        return f"{command}\n  ran: {shell}\n  exit {proc.returncode}:\n{tail}"
    return None


_COMMANDS = doc_commands()
_RUN = runnable(_COMMANDS)


def _cases() -> list:
    """One case a page (its commands but the known bugs), and one xfail case a known bug."""
    pages = sorted({c.page for c in _RUN if c.text not in KNOWN_BUGS})
    bugs = [c for c in _RUN if c.text in KNOWN_BUGS]
    return [pytest.param(page, None, id=page) for page in pages] + [
        pytest.param(c.page, c, id=str(c), marks=pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[c.text]))
        for c in bugs
    ]


@pytest.mark.e2e
@pytest.mark.parametrize(("page", "bug"), _cases())
def test_doc_commands_run(page: str, bug: DocCommand | None, sample_project: Path, tmp_path: Path):
    """Every runnable command of a page, in the page's order (a command repeated there once), in one
    committed scratch copy of the sample; or one known bug's command alone."""
    repo = scratch_copy(sample_project, tmp_path / "project")
    values = placeholders(repo)
    if bug is not None:
        commands = [bug]
    else:
        commands = list({c.text: c for c in reversed(_RUN) if c.page == page and c.text not in KNOWN_BUGS}.values())
        commands.reverse()
    failures = [f for c in commands if (f := run_doc_command(c, repo, values, tmp_path / "view.log"))]
    assert not failures, f"{len(failures)} command(s) of {page} failed:\n\n" + "\n\n".join(failures)


@pytest.mark.e2e
def test_the_report_page_the_docs_open_is_built(sample_project: Path):
    """xdg-open's page (not run: it opens a browser) is among the build's outputs."""
    for c in _COMMANDS:
        if c.text.startswith("xdg-open "):
            assert (sample_project / c.text.split()[1]).is_file(), str(c)
