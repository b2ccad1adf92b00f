"""Tasks -> SkyRL RL data: the tasks as a reproducible Harbor task table (what SkyRL's Harbor
entrypoint trains on, once extracted) and as a PromptDataset (one prompt row per task, rule
skyrl_prompt_v1), the tasks curation dropped and those that could not become either, with reasons.

    lake/exports/rl/
      tasks/train-00000.parquet    harbor_tasks: (path, task_binary) rows of the exported tasks, in the
                                   prompts' order; archives normalized (normalized_binary): same files,
                                   same bytes. `tracelake train rl` extracts them into
                                   <train.runs>/<dataset id>/harbor/<path>/ (export/task_dirs.py), the
                                   directory data.train_data names; `tracelake tasks extract` does by hand
      prompts/train-00000.parquet  rl_prompts: what SkyRL's PromptDataset reads (main_base with an
                                   environment of your own)
      rl_dropped.parquet           tasks a curation rule (curated_out) or the pick (export_rl.pick, rl_pick.py)
                                   left out, each with its rule and why
      export_rejects.parquet       tasks with a prompt SkyRL would drop, and tasks without a task directory
      manifest.json                written last; dataset_id rl-<tasks>-<12 hex of the prompts>

Why: SkyRL passes every prompt column except `prompt` and `env_class` to the environment as its
extras, so a row carries everything the Harbor environment needs to find and grade its task:
reward_spec.ground_truth is the task's `path` (`<source>.<name>`: its directory name once the table
is extracted, by `tracelake train rl`, `tracelake tasks extract` or SkyRL's prepare_harbor_dataset.py). PromptDataset silently
filters out prompts whose chat template with the generation prompt is longer than max_prompt_length
tokens: those are rejected here with a reason instead, so every task is accounted for (in = out +
dropped + rejected). A task without a task_binary (one derived from a trace table published without
task directories) has no environment to run in: it is rejected (no_task_binary) unless
`without_binary: prompt`, which exports its prompt without a task table row (counted as
`prompt_only`: its environment must come from elsewhere). Upsampling does not apply: each task is
one directory and one prompt. A prompt's length is `len(tokenizer.encode(render_chatml(prompt)
+ "<|im_start|>assistant\\n", add_special_tokens=False))`: exactly what PromptDataset measures with a
ChatML chat template (the project's tokenizer; Qwen's for messages without tools).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import duckdb
from tokenizers import Tokenizer

from tracelake.core.assets import sql
from tracelake.core.datasets import dataset_id
from tracelake.core.duckdb_views import connect, input_versions
from tracelake.core.errors import BadInput, check
from tracelake.core.lake import Lake
from tracelake.core.outputs import read_manifest
from tracelake.core.schema import load_schema
from tracelake.core.stage import Manifest
from tracelake.core.tables import ShardWriter, TableWriter
from tracelake.core.ui import progress
from tracelake.curate.filter import attach_dedup
from tracelake.curate.filter_rules import RULES
from tracelake.export.rl_pick import PICK_RULES, out_of_bounds, picked_out
from tracelake.ingest.archive_read import Entry
from tracelake.ingest.common import Reject
from tracelake.ingest.task_archive import build_archive, read_archive
from tracelake.tokens.tokenizer import load_tokenizer, render_chatml, tokenizer_fingerprint

if TYPE_CHECKING:
    from tracelake.curate.filter_params import FilterParams
    from tracelake.export.params import ExportRlParams, RlPickParams

PROMPT_RULE = "skyrl_prompt_v1"
GENERATION_PROMPT = "<|im_start|>assistant\n"
REJECT_REASONS = ("no_task_binary", "incomplete_task", "prompt_too_long")
# What a Harbor trial needs of a task directory: its instruction, its config, the environment it
# builds and the tests that grade it (SkyRL's HarborTaskDataset itself checks only instruction.md).
HARBOR_LAYOUT = ("instruction.md", "task.toml", "environment/", "tests/")
TASK_COLUMNS = ("task_id", "source", "name", "instruction", "task_checksum", "task_binary")
BATCH = 64  # task_binary values can be megabytes each


@dataclass(frozen=True)
class RlSettings:
    """The export_rl params that shape a prompt row."""

    env_class: str
    reward_method: str
    system_prompt: str | None
    max_turns: int
    max_prompt_length: int
    without_binary: str = (
        "reject"  # a task without a task_binary: "reject" (no_task_binary) or "prompt" (no task table row)
    )

    @classmethod
    def of(cls, params: ExportRlParams) -> RlSettings:
        """The settings of the export_rl params: each is the param of its name."""
        return cls(**{f.name: getattr(params, f.name) for f in fields(cls)})


@dataclass
class RlStats:
    tasks_in: int = 0
    tasks_out: int = 0
    prompt_only: int = 0  # prompts whose task has no binary, hence no row in the task table
    rejected: Counter = field(default_factory=Counter)
    dropped: Counter = field(default_factory=Counter)  # rule -> tasks it left out (DROP_RULES)
    sources: dict[str, dict[str, Any]] = field(default_factory=dict)  # source -> its funnel

    def funnel(self, source: str) -> dict[str, Any]:
        """The funnel of one source: in = out + Σ dropped + Σ rejected."""
        return self.sources.setdefault(
            source,
            {"in": 0, "out": 0, "dropped": dict.fromkeys(DROP_RULES, 0), "rejected": dict.fromkeys(REJECT_REASONS, 0)},
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "tasks_in": self.tasks_in,
            "tasks_out": self.tasks_out,
            "prompt_only": self.prompt_only,
            "dropped": {r: self.dropped.get(r, 0) for r in DROP_RULES},
            "rejected": {r: self.rejected.get(r, 0) for r in REJECT_REASONS},
            "sources": {name: self.sources[name] for name in sorted(self.sources)},
        }


# The filter's task-level rules (curate/filter_rules.py: task_level), applied to tasks: a task
# whose rollouts the SFT side drops for what the task is never becomes an RL prompt either.
TASK_RULES = tuple(rule.name for rule in RULES if rule.task_level)
DROP_RULES = (*TASK_RULES, *PICK_RULES)  # every rule an rl_dropped row may name, in the order they apply


def curated_out(con: duckdb.DuckDBPyConnection, params: FilterParams) -> dict[str, tuple[str, str]]:
    """task_id -> (rule, detail) of every task of the `tasks` view that a task-level filter rule
    enabled in `params` drops (the first rule in the filter's order), with the dedup stage's tables
    attached as `task_clusters` and `contamination`. The rules' own SQL runs over the tasks, each
    task standing for its rollouts (`candidates`: task_id as trajectory_id)."""
    con.execute("CREATE OR REPLACE TEMP VIEW candidates AS SELECT task_id, task_id AS trajectory_id FROM tasks")
    dropped: dict[str, tuple[str, str]] = {}
    for rule in RULES:
        if rule.name in TASK_RULES and rule.enabled(params):
            for task_id, detail in con.execute(sql("filter_rules/" + rule.sql_name), rule.bind(params)).fetchall():
                dropped.setdefault(task_id, (rule.name, detail))
    con.execute("DROP VIEW candidates")
    return dropped


def dropped_row(task: dict[str, Any], rule: str, detail: str) -> dict[str, Any]:
    return {"task_id": task["task_id"], "source": task["source"], "name": task["name"], "rule": rule, "detail": detail}


def task_path(source: str, name: str) -> str:
    """The task directory's name, one level deep, when the task table is extracted, and the reward's
    ground truth: `<source>.<name>`. Unique, since a source name has no dot (core/params.py
    Name); one level, since SkyRL's HarborTaskDataset takes only the immediate subdirectories of each
    `data.train_data` entry that hold an instruction.md."""
    return f"{source}.{name}"


def missing_layout(entries: list[Entry]) -> list[str]:
    """The parts of HARBOR_LAYOUT a task's archive lacks (a directory counts when anything is in it)."""
    names = {e.name + "/" if e.is_dir else e.name for e in entries}
    names |= {e.name.split("/", 1)[0] + "/" for e in entries if "/" in e.name}
    return [part for part in HARBOR_LAYOUT if part not in names]


def prompt_messages(instruction: str, system_prompt: str | None) -> list[dict[str, str]]:
    """[optional system message] + the task instruction as the user turn (verbatim)."""
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [*system, {"role": "user", "content": instruction}]


def prompt_tokens(tokenizer: Tokenizer, prompts: list[list[dict[str, str]]], batch_size: int = 256) -> list[int]:
    """Tokens of each prompt as PromptDataset counts them: the ChatML rendering plus the generation prompt."""
    counts: list[int] = []
    for i in range(0, len(prompts), batch_size):
        texts = [render_chatml(p) + GENERATION_PROMPT for p in prompts[i : i + batch_size]]
        counts.extend(len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False))
    return counts


