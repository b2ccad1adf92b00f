"""Harbor job directories -> the trajectories table.

Layout read (Harbor 0.1.x): <jobs>/<job>/<trial>/result.json, <trial>/agent/trajectory.json (ATIF),
optional continuations agent/trajectory.cont-K.json (same conversation, chained by
continued_trajectory_ref) and subagents agent/trajectory.summarization-K-{summary,questions,answers}.json
(each its own row, is_subagent, trace_source = summarization-K-...). JOBS may be a directory of
jobs, one job, or one trial.

Units: every trial gives one main unit plus one per subagent file; each ends as a row or a reject.
So does each directory that is no input (walk.py: a link out of JOBS or a directory link, an
unreadable directory, a name that is not UTF-8). Every field read is type-checked first
(validate.py for ATIF, harbor_result.py for result.json).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import orjson

from tracelake.core.errors import BadInput
from tracelake.core.executor import Executor
from tracelake.core.hashing import sha256_bytes
from tracelake.core.swap import scratch_dir
from tracelake.ingest import atif
from tracelake.ingest.common import (
    IngestResult,
    Parsed,
    Reject,
    Unit,
    drop_rows,
    inputs_digest,
    parse_json_bytes,
    run_ingest,
    trajectory_row,
    write_scratch_part,
)
from tracelake.ingest.harbor_result import TrialResult, parse_result
from tracelake.ingest.validate import show
from tracelake.ingest.walk import Problem, Root, display, is_dir, is_text, listing, walk_dirs

INPUT_KIND = "harbor"
TRIAL_BATCH = 64  # trials a worker reads and writes as one part (a worker holds their rows: keep it bounded)
_MAX_CONTINUATIONS = 1000


def discover(root: Path) -> tuple[list[Path], list[Problem]]:
    """Trial directories under root, sorted (a directory with agent/, or a leaf with a trial
    result.json), and the directories that are no input (walk.py: links out of the root, loops,
    unreadable directories, names that are not UTF-8)."""
    root = Path(root)
    if not is_dir(root):
        raise BadInput(f"{display(str(root))} is not a directory (expected Harbor job directories)")
    inside = Root(root)

    def bare_leaf(d: Path) -> bool:  # a trial whose agent never ran: it will be rejected with its reason
        result = d / "result.json"
        return os.path.isfile(result) and (not inside.contains(result) or not _is_job_result(inside, result))

    found, problems = walk_dirs(inside, lambda d: is_dir(d / "agent"), bare_leaf)
    return [d for d, _ in found], problems


def _is_job_result(root: Root, path: Path) -> bool:
    """A job-level result.json carries aggregate "stats" and no trial_name."""
    try:
        data = orjson.loads(root.read(path, "result.json", "missing_result_json"))
    except (Reject, orjson.JSONDecodeError):
        return False
    return isinstance(data, dict) and "stats" in data and "trial_name" not in data


def trial_units(root: Root, trial: Path) -> list[Unit]:
    """The trial's main unit and one per subagent file; a unit whose file name is not UTF-8 carries
    its Reject as payload. An agent/ directory that links out of the root is not listed."""
    rel = trial.relative_to(root.path).as_posix() if trial != root.path else "."
    units = [Unit(path=_join(rel, "agent/trajectory.json"), trace_source="main")]
    agent = trial / "agent"
    try:
        names = [e.name for e in listing(agent)] if is_dir(agent) and root.dir_inside(agent) else []
    except OSError:
        names = []  # the main unit says why (its trajectory.json cannot be read either)
    for name in names:
        if (
            name.startswith("trajectory.")
            and name.endswith(".json")
            and len(name) > len("trajectory.json")
            and not name.startswith("trajectory.cont-")
        ):
            kind = name[len("trajectory.") : -len(".json")]
            unit = Unit(path=display(_join(rel, f"agent/{name}")), trace_source=display(kind))
            if not is_text(name):
                unit.payload = Reject("invalid_path", f"{unit.path} is not UTF-8")
            units.append(unit)
    return units


def _join(rel: str, name: str) -> str:
    return name if rel == "." else f"{rel}/{name}"


class HarborReader:
    """Reads one trial's files (a worker makes one per trial); remembers every file's hash in the
    order it was read (result.json first)."""

    def __init__(self, root: Root, source: str):
        self.root = root
        self.source = source
        self.files: dict[str, str] = {}

    def _load(self, rel: str, missing_reason: str) -> tuple[Any, dict[str, str]]:
        data = self.root.read(self.root.path / rel, rel, missing_reason)
        digest = sha256_bytes(data)
        self.files[rel] = digest
        return parse_json_bytes(data, rel), {"path": rel, "sha256": digest}

    def read_trial(self, trial: Path, units: list[Unit]) -> tuple[tuple[str, str] | None, list[dict | Reject]]:
        """The trial's (task, trial_name) (None when its result.json is unusable) and each unit's
        row or Reject."""
        rel = trial_rel(units)
        try:
            doc, prov = self._load(_join(rel, "result.json"), "missing_result_json")
            meta = parse_result(doc, trial)
        except Reject as r:
            return None, [r] * len(units)
        main_doc = None
        outcomes: list[dict | Reject] = []
        for unit in units:
            try:
                if isinstance(unit.payload, Reject):
                    raise unit.payload
                if unit.trace_source == "main":
                    row, main_doc = self._main(unit, meta, prov)
                else:
                    row = self._subagent(unit, meta, prov, main_doc)
                outcomes.append(row)
            except Reject as r:
                outcomes.append(r)
        return (meta.task, meta.trial_name), outcomes

    def _main(self, unit: Unit, meta: TrialResult, result_prov: dict) -> tuple[dict, Any]:
        doc, prov = self._load(unit.path, "missing_trajectory")
        chain, provenance = [(unit.path, doc)], [result_prov, prov]
        agent_dir = unit.path.rsplit("/", 1)[0] if "/" in unit.path else ""
        while isinstance(chain[-1][1], dict) and chain[-1][1].get("continued_trajectory_ref"):
            ref = chain[-1][1]["continued_trajectory_ref"]
            if not isinstance(ref, str) or "/" in ref or ref.startswith(".") or len(chain) > _MAX_CONTINUATIONS:
                raise Reject(
                    "broken_continuation",
                    f"{chain[-1][0]}: continued_trajectory_ref {show(ref)} is not a file name in agent/",
                )
            ref_rel = f"{agent_dir}/{ref}" if agent_dir else ref
            if any(ref_rel == where for where, _ in chain):
                raise Reject("broken_continuation", f"{chain[-1][0]}: continuation loops back to {ref}")
            next_doc, next_prov = self._load(ref_rel, "broken_continuation")
            chain.append((ref_rel, next_doc))
            provenance.append(next_prov)
        messages, n_episodes = atif.main_conversation(chain)
        agent_info = doc.get("agent") or {}
        return self._row(
            meta,
            messages,
            "main",
            f"episode-{n_episodes - 1}",
            n_episodes,
            meta.agent or agent_info.get("name"),
            agent_info.get("model_name") or meta.model,
            provenance,
        ), doc

    def _subagent(self, unit: Unit, meta: TrialResult, result_prov: dict, main_doc: Any) -> dict:
        doc, prov = self._load(unit.path, "missing_trajectory")
        parent_json = isinstance(main_doc, dict) and atif.uses_terminus_json(main_doc)
        messages = atif.subagent_conversation(unit.path, doc, parent_json)
        model = (doc.get("agent") or {}).get("model_name") or meta.model
        return self._row(meta, messages, unit.trace_source, "episode-0", 1, meta.agent, model, [result_prov, prov])

    def _row(self, meta: TrialResult, messages, trace_source, episode, n_episodes, agent, model, provenance):
        return trajectory_row(
            source=self.source,
            task=meta.task,
            messages=messages,
            trace_source=trace_source,
            run_id=meta.run_id,
            trial_name=meta.trial_name,
            episode=episode,
            n_episodes=n_episodes,
            agent=agent,
            model=model,
            model_provider=meta.provider,
            date=meta.date,
            result=meta.result,
            reward=meta.reward,
            exception_type=meta.exception_type,
            renderer=atif.RENDERER,
            provenance=provenance,
            row_index=None,
        )


def trial_rel(units: list[Unit]) -> str:
    """The trial directory of a trial's units, relative to the jobs root ("." for the root)."""
    return units[0].path.rsplit("agent/", 1)[0].rstrip("/") or "."


