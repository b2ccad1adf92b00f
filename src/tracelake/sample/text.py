"""Text the sample generator draws from: the terminus-2-style prompts and, per task style
(swesmith, superuser, tezos), instructions, commands, outputs, analyses and plans.

Placeholders come from a per-task context ({pkg}, {svc}, ...) and per-step numbers {a}, {b}, {s}.
"""

from __future__ import annotations

from typing import Any

SYSTEM_PROMPT = (
    "You are an AI assistant tasked with solving command-line tasks in a Linux environment. "
    "You will be given a task description and the output from previously executed commands. "
    "Your goal is to solve the task by providing batches of shell commands.\n\n"
    'Format your response as JSON with the fields "analysis", "plan", "commands" (a list of '
    '{{"keystrokes": ..., "duration": ...}} objects) and optionally "task_complete".\n\n'
    'The text inside "keystrokes" is sent verbatim to the terminal; end every command with a '
    "newline. Prefer short durations and poll again instead of waiting long.\n\n"
    "Task Description:\n{instruction}\n\nCurrent terminal state:\nCurrent Terminal Screen:\n"
    "{prompt}\n\n"
)
CONFIRM = (
    "Current terminal state:\nNew Terminal Output:\n\n{prompt}\n\nAre you sure you want to "
    "mark the task as complete? This will trigger your solution to be graded and you won't "
    'be able to make any further corrections. If so, include "task_complete": true in '
    "your JSON response again."
)
HANDOFF = (
    "You are about to hand off your work to another AI agent. Please provide a "
    "comprehensive summary of what you have accomplished so far on this task:\n\n"
    "Original Task: {instruction}\n\nCover the major actions completed, important "
    "information learned, challenging problems addressed and the current status."
)
PICKUP = (
    "You are picking up work from a previous AI agent on this task:\n\n**Original Task:** "
    "{instruction}\n\n**Summary from Previous Agent:**\n{summary}\n\nPlease begin by asking "
    "several questions about the current state of the solution that are not answered in "
    "the summary."
)
ANSWERS_PREFIX = "Here are the answers the other agent provided.\n\n"
CONTINUE = (
    "\n\nContinue working on this task from where the previous agent left off. You can no "
    "longer ask questions. Please follow the spec to interact with the terminal."
)