def prompt_row(task: dict[str, Any], messages: list[dict[str, str]], s: RlSettings) -> dict[str, Any]:
    """One rl_prompts row (every struct has the same fields on every row)."""
    path = task_path(task["source"], task["name"])
    return {
        "prompt": messages,
        "env_class": s.env_class,
        "reward_spec": {"method": s.reward_method, "ground_truth": path},
        "data_source": task["source"],
        "max_turns": s.max_turns,
        "task_id": task["task_id"],
        "extra_info": {
            "task_id": task["task_id"],
            "task": task["name"],
            "source": task["source"],
            "path": path,
            "task_checksum": task["task_checksum"],
        },
    }


def harbor_row(task: dict[str, Any], entries: list[Entry]) -> dict[str, Any]:
    """One harbor_tasks row: the task's files (`entries`, read from its archive) in the archive
    build_archive writes (ARCHIVE_FORMAT: sorted members, mode 0644/0755, owner 0, mtime 0, gzip
    without name or time), whatever tool made the ingested one: the same files give the same bytes.
    A task table such as OpenThoughts-Agent-RL-5K stores mtimes, uids and gids; a directory ingested
    here is already in this form (rebuilding it changes no byte)."""
    return {
        "path": task_path(task["source"], task["name"]),
        "task_binary": build_archive(entries),
        "task_id": task["task_id"],
        "source": task["source"],
        "name": task["name"],
        "task_checksum": task["task_checksum"],
    }


