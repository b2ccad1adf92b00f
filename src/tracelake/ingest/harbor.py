"""Harbor job directories -> the trajectories table.

Layout read (Harbor 0.1.x): <jobs>/<job>/<trial>/result.json, <trial>/agent/trajectory.json (ATIF),
optional continuations agent/trajectory.cont-K.json (same conversation, chained by
continued_trajectory_ref) and subagents agent/trajectory.summarization-K-{summary,questions,answers}.json
(each its own row, is_subagent, trace_source = summarization-K-...). JOBS may be a directory of
jobs, one job, or one trial.

Units: every trial gives one main unit plus one per subagent file; each ends as a row or a reject.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import orjson

from tracelake.core.errors import BadInput
from tracelake.core.hashing import sha256_bytes
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
from tracelake.ingest.parallel import ordered_map, worker_count

INPUT_KIND = "harbor"
TRIAL_BATCH = 64   # trials a worker reads and writes as one part (a worker holds their rows: keep it bounded)
_MAX_CONTINUATIONS = 1000


def find_trials(root: Path) -> list[Path]:
    """Trial directories under root, sorted: a directory with agent/, or a leaf with a trial result.json."""
    root = Path(root)
    if not root.is_dir():
        raise BadInput(f"{root} is not a directory (expected Harbor job directories)")

    def scan(d: Path) -> list[Path]:
        if (d / "agent").is_dir():
            return [d]
        children = sorted(c for c in d.iterdir() if c.is_dir() and not c.name.startswith("."))
        found = [t for c in children for t in scan(c)]
        if found:
            return found
        result = d / "result.json"
        if result.is_file() and not _is_job_result(result):
            return [d]  # a trial whose agent never ran: it will be rejected with its reason
        return []

    return scan(root)


def _is_job_result(path: Path) -> bool:
    """A job-level result.json carries aggregate "stats" and no trial_name."""
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return False
    return isinstance(data, dict) and "stats" in data and "trial_name" not in data


def trial_units(root: Path, trial: Path) -> list[Unit]:
    rel = trial.relative_to(root).as_posix() if trial != root else "."
    agent = trial / "agent"
    units = [Unit(path=_join(rel, "agent/trajectory.json"), trace_source="main")]
    if agent.is_dir():
        for f in sorted(agent.glob("trajectory.*.json")):
            kind = f.name[len("trajectory."):-len(".json")]
            if not kind.startswith("cont-"):
                units.append(Unit(path=_join(rel, f"agent/{f.name}"), trace_source=kind))
    for u in units:
        u.payload = trial
    return units


def _join(rel: str, name: str) -> str:
    return name if rel == "." else f"{rel}/{name}"


@dataclass
class _Trial:
    """What result.json says about a trial."""

    task: str
    trial_name: str
    run_id: str | None
    agent: str | None
    model: str | None
    provider: str | None
    date: str | None
    exception_type: str | None
    reward: float | None

    @property
    def result(self) -> str | None:
        if self.exception_type:
            return self.exception_type
        return None if self.reward is None else str(float(self.reward))


def _dig(d: Any, *keys: str) -> Any:
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def parse_result(data: Any, trial: Path) -> _Trial:
    if not isinstance(data, dict):
        raise Reject("invalid_field", "result.json is not a JSON object")
    task = data.get("task_name") or _dig(data, "config", "task_name")
    if not isinstance(task, str) or not task:
        raise Reject("missing_required_field", "result.json has no task_name")
    trial_name = data.get("trial_name") or trial.name
    reward = _dig(data, "verifier_result", "rewards", "reward")
    if reward is not None:
        if isinstance(reward, bool) or not isinstance(reward, (int, float, str)):
            raise Reject("invalid_field", f"verifier_result.rewards.reward is {reward!r}, not a number")
        try:
            reward = float(reward)
        except ValueError:
            raise Reject("invalid_field", f"verifier_result.rewards.reward is {reward!r}, not a number") from None
    exc = _dig(data, "exception_info", "exception_type")
    return _Trial(
        task=task,
        trial_name=str(trial_name),
        run_id=_str(_dig(data, "config", "job_id") or data.get("job_id") or trial.parent.name),
        agent=_str(_dig(data, "agent_info", "name") or _dig(data, "config", "agent", "name")),
        model=_str(_dig(data, "agent_info", "model_info", "name") or _dig(data, "config", "agent", "model_name")),
        provider=_str(_dig(data, "agent_info", "model_info", "provider")),
        date=_str(data.get("started_at")),
        exception_type=_str(exc) if exc else None,
        reward=reward,
    )


def _str(v: Any) -> str | None:
    return None if v is None else str(v)


class HarborReader:
    """Reads one trial's files (a worker makes one per trial); remembers every file's hash in the
    order it was read (result.json first)."""

    def __init__(self, root: Path, source: str):
        self.root = Path(root)
        self.source = source
        self.files: dict[str, str] = {}

    def _load(self, rel: str, missing_reason: str) -> tuple[Any, dict[str, str]]:
        path = self.root / rel
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise Reject(missing_reason, f"{rel} does not exist") from None
        except OSError as e:
            raise Reject("unreadable_file", f"{rel}: {e.strerror}") from None
        digest = sha256_bytes(data)
        self.files[rel] = digest
        return parse_json_bytes(data, rel), {"path": rel, "sha256": digest}

    def read_trial(self, units: list[Unit]) -> tuple[tuple[str, str] | None, list[dict | Reject]]:
        """The trial's (task, trial_name) (None when its result.json is unusable) and each unit's
        row or Reject."""
        rel = trial_rel(units)
        try:
            doc, prov = self._load(_join(rel, "result.json"), "missing_result_json")
            meta = parse_result(doc, units[0].payload)
        except Reject as r:
            return None, [r] * len(units)
        main_doc = None
        outcomes: list[dict | Reject] = []
        for unit in units:
            try:
                if unit.trace_source == "main":
                    row, main_doc = self._main(unit, meta, prov)
                else:
                    row = self._subagent(unit, meta, prov, main_doc)
                outcomes.append(row)
            except Reject as r:
                outcomes.append(r)
        return (meta.task, meta.trial_name), outcomes

    def _main(self, unit: Unit, meta: _Trial, result_prov: dict) -> tuple[dict, Any]:
        doc, prov = self._load(unit.path, "missing_trajectory")
        chain, provenance = [(unit.path, doc)], [result_prov, prov]
        agent_dir = unit.path.rsplit("/", 1)[0] if "/" in unit.path else ""
        while isinstance(chain[-1][1], dict) and chain[-1][1].get("continued_trajectory_ref"):
            ref = chain[-1][1]["continued_trajectory_ref"]
            if not isinstance(ref, str) or "/" in ref or ref.startswith(".") or len(chain) > _MAX_CONTINUATIONS:
                raise Reject("broken_continuation", f"{chain[-1][0]}: continued_trajectory_ref {ref!r} is not a file name in agent/")
            ref_rel = f"{agent_dir}/{ref}" if agent_dir else ref
            if any(ref_rel == where for where, _ in chain):
                raise Reject("broken_continuation", f"{chain[-1][0]}: continuation loops back to {ref}")
            next_doc, next_prov = self._load(ref_rel, "broken_continuation")
            chain.append((ref_rel, next_doc))
            provenance.append(next_prov)
        messages, n_episodes = atif.main_conversation(chain)
        agent_info = doc.get("agent") or {}
        return self._row(meta, messages, "main", f"episode-{n_episodes - 1}", n_episodes,
                         meta.agent or agent_info.get("name"), agent_info.get("model_name") or meta.model,
                         provenance), doc

    def _subagent(self, unit: Unit, meta: _Trial, result_prov: dict, main_doc: Any) -> dict:
        doc, prov = self._load(unit.path, "missing_trajectory")
        parent_json = isinstance(main_doc, dict) and atif.uses_terminus_json(main_doc)
        messages = atif.subagent_conversation(unit.path, doc, parent_json)
        model = (doc.get("agent") or {}).get("model_name") or meta.model
        return self._row(meta, messages, unit.trace_source, "episode-0", 1, meta.agent, model,
                         [result_prov, prov])

    def _row(self, meta: _Trial, messages, trace_source, episode, n_episodes, agent, model, provenance):
        return trajectory_row(
            source=self.source, task=meta.task, messages=messages, trace_source=trace_source,
            run_id=meta.run_id, trial_name=meta.trial_name, episode=episode, n_episodes=n_episodes,
            agent=agent, model=model, model_provider=meta.provider, date=meta.date, result=meta.result,
            reward=meta.reward, exception_type=meta.exception_type, renderer=atif.RENDERER,
            provenance=provenance, row_index=None)


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
    for trial in trials:
        reader = HarborReader(Path(root), source)
        trial_units_ = trial_units(Path(root), Path(trial))
        key, trial_outcomes = reader.read_trial(trial_units_)
        units += trial_units_
        outcomes += trial_outcomes
        read.append((key, len(trial_units_), list(reader.files.items())))
    for u in units:
        u.payload = None   # what travels back is the outcome, not the input
    rows = [o for o in outcomes if not isinstance(o, Reject)]
    return TrialsRead(Parsed(units, [o if isinstance(o, Reject) else None for o in outcomes],
                             write_scratch_part(directory, rows), [r["trajectory_id"] for r in rows]), read)


class TrialDedup:
    """In input order: a trial whose (task, trial_name) an earlier trial had is rejected whole
    (only its result.json counts as read); records every file's hash for the inputs digest."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], str] = {}
        self.files: dict[str, str] = {}

    def __call__(self, read: TrialsRead) -> Parsed:
        parsed, start, keep = read.parsed, 0, []
        for key, n_units, files in read.trials:
            units = parsed.units[start:start + n_units]
            rejects = parsed.rejects[start:start + n_units]
            rel = trial_rel(units)
            first = self.seen.setdefault(key, rel) if key is not None else rel
            self.files.update(files if first == rel else files[:1])
            keep += [first == rel] * rejects.count(None)
            if first != rel:
                parsed.rejects[start:start + n_units] = [Reject(
                    "duplicate_trial", f"trial {key[1]} of task {key[0]} was already ingested from {first}")] * n_units
            start += n_units
        return drop_rows(parsed, keep)


