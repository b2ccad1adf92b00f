"""The end every GPU check shares: run its `check`, time it, turn an exception into a FAIL (the next
check still runs), write <out>/<file>.json, print one PASS/FAIL line and exit 0 or 1."""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, NoReturn


def report(
    name: str,
    out: str,
    file: str,
    check: Callable[[], dict],
    detail: Callable[[dict], str],
    wall_key: str = "wall_s",
    tail_key: str = "traceback",
) -> NoReturn:
    started = time.perf_counter()
    try:
        result = check()
    except Exception as exc:  # noqa: BLE001 - a check reports; the next check still runs
        result = {
            "check": name,
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc().splitlines()[-12:],
        }
    result[wall_key] = round(time.perf_counter() - started, 2)
    result["status"] = "FAIL" if "error" in result else "PASS"
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / file).write_text(json.dumps(result, indent=2))
    print(f"{result['status']} {name}: {detail(result)}")
    for line in result.get(tail_key, []) or result.get("traceback", []):
        print("    " + line)
    sys.exit(0 if result["status"] == "PASS" else 1)
