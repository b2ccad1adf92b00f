"""What every part of the sample generator shares; writes nothing itself, but holds the one
function that writes a file (`write`) and the one that renders JSON (`dumps`).

Every random choice comes from `seeded(seed, *parts)`: a `random.Random` seeded by a hash of the
seed and a description of what is drawn (source, kind, index), so what one trial draws does not
depend on the order trials are written in, or on what other trials drew.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

STYLES = ("swesmith", "superuser", "tezos")
FORMATS = ("harbor", "traces")
BASE_TIME = datetime(2026, 3, 2, 8, 0, 0)
MODELS = (
    ("glm", "hosted_vllm/glm", "hosted_vllm"),
    ("qwen3-8b", "hosted_vllm/Qwen3-8B", "hosted_vllm"),
    ("gpt-5-mini", "openai/gpt-5-mini", "openai"),
)


@dataclass(frozen=True)
class SourceSpec:
    name: str  # e.g. "swesmith"
    style: str  # "swesmith" | "superuser" | "tezos": task names, instructions, commands
    format: str  # "harbor" (job directories) or "traces" (one JSONL trace table)
    share: float  # fraction of all trials and tasks that belong to this source


def seeded(seed: int | str, *parts: object) -> random.Random:
    """A Random seeded by a stable hash of (seed, *parts): independent of iteration order."""
    key = "\x1f".join(str(p) for p in (seed, *parts)).encode()
    return random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))


def apportion(total: int, weights: Sequence[float]) -> list[int]:
    """Split `total` into integers proportional to `weights` (largest remainder, stable ties)."""
    wsum = sum(weights)
    if total <= 0 or wsum <= 0:
        return [0] * len(weights)
    exact = [total * w / wsum for w in weights]
    counts = [math.floor(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (counts[i] - exact[i], i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


def dumps(obj: Any) -> bytes:
    """JSON as Harbor writes it: indented, UTF-8, a final newline."""
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def write(path: Path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)


def iso(t: datetime) -> str:
    return t.isoformat(timespec="microseconds")


def uuid4(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def lognorm(rng: random.Random, median: float, sigma: float, lo: int, hi: int) -> int:
    return max(lo, min(hi, round(rng.lognormvariate(math.log(median), sigma))))