@dataclass
class TrialsRead:
    """What a worker read of a batch of trials: Parsed (rows as a part) plus, per trial, its key,
    how many units it has and the files it read (result.json first)."""

    parsed: Parsed
    trials: list[tuple[tuple[str, str] | None, int, list[tuple[str, str]]]]


def read_trials(task: tuple[str, str, list[str], str]) -> TrialsRead:
    """(jobs root, source, trial directories, scratch directory) -> TrialsRead, the rows written as
    a part in the scratch directory. Runs in a worker."""
    root, source, trials, directory = task
    units: list[Unit] = []
    outcomes: list[dict | Reject] = []
    read = []
    inside = Root(root)
    for trial in trials:
        reader = HarborReader(inside, source)
        trial_units_ = trial_units(inside, Path(trial))
        key, trial_outcomes = reader.read_trial(Path(trial), trial_units_)
        units += trial_units_
        outcomes += trial_outcomes
        read.append((key, len(trial_units_), list(reader.files.items())))
    for u in units:
        u.payload = None  # what travels back is the outcome, not the input
    rows = [o for o in outcomes if not isinstance(o, Reject)]
    return TrialsRead(
        Parsed(
            units,
            [o if isinstance(o, Reject) else None for o in outcomes],
            write_scratch_part(directory, rows),
            [r["trajectory_id"] for r in rows],
        ),
        read,
    )