_C = tuple[str, float, str]  # (keystrokes, duration, output) of one command
# Instruction blocks and command outputs are tuples of lines, joined with "\n" when used.
STYLE: dict[str, dict[str, Any]] = {
    "swesmith": {
        "digits": 5,
        "prompt": "(testbed) root@{host}:/testbed# ",
        "image": "python:3.11-slim",
        "check": "python -m pytest -q tests/ > /logs/verifier/pytest.log 2>&1",
        "ctx": {
            "pkg": [
                "pydicom",
                "qrcode",
                "click",
                "marshmallow",
                "sqlparse",
                "jinja2",
                "pyparsing",
                "conan",
                "tox",
                "faker",
            ],
            "func": [
                "__setitem__",
                "_lost_point_level2",
                "parse_args",
                "_deserialize",
                "format",
                "do_truncate",
                "scan_string",
                "generate",
                "resolve",
                "emit",
            ],
            "err": ["UnboundLocalError", "TypeError", "AttributeError", "KeyError", "IndexError", "ValueError"],
            "mod": ["core", "util", "fields", "multival", "filters", "formatter"],
        },
        "title": "{err} raised by `{func}` in {pkg}/{mod}.py",
        "blocks": [
            (
                "Hello team,",
                "After the recent refactor `{func}` started failing for inputs that used to work.",
                "It looks like a regression in `{pkg}/{mod}.py`.",
            ),
            (
                "Steps to reproduce:",
                "```python",
                "from {pkg}.{mod} import {func}",
                "obj = {func}([1, 2, 3])",
                "obj[1:2] = [5]",
                "print(list(obj))",
                "```",
            ),
            (
                "Actual behavior:",
                "```",
                "Traceback (most recent call last):",
                '  File "repro.py", line 3, in <module>',
                '  File "/testbed/{pkg}/{mod}.py", line 248, in {func}',
                "{err}: invalid value for slice assignment",
                "```",
            ),
            ("Expected behavior: the call returns `[1, 5, 3]` and no exception is raised.",),
            (
                "Notes:",
                "- Only Python 3.11 was tested.",
                "- The failure is deterministic.",
                "- Existing tests in tests/test_{mod}.py still pass, so coverage is missing.",
            ),
            ("Please fix the implementation (not the tests); the full test suite must pass.",),
            ("Environment:", "- {pkg} installed in editable mode under /testbed", "- pytest 8.4", "- Debian bookworm"),
            (
                "Hints:",
                "1. Look at how the index is normalized before validation.",
                "2. Check the branch that handles negative steps.",
                "3. The bug was introduced when the helper was inlined.",
                "4. Keep the public API unchanged.",
            ),
        ],
        "commands": [
            (
                "ls -la\n",
                0.1,
                (
                    "total 64",
                    "drwxr-xr-x 1 root root 4096 Jul 13  2025 .",
                    "-rw-r--r-- 1 root root 3825 Jul 13  2025 pyproject.toml",
                    "drwxr-xr-x 1 root root 4096 Jul 13  2025 {pkg}",
                    "drwxr-xr-x 1 root root 4096 Jul 13  2025 tests",
                ),
            ),
            ('grep -rn "def {func}" {pkg}/\n', 0.5, ("{pkg}/{mod}.py:{a}:    def {func}(self, *args, **kwargs):",)),
            (
                "sed -n '{a},{b}p' {pkg}/{mod}.py\n",
                0.1,
                (
                    "    def {func}(self, idx, value):",
                    "        if isinstance(idx, slice):",
                    "            value = [self._validate(v) for v in value]",
                    "        self._list[idx] = value",
                ),
            ),
            (
                "python3 repro.py\n",
                1.0,
                (
                    "Traceback (most recent call last):",
                    '  File "/testbed/repro.py", line 3, in <module>',
                    "{err}: invalid value",
                ),
            ),
            (
                "python -m pytest tests/test_{mod}.py -x -q 2>&1 | tail -5\n",
                5.0,
                ("FAILED tests/test_{mod}.py::test_{func}_slice - {err}", "{a} passed, 1 failed in {s}.21s"),
            ),
            ("sed -i '{a}s/self._list\\[idx\\]/self._validate(value)/' {pkg}/{mod}.py\n", 0.1, ()),
            (
                "git diff\n",
                0.1,
                (
                    "diff --git a/{pkg}/{mod}.py b/{pkg}/{mod}.py",
                    "@@ -{a},7 +{a},7 @@",
                    "-        value = self._list[idx]",
                    "+        value = self._validate(value)",
                ),
            ),
            ("git status --short\n", 0.1, (" M {pkg}/{mod}.py", "?? repro.py")),
            ("python -m pytest tests/ -q 2>&1 | tail -3\n", 15.0, ("{b} passed, 3 skipped in {s}.87s",)),
        ],
        "analysis": [
            "The repository is at /testbed and the bug is in {pkg}/{mod}.py.",
            "The reproduction script confirms the {err} in `{func}`.",
            "The test run shows one failure in tests/test_{mod}.py.",
            "The diff touches only `{func}`; the rest of the module is unchanged.",
        ],
        "plan": [
            "Locate `{func}` and read the surrounding code.",
            "Write a minimal reproduction script and run it.",
            "Patch the slice branch and rerun the focused tests.",
            "Run the whole suite to check for regressions.",
        ],
    },
    "superuser": {
        "digits": 4,
        "prompt": "root@{host}:/app# ",
        "image": "ubuntu:24.04",
        "check": "test -s /app/answer.sh && bash -n /app/answer.sh",
        "ctx": {
            "svc": ["nginx", "cron", "ssh", "postgresql", "docker", "rsyslog"],
            "path": [
                "/var/log/app",
                "/etc/nginx/sites-available",
                "/srv/backups",
                "/home/deploy/.ssh",
                "/opt/reports",
                "/var/www/html",
            ],
            "user": ["deploy", "alice", "backup", "www-data"],
            "port": ["8080", "443", "5432", "2222"],
        },
        "title": "Configure {svc} so that files under {path} are handled for user {user}",
        "blocks": [
            ("I manage a small Ubuntu server and {svc} keeps misbehaving after every reboot.",),
            (
                "What I tried:",
                "1. Edited the config by hand.",
                "2. Restarted with `systemctl restart {svc}`.",
                "3. Checked permissions on {path}.",
            ),
            (
                "Requirements:",
                "- The service must listen on port {port}.",
                "- Only {user} may write to {path}.",
                "- Changes must survive a reboot.",
            ),
            ("Current config excerpt:", "```", "listen {port};", "root {path};", "user {user};", "```"),
            (
                "The log shows:",
                "```",
                "{svc}[812]: permission denied while opening {path}",
                "{svc}[812]: exiting with status 1",
                "```",
            ),
            ("Write the final command you used into /app/answer.sh.",),
            (
                "Constraints:",
                "- Do not reinstall the OS.",
                "- Do not disable the firewall.",
                "- Keep the existing files in {path}.",
                "- Use only packages from the default repositories.",
            ),
            ("Bonus: explain why the previous setup failed in /app/NOTES.md (2-3 sentences).",),
        ],
        "commands": [
            (
                "systemctl status {svc} --no-pager\n",
                0.5,
                (
                    "* {svc}.service - {svc} daemon",
                    "   Loaded: loaded (/lib/systemd/system/{svc}.service; enabled)",
                    "   Active: failed (Result: exit-code)",
                ),
            ),
            (
                "journalctl -u {svc} --no-pager | tail -2\n",
                0.5,
                (
                    "Mar 02 08:0{s}:11 host {svc}[812]: permission denied while opening {path}",
                    "Mar 02 08:0{s}:11 host systemd[1]: {svc}.service: Failed with result 'exit-code'.",
                ),
            ),
            (
                "apt-get install -y {svc}\n",
                10.0,
                (
                    "Reading package lists... Done",
                    "{svc} is already the newest version.",
                    "0 upgraded, 0 newly installed, 0 to remove and {a} not upgraded.",
                ),
            ),
            ('grep -rn "{port}" /etc/{svc}/\n', 0.2, ("/etc/{svc}/{svc}.conf:{a}:    listen {port};",)),
            ("sed -i 's/listen 80;/listen {port};/' /etc/{svc}/{svc}.conf\n", 0.1, ()),
            (
                "ls -la {path}\n",
                0.1,
                (
                    "total {a}",
                    "drwxr-x--- 2 {user} {user} 4096 Mar  2 08:00 .",
                    "-rw-r--r-- 1 root root {b} Mar  2 08:00 data.log",
                ),
            ),
            ("chown -R {user}:{user} {path}\n", 0.1, ()),
            ("find {path} -type f -mtime +30 | head\n", 0.5, ("{path}/old-{a}.log", "{path}/old-{b}.log")),
            (
                "df -h /\n",
                0.1,
                ("Filesystem      Size  Used Avail Use% Mounted on", "overlay          59G   {s}1G   3{s}G  4{s}% /"),
            ),
        ],
        "analysis": [
            "{svc} fails to start because it cannot open {path}.",
            "The config still listens on the default port instead of {port}.",
            "Ownership of {path} is wrong; {user} cannot write there.",
            "The service is active again and the log is clean.",
        ],
        "plan": [
            "Inspect the service status and the journal.",
            "Fix the port in the config with sed and restart the service.",
            "Give {user} ownership of {path} and verify with ls.",
            "Record the working command in /app/answer.sh.",
        ],
    },
    "tezos": {
        "digits": 4,
        "prompt": "root@{host}:/app# ",
        "image": "ocaml/opam:debian-12-ocaml-4.14",
        "check": "dune build @check && grep -q '^KT1' /app/address.txt",
        "ctx": {
            "contract": ["counter", "multisig", "fa12_token", "escrow", "auction", "vault"],
            "proto": ["PtParisB", "PsQuebec", "PtRioBt", "alpha"],
            "lib": ["lib_protocol", "lib_client", "lib_plugin", "lib_benchmark"],
            "entry": ["increment", "transfer", "withdraw", "bid", "approve", "default"],
        },
        "title": "Fix the `{entry}` entrypoint of the {contract} contract for protocol {proto}",
        "blocks": [
            ("The contract /app/contracts/{contract}.tz no longer typechecks on {proto}.",),
            ("Use the mockup mode of octez-client; no node is available in the container.",),
            (
                "Reproduce:",
                "```",
                "octez-client --mode mockup --base-dir /tmp/mockup create mockup",
                "octez-client --mode mockup typecheck script contracts/{contract}.tz",
                "```",
            ),
            (
                "Error:",
                "```",
                "At line 12 characters 4 to 16,",
                "ill typed script: type nat is not compatible with type mutez",
                "```",
            ),
            (
                "Acceptance criteria:",
                "- `dune build @check` succeeds in src/proto_{proto}/{lib}.",
                "- The contract originates with `--burn-cap 1`.",
                "- Calling `{entry}` twice updates the storage as documented.",
            ),
            ("Do not change the storage type of the contract.",),
            (
                "Background:",
                "The {lib} library wraps the contract for the tezt tests.",
                "Its OCaml bindings are generated, so edit the .tz file and the test only.",
                "Run the tezt test with `dune exec tezt/tests/main.exe -- --file {contract}.ml`.",
            ),
            ("Write the originated contract address (KT1...) to /app/address.txt.",),
        ],
        "commands": [
            (
                "opam switch list\n",
                0.5,
                (
                    "#  switch  compiler                    description",
                    "->  default ocaml-base-compiler.4.14.1  default",
                ),
            ),
            (
                "octez-client --mode mockup --base-dir /tmp/mockup create mockup\n",
                2.0,
                ("Created mockup client base dir in /tmp/mockup",),
            ),
            (
                "octez-client --mode mockup typecheck script contracts/{contract}.tz\n",
                1.0,
                ("At line 12 characters 4 to 16,", "ill typed script: type nat is not compatible with type mutez"),
            ),
            (
                'grep -n "{entry}" contracts/{contract}.tz\n',
                0.1,
                ("{s}:      # {entry}", "{a}:      DIG 2 ; ADD ; NIL operation ; PAIR"),
            ),
            (
                "dune build @check 2>&1 | tail -4\n",
                30.0,
                (
                    'File "src/proto_{proto}/{lib}/{contract}_repr.ml", line {a}, characters 2-14:',
                    "Error: Unbound value {entry}",
                ),
            ),
            ("dune build src/proto_{proto}/{lib}\n", 30.0, ()),
            (
                "dune exec tezt/tests/main.exe -- --file {contract}.ml\n",
                45.0,
                ("[SUCCESS] (1/{s}) {contract}: {entry}", "[FAILURE] (2/{s}) {contract}: {entry} twice"),
            ),
            (
                (
                    "octez-client --mode mockup originate contract {contract} transferring 0 from "
                    "bootstrap1 running contracts/{contract}.tz --init 0 --burn-cap 1\n"
                ),
                3.0,
                ("New contract KT1{a}Xz{b}qW originated.", "Storage size: {a} bytes"),
            ),
        ],
        "analysis": [
            "The contract {contract}.tz does not typecheck under {proto}.",
            "The `{entry}` branch adds a nat to a mutez.",
            "dune reports an unbound value in {lib}.",
            "The contract now originates in mockup mode.",
        ],
        "plan": [
            "Create a mockup base dir and typecheck the contract.",
            "Fix the arithmetic in `{entry}` and typecheck again.",
            "Rebuild {lib} with dune and run the tezt test.",
            "Originate the contract and save its address.",
        ],
    },
}
REASONING = [
    "Let me look at what the last command printed before changing anything.",
    "The output is consistent with my hypothesis.",
    "Hmm, that did not change the behaviour; I should verify my assumption first.",
    "A focused check is cheaper than rerunning everything.",
    "I need to be careful not to break anything else here.",
]
OPENERS = ["", "", "Looking at the output, ", "After the last command, ", "So far: "]