def reject_row(task: dict[str, Any], reason: str, detail: str) -> dict[str, Any]:
    check(reason in REJECT_REASONS, f"unknown export reject reason {reason!r}")
    return {
        "item_id": task["task_id"],
        "trajectory_id": None,
        "source": task["source"],
        "name": task["name"],
        "reason": reason,
        "detail": detail,
    }


def convert_batch(
    tasks: Iterable[dict[str, Any]], settings: RlSettings, tokenizer: Tokenizer, stats: RlStats, build: bool = True
) -> tuple[list[dict], list[dict], list[dict]]:
    """Task rows (TASK_COLUMNS) -> (rl_prompts rows, harbor_tasks rows, export_rejects rows).

    Both lists keep the input order; the task rows are those of the prompts whose task has a
    binary. Every input task ends in exactly one of prompts or rejects: without a binary
    (no_task_binary, with without_binary: reject), with an archive that lacks part of HARBOR_LAYOUT
    (incomplete_task), or with a prompt SkyRL would drop (prompt_too_long). `build=False` decides the
    same without building the harbor_tasks rows (the pick's pass over the pool: `exportable`).
    """
    tasks = list(tasks)
    reject_unrunnable = settings.without_binary == "reject"
    messages = {
        i: prompt_messages(t["instruction"], settings.system_prompt)
        for i, t in enumerate(tasks)
        if t["task_binary"] is not None or not reject_unrunnable
    }
    n_tokens = dict(zip(messages, prompt_tokens(tokenizer, list(messages.values()))))
    prompts: list[dict] = []
    harbor: list[dict] = []
    rejects: list[dict] = []
    for i, t in enumerate(tasks):
        entries, missing = None, []
        if i in messages and t["task_binary"] is not None:
            try:
                entries = read_archive(t["task_binary"])
                missing = missing_layout(entries)
            except Reject as e:
                missing = [f"a readable archive ({e.reason}: {e.detail})"]
        if i not in messages:
            rejects.append(
                reject_row(t, "no_task_binary", "the task row has no task_binary: the Harbor environment cannot run it")
            )
        elif missing:
            rejects.append(
                reject_row(
                    t, "incomplete_task", f"the task directory has no {', '.join(missing)}: Harbor cannot run it"
                )
            )
        elif n_tokens[i] > settings.max_prompt_length:
            rejects.append(
                reject_row(
                    t,
                    "prompt_too_long",
                    f"{n_tokens[i]} prompt tokens > max_prompt_length "
                    f"{settings.max_prompt_length} (SkyRL would drop it silently)",
                )
            )
        else:
            prompts.append(prompt_row(t, messages[i], settings))
            if entries is None:
                stats.prompt_only += 1
            elif build:
                harbor.append(harbor_row(t, entries))
    stats.tasks_in += len(tasks)
    stats.tasks_out += len(prompts)
    stats.rejected.update(r["reason"] for r in rejects)
    return prompts, harbor, rejects


