"""The lake's id formulas: task ids, dataset labels, and how a short prefix names a dataset (like
git). A dataset id (`sft-3.16k-9b6b602e9f63`) is core/datasets.py's `dataset_id`, beside the kinds.

    task_id_for("nl2bash", "count-words_copy0002")   -> 16 hex (copies are the same task)
    matches_id_prefix("9b6b60", "sft-3.16k-9b6b602e9f63") -> True

Row ids (trajectories, rejects, scores, slots) are `hashing.content_id` over the fields that make the
row what it is; they are built where the row is built. Changing any formula here renames datasets:
the stages that use it list this file as a DVC dependency.
"""

from __future__ import annotations

import re

from tracelake.core.hashing import content_id

# Upsampled copies of a task, as OpenThoughts-Agent names them: `<task>_copy0002`.
COPY_SUFFIX = re.compile(r"_copy\d+$")
# A dataset id prefix must have this many hex digits of its hash (git's short ids have 7).
MIN_PREFIX = 6


def base_task_name(task: str) -> str:
    """Strip the upsampling suffix `_copyNNNN`: copies of a task are the same task."""
    return COPY_SUFFIX.sub("", task)


def task_id_for(source: str, task: str) -> str:
    return content_id("task", [source, base_task_name(task)])


def copy_name(task: str, copy: int) -> str:
    """The name of one upsampled slot of a task: `<task>_copy0000`, `<task>_copy0001`, ..."""
    return f"{task}_copy{copy:04d}"


def dataset_label(n: int) -> str:
    """316 -> '316', 1000 -> '1k', 3160 -> '3.16k', 100000 -> '100k' (names like sft-3.16k-<hex>)."""
    return str(n) if n < 1000 else f"{n / 1000:.15g}k"


def matches_id_prefix(ref: str, dataset_id: str) -> bool:
    """Whether `ref` names `dataset_id` by prefix, like git: at least MIN_PREFIX digits of the id's hash,
    alone (`396828`) or after the id's head (`sft-3.16k-396828`)."""
    head, _, digest = dataset_id.rpartition("-")
    if head and ref.startswith(head + "-"):
        ref = ref[len(head) + 1 :]
    return len(ref) >= MIN_PREFIX and digest.startswith(ref)


def shard_entry_name(dataset_id: str, index: int) -> str:
    """A dataset's shard as LLaMA-Factory's dataset_info names it: `<dataset id>.<shard, 5 digits>`."""
    return f"{dataset_id}.{index:05d}"
