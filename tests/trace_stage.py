"""Run one DVC stage script under an audit hook and record every file it opens.

    python tests/trace_stage.py LOG SCRIPT [ARG ...]
    python tests/trace_stage.py LOG -m MODULE [ARG ...]

runs SCRIPT as `python SCRIPT ARG ...` (or MODULE as `python -m MODULE ARG ...`) would (run as
__main__, sys.argv and sys.path[0] set the same way) and, however it ends, writes LOG: a JSON object with `opens`, every `open` audit event in
order as [absolute path, "r" or "w"] ("r": a file opened for reading, "w": opened for writing only), and
`tracelake`, the file the tracelake package was imported from (None when it was not imported).

Used by tests/project/test_dvc_deps.py. Only opens that go through Python raise the event (open(),
pathlib, io.open_code for imports, os.open); files that native code opens by itself (DuckDB, Arrow
C++, tokenizers) are not seen.
"""

from __future__ import annotations

import json
import os
import runpy
import sys


def main() -> None:
    log, script, *args = sys.argv[1:]
    module = None
    if script == "-m":
        module, *args = args
    opens: list[list[str]] = []
    accmode = os.O_RDONLY | os.O_WRONLY | os.O_RDWR

    def hook(event: str, hook_args: tuple) -> None:
        if event != "open":
            return
        path, mode, flags = (tuple(hook_args) + (None, None))[:3]
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str):  # a file descriptor
            return
        if isinstance(mode, str):
            reads = "r" in mode or "+" in mode
        else:
            reads = not isinstance(flags, int) or (flags & accmode) in (os.O_RDONLY, os.O_RDWR)
        if reads and not os.path.isfile(path):
            return  # a directory, a failed open, or a name relative to a dir_fd (shutil.rmtree)
        opens.append([os.path.abspath(path), "r" if reads else "w"])

    if module is None:
        script = os.path.abspath(script)
        sys.argv = [script, *args]
        sys.path[0] = os.path.dirname(script)
    else:
        sys.argv = [module, *args]
        sys.path[0] = os.getcwd()
    sys.addaudithook(hook)
    try:
        if module is None:
            runpy.run_path(script, run_name="__main__")
        else:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        package = sys.modules.get("tracelake")
        with open(log, "w") as f:  # recorded too, but the log lives outside the project
            json.dump({"opens": opens, "tracelake": getattr(package, "__file__", None)}, f)


if __name__ == "__main__":
    main()