def ingest_harbor(jobs_dir: Path, *, source: str, out_dir: Path, strict: bool = False,
                  metrics_path: Path | None = None, workers: int = 0,
                  on_start: Callable[[int], None] | None = None,
                  on_progress: Callable[[int], None] | None = None) -> IngestResult:
    """Ingest every trial under jobs_dir into out_dir (the trajectories table, rejects.parquet,
    manifest). Trials are read TRIAL_BATCH at a time in `workers` processes (0: one per core), each
    batch written by its worker as a part; the output is the same whatever the worker count."""
    jobs_dir = Path(jobs_dir)
    trials = find_trials(jobs_dir)
    if on_start:
        on_start(len(trials))
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.parts-", dir=out_dir.parent))
    dedup = TrialDedup()

    def batches() -> Iterator[Parsed]:
        chunks = [trials[i:i + TRIAL_BATCH] for i in range(0, len(trials), TRIAL_BATCH)]
        work = ((str(jobs_dir), source, [str(t) for t in chunk], str(scratch)) for chunk in chunks)
        for chunk, read in zip(chunks, ordered_map(read_trials, work, worker_count(workers))):
            yield dedup(read)
            if on_progress:
                on_progress(len(chunk))

    try:
        return run_ingest(
            out_dir=out_dir, table="trajectories", source=source, input_kind=INPUT_KIND,
            batches=batches(), strict=strict,
            inputs=lambda: {"kind": INPUT_KIND, "root": jobs_dir.as_posix(), "trials": len(trials),
                            **inputs_digest(dedup.files.items())},
            params={"source": source, "input_kind": INPUT_KIND},
            formulas={"renderer": atif.RENDERER},
            metrics_path=metrics_path,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