class TrialDedup:
    """In input order (sorted trial paths, whatever the worker count): the first trial with a
    (task, trial_name) that gives at least one row claims that identity; a later trial with it is
    rejected whole as `duplicate_trial` (only its result.json counts as read). A copy that gave no
    row claims nothing: a retried job whose first copy is corrupt keeps its good one. Records every
    file's hash for the inputs digest."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], str] = {}
        self.files: dict[str, str] = {}

    def __call__(self, read: TrialsRead) -> Parsed:
        parsed, start, keep = read.parsed, 0, []
        for key, n_units, files in read.trials:
            units = parsed.units[start : start + n_units]
            rows = parsed.rejects[start : start + n_units].count(None)
            first = self.seen.get(key) if key is not None else None
            if first is None and key is not None and rows:
                self.seen[key] = trial_rel(units)
            self.files.update(files if first is None else files[:1])
            keep += [first is None] * rows
            if first is not None:
                parsed.rejects[start : start + n_units] = [
                    Reject("duplicate_trial", f"trial {key[1]} of task {key[0]} was already ingested from {first}")
                ] * n_units
            start += n_units
        return drop_rows(parsed, keep)


def ingest_harbor(
    jobs_dir: Path,
    *,
    source: str,
    out_dir: Path,
    strict: bool = False,
    metrics_path: Path | None = None,
    executor: Executor | None = None,
    on_start: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
    into: Path | None = None,
) -> IngestResult:
    """Ingest every trial under jobs_dir into out_dir (the trajectories table, rejects.parquet,
    manifest). Trials are read TRIAL_BATCH at a time as shards on `executor` (default: one process
    per core), each batch written by its worker as a part; the output is the same on any executor.
    `into`: the temporary directory publish opened for out_dir (common.py run_ingest)."""
    jobs_dir = Path(jobs_dir)
    trials, problems = discover(jobs_dir)
    if not trials and not problems:
        raise BadInput(
            f"{jobs_dir}: no Harbor trial in it (a trial is a directory holding result.json): give a trial, "
            f"a job directory or a directory of jobs"
        )
    if on_start:
        on_start(len(trials))
    out_dir = Path(out_dir)
    scratch = scratch_dir(out_dir)
    dedup = TrialDedup()

    def batches() -> Iterator[Parsed | tuple[list[Unit], Callable]]:
        if problems:  # directories that are no input: one reject each
            yield [Unit(path=p) for p, _ in problems], lambda units: [r for _, r in problems]
        chunks = [trials[i : i + TRIAL_BATCH] for i in range(0, len(trials), TRIAL_BATCH)]
        work = ((str(jobs_dir), source, [str(t) for t in chunk], str(scratch)) for chunk in chunks)
        for chunk, read in zip(chunks, (executor or Executor("processes")).map(read_trials, work)):
            yield dedup(read)
            if on_progress:
                on_progress(len(chunk))

    return run_ingest(
        table="trajectories",
        input_kind=INPUT_KIND,
        formulas={"renderer": atif.RENDERER},
        batches=batches(),
        inputs=lambda: {
            "root": display(jobs_dir.as_posix()),
            "trials": len(trials),
            **inputs_digest(dedup.files.items()),
        },
        out_dir=out_dir,
        source=source,
        strict=strict,
        metrics_path=metrics_path,
        scratch=scratch,
        into=into,
    )