def exportable(
    con: duckdb.DuckDBPyConnection, rows: str, left_out: dict[str, Any], settings: RlSettings, tokenizer: Tokenizer
) -> list[tuple[str, str]]:
    """(task_id, source) of every task of the query `rows` not in `left_out` that the export would
    write (no reject reason): the pool export_rl.pick draws from."""
    pool: list[tuple[str, str]] = []
    for batch in con.sql(rows).to_arrow_reader(BATCH):
        kept = [t for t in batch.to_pylist() if t["task_id"] not in left_out]
        prompts, _, _ = convert_batch(kept, settings, tokenizer, RlStats(), build=False)
        pool.extend((p["task_id"], p["data_source"]) for p in prompts)
    return pool


def export_rl(
    tmp: Path,
    lake: Lake,
    sources: list[str],
    settings: RlSettings,
    *,
    tokenizer_path: str,
    rows_per_shard: int,
    params: dict[str, Any],
    curation: FilterParams,
    pick: RlPickParams | None = None,
    scores: dict[str, float] | None = None,
) -> Manifest:
    """Every task of `sources` -> `tmp`, the temporary directory publish opened for <lake>/exports/rl/
    (prompts, Harbor task table, the tasks left out with their rule, rejects). `curation`: the filter
    params whose task-level rules apply (`curated_out`: contaminated and near-duplicate tasks, with the
    dedup stage's output). `pick` (export_rl.pick, rl_pick.py) then bounds the rest by `scores`
    (task_id -> the pick's scorer's score) and keeps N of those that can run. Returns the manifest
    (publish writes it), its counts the dataset id, shards, in/out/dropped/rejected and files."""
    con = connect(lake.root, sources, tables=("tasks",))
    attach_dedup(con, lake)
    left_out = curated_out(con, curation)
    total = con.execute("SELECT count(*) FROM tasks").fetchall()[0][0]
    tokenizer = load_tokenizer(tokenizer_path)
    stats = RlStats()
    rows = f"SELECT {', '.join(TASK_COLUMNS)} FROM tasks ORDER BY source, name, task_id"
    pool_size = None
    if pick is not None:
        all_tasks = con.execute("SELECT task_id, source FROM tasks ORDER BY source, name, task_id").fetchall()
        standing = [t for t in all_tasks if t[0] not in left_out]
        left_out |= out_of_bounds(standing, scores or {}, pick)
        if pick.tasks is not None:
            pool = exportable(con, rows, left_out, settings, tokenizer)
            pool_size = len(pool)
            left_out |= picked_out(pool, scores or {}, pick)
    out = lake.rl_export
    with (
        ShardWriter(tmp / "prompts", load_schema("rl_prompts"), rows_per_shard) as prompts,
        ShardWriter(tmp / "tasks", load_schema("harbor_tasks"), rows_per_shard, row_group_size=BATCH) as harbor,
        progress("export_rl") as (set_total, advance),
    ):
        rejects = TableWriter(tmp, load_schema("export_rejects"))
        dropped = TableWriter(tmp, load_schema("rl_dropped"))
        set_total(total)
        for batch in con.sql(rows).to_arrow_reader(BATCH):
            tasks = batch.to_pylist()
            for task in tasks:
                stats.funnel(task["source"])["in"] += 1
                if task["task_id"] in left_out:
                    rule, detail = left_out[task["task_id"]]
                    dropped.write(dropped_row(task, rule, detail))
                    stats.tasks_in += 1  # convert_batch counts the others
                    stats.dropped[rule] += 1
                    stats.funnel(task["source"])["dropped"][rule] += 1
            kept = [t for t in tasks if t["task_id"] not in left_out]
            prompt_rows, task_rows, rejected = convert_batch(kept, settings, tokenizer, stats)
            for prompt in prompt_rows:
                prompts.write(prompt)
                stats.funnel(prompt["data_source"])["out"] += 1
            for task in task_rows:
                harbor.write(task)
            for row in rejected:
                rejects.write(row)
                stats.funnel(row["source"])["rejected"][row["reason"]] += 1
            advance(batch.num_rows)
        info, task_info, reject_info = prompts.close(), harbor.close(), rejects.close()
        dropped_info = dropped.close()
    check(
        stats.tasks_in == stats.tasks_out + sum(stats.dropped.values()) + sum(stats.rejected.values()) == total,
        f"export_rl accounting: {total} tasks, {stats.as_json()}",
    )
    for source, f in stats.sources.items():
        check(
            f["in"] == f["out"] + sum(f["dropped"].values()) + sum(f["rejected"].values()),
            f"export_rl: the funnel of {source} does not reconcile: {f}",
        )
    check(
        info.rows == stats.tasks_out and task_info.rows == stats.tasks_out - stats.prompt_only,
        "export_rl: prompt and task shards differ",
    )
    if not info.rows:
        why = ", ".join(f"{k} {v}" for k, v in sorted((stats.rejected + stats.dropped).items()))
        hint = (
            "; these tasks have no task directory (derived from trace tables): export_rl.without_binary: "
            "prompt exports their prompts for an environment of your own"
            if stats.rejected["no_task_binary"]
            else ""
        )
        raise BadInput(
            f"export_rl: every one of {total} tasks was rejected or dropped ({why}); see "
            f"{out}/export_rejects.parquet and rl_dropped.parquet{hint}"
        )
    name = dataset_id("rl", stats.tasks_out, info.version_id)
    files = {"prompts": [f"prompts/{f}" for f in prompts.files], "tasks": [f"tasks/{f}" for f in harbor.files]}
    counts = {
        "dataset_id": name,
        "shards": len(prompts.files),
        **stats.as_json(),
        "files": files,
        "task_dirs": {"table": "tasks/", "count": task_info.rows},  # extracted by `tracelake train rl`
    }
    if pool_size is not None:
        counts["picked"] = {"tasks": stats.tasks_out, "from": pool_size}
    return Manifest(
        kind="export_rl",
        dataset_id=name,
        tables=[info.with_file("prompts/"), task_info.with_file("tasks/"), dropped_info, reject_info],
        inputs={
            "tasks": input_versions(lake.root, "tasks", sources),
            "dedup": read_manifest(lake.dedup)["version_id"],
            "tokenizer": tokenizer_fingerprint(tokenizer_path),
            **({"scores": read_manifest(lake.scores)["version_id"]} if pick and pick.score else {}),
        },
        params=params,
        formulas={"prompts": PROMPT_RULE},
        counts=counts,
    )
