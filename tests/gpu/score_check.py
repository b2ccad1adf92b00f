"""Check 2: the model scorer `llm_response_length_v1` through the project's `transformers` backend, on a GPU.

    python tests/gpu/score_check.py --out OUT [--tasks lake/tasks] [--tokenizer data/tokenizer] [--n 50]
                                    [--worker-python PY] [--max-tokens 64] [--cpu-smoke]

Runs in a python with tracelake's curation dependencies (duckdb, pyarrow, pydantic, orjson; PYTHONPATH
with src/). The scorer is the pipeline's own code path: `run_model_scorer` (curate/scoring/answers.py) with
score.model.backend transformers, whose LocalEngine starts engines/worker.py in `--worker-python`
(default: this interpreter; it needs torch + transformers only), which loads the model with
`from_pretrained` and answers with `generate` on CUDA when torch sees a GPU.

1. a tiny random Qwen3 (tests/train_env/tiny_qwen3.py, run by the worker's python) beside the
   project's tokenizer;
2. `--n` task instructions from the sample lake's tasks tables (lake/tasks/*/tasks.parquet, built by
   the pipeline; padded with numbered copies when the lake holds fewer), as the views `tasks` and
   `trajectories` the scorer reads;
3. one scoring run (every task answered by the worker), then a second one (every answer from the
   cache, no model loaded).

PASS when every task has an answer and a score, none failed, the rerun asked nothing and gave the same
scores, and (on a GPU) nvidia-smi saw the worker use the GPU (a process, or 100 MiB more memory in use). Writes
OUT/score_check.json (answers/s, tokens/s, time to the first answer) and OUT/score/answers.jsonl; the
model and the answer cache stay in --work (/tmp/gpu-work/score).
`--cpu-smoke`: 5 tasks, 8 tokens, CPU, no GPU condition.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from report import report  # tests/gpu/report.py: run as a script, this folder is sys.path[0]

ROOT = Path(__file__).resolve().parents[2]
TINY_QWEN3 = ROOT / "tests" / "train_env" / "tiny_qwen3.py"


class GpuWatch:
    """Polls nvidia-smi while the scorer runs: the GPU's memory in use (visible inside containers too)
    and the processes using it (often hidden inside containers)."""

    def __init__(self) -> None:
        self.pids: set[int] = set()
        self.baseline_mib: int | None = None
        self.max_used_mib = 0
        self.available = shutil.which("nvidia-smi") is not None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    @staticmethod
    def _query(args: list[str]) -> list[list[str]]:
        try:
            out = subprocess.run(
                ["nvidia-smi", *args, "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return []
        return [[p.strip() for p in line.split(",")] for line in out.splitlines() if line.strip()]

    def used_mib(self) -> int | None:
        rows = self._query(["--query-gpu=memory.used"])
        return int(rows[0][0]) if rows and rows[0][0].isdigit() else None

    def _poll(self) -> None:
        while not self._stop.is_set():
            used = self.used_mib()
            if used is not None:
                self.max_used_mib = max(self.max_used_mib, used)
            for row in self._query(["--query-compute-apps=pid,used_memory"]):
                if row and row[0].isdigit():
                    self.pids.add(int(row[0]))
            self._stop.wait(0.5)

    def used_gpu(self) -> bool:
        """A process used the GPU: seen by nvidia-smi, or the memory in use rose by 100 MiB or more."""
        return bool(self.pids) or (self.baseline_mib is not None and self.max_used_mib - self.baseline_mib >= 100)

    def __enter__(self) -> GpuWatch:  # noqa: PYI034
        if self.available:
            self.baseline_mib = self.used_mib()
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self.available:
            self._thread.join(timeout=15)


def task_tables(tasks_dir: Path, n: int):
    """(task_id, instruction) of the first n tasks by task_id, as an Arrow table."""
    import duckdb
    import pyarrow as pa

    files = sorted(glob.glob(str(tasks_dir / "*" / "tasks.parquet")))
    rows: list[tuple[str, str]] = []
    if files:
        rows = (
            duckdb.connect()
            .execute(
                "SELECT task_id, instruction FROM read_parquet($files) WHERE instruction IS NOT NULL "
                "ORDER BY task_id LIMIT $n",
                {"files": files, "n": n},
            )
            .fetchall()
        )
    source = f"{len(rows)} tasks from {tasks_dir}" if rows else "none found"
    base = rows or [(f"synthetic-{i:03d}", f"Task {i}: list the files in /srv/{i} and count them.") for i in range(n)]
    out = list(rows)
    k = 1
    while len(out) < n:  # numbered copies: other task ids, so other requests
        out += [(f"{t}#copy{k}", text) for t, text in base[: n - len(out)]]
        k += 1
    return pa.table({"task_id": [t for t, _ in out], "instruction": [text for _, text in out]}), source


def check(args: argparse.Namespace) -> dict:
    import duckdb

    from tracelake.curate.score_params import ModelParams

    try:  # curate/scoring/ (the layout since the scoring modules moved), else curate/
        from tracelake.curate.scoring.answers import run_model_scorer
        from tracelake.curate.scoring.scorers import LlmResponseLength
    except ImportError:
        from tracelake.curate.answers import run_model_scorer
        from tracelake.curate.scorers import LlmResponseLength

    out = Path(args.out).resolve() / "score"  # logs and answers: small, they come back
    work = Path(args.work).resolve()  # the model and the answer cache stay here
    for d in (out, work):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
    worker_python = args.worker_python or sys.executable
    n = 5 if args.cpu_smoke and args.n is None else (args.n or 50)
    max_tokens = 8 if args.cpu_smoke and args.max_tokens is None else (args.max_tokens or 64)
    result: dict = {
        "check": "model_score",
        "n_tasks": n,
        "max_tokens": max_tokens,
        "cpu_smoke": args.cpu_smoke,
        "worker_python": worker_python,
    }
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    if args.cpu_smoke:
        env["CUDA_VISIBLE_DEVICES"] = ""
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the worker inherits this process's environment

    tokenizer = Path(args.tokenizer).resolve()
    if not (tokenizer / "tokenizer.json").is_file():
        try:
            from tracelake.tokens.tokenizer import build_tokenizer
        except ImportError:  # before core/tokens.py became tokens/tokenizer.py
            from tracelake.core.tokens import build_tokenizer

        tokenizer = build_tokenizer(work / "tokenizer")
    model = work / "tiny-qwen3"
    t = time.perf_counter()
    with (out / "model.log").open("w") as log:
        rc = subprocess.run(
            [worker_python, str(TINY_QWEN3), str(tokenizer), str(model)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
            timeout=180,
            check=False,
        ).returncode
    if rc != 0:
        result["error"] = "building the tiny Qwen3 failed: " + (out / "model.log").read_text()[-800:]
        return result
    result["model_build_s"] = round(time.perf_counter() - t, 2)

    tasks, source = task_tables(Path(args.tasks), n)
    result["tasks_from"] = source
    con = duckdb.connect()
    con.register("tasks_arrow", tasks)
    con.execute("CREATE VIEW tasks AS SELECT * FROM tasks_arrow")
    con.execute("CREATE VIEW trajectories AS SELECT task_id FROM tasks_arrow")
    params = ModelParams(
        backend="transformers",
        name="tiny-qwen3-gpu-check",
        path=str(model),
        python=worker_python,
        max_tokens=max_tokens,
        temperature=1.0,
        seed=0,
        n=1,
        batch_size=64,
    )
    scorer = LlmResponseLength()
    times: list[float] = []
    started = time.perf_counter()
    with GpuWatch() as watch:
        run = run_model_scorer(
            scorer, con, params, work / "cache", on_progress=lambda k, status: times.append(time.perf_counter())
        )
    wall = time.perf_counter() - started
    answers = run.answers()
    (out / "answers.jsonl").write_text("".join(json.dumps(a, default=str) + "\n" for a in answers))
    completion = sum(a["completion_tokens"] or 0 for a in answers)
    steady = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else None
    result.update(
        {
            "answered": run.computed,
            "cached": run.cached,
            "failed": len(run.failures),
            "scored": len(run.rows),
            "engine": run.engine,
            "wall_s": round(wall, 2),
            "first_answer_s": round(times[0] - started, 2) if times else None,
            "answers_per_s": round(run.computed / wall, 2) if wall else None,
            "answers_per_s_after_load": round(steady, 2) if steady else None,
            "completion_tokens": completion,
            "tokens_per_s_after_load": round(completion * steady / max(1, len(answers)), 1) if steady else None,
            "censored": run.censored,
            "gpu_processes_seen": sorted(watch.pids),
            "gpu_mem_baseline_mib": watch.baseline_mib,
            "gpu_mem_max_used_mib": watch.max_used_mib,
            "nvidia_smi": watch.available,
            "gpu_used": watch.used_gpu(),
            "sample_answer": answers[0]["text"][:200] if answers else None,
        }
    )
    t = time.perf_counter()
    again = run_model_scorer(scorer, con, params, work / "cache")
    result["rerun"] = {
        "answered": again.computed,
        "cached": again.cached,
        "wall_s": round(time.perf_counter() - t, 2),
        "same_scores": sorted((r["task_id"], r["score"]) for r in again.rows)
        == sorted((r["task_id"], r["score"]) for r in run.rows),
    }

    problems = []
    if run.computed != n or len(run.rows) != n or len(answers) != n or run.failures:
        problems.append(
            f"{run.computed} answered, {len(run.rows)} scored, {len(answers)} answers stored, "
            f"{len(run.failures)} failed of {n}: {[f.reason for _, f in run.failures][:5]}"
        )
    if not all(a["completion_tokens"] for a in answers):
        problems.append("an answer has no completion tokens")
    if again.computed != 0 or again.cached != n or not result["rerun"]["same_scores"]:
        problems.append(
            f"rerun: {again.computed} answered, {again.cached} cached (wanted 0 and {n}), same scores "
            f"{result['rerun']['same_scores']}"
        )
    if not args.cpu_smoke and watch.available and not watch.used_gpu():
        problems.append(
            f"the worker did not use the GPU: nvidia-smi saw no process and memory in use went from "
            f"{watch.baseline_mib} to at most {watch.max_used_mib} MiB"
        )
    if problems:
        result["error"] = "; ".join(problems)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default=str(ROOT / "lake" / "tasks"), help="directory of <source>/tasks.parquet")
    parser.add_argument("--tokenizer", default=str(ROOT / "data" / "tokenizer"))
    parser.add_argument("--out", default=os.environ.get("OUT") or "gpu-out")
    parser.add_argument("--work", default="/tmp/gpu-work/score", help="the model and the answer cache (emptied first)")
    parser.add_argument("--n", type=int, default=None, help="tasks to score (default 50; 5 with --cpu-smoke)")
    parser.add_argument("--max-tokens", type=int, default=None, help="default 64 (8 with --cpu-smoke)")
    parser.add_argument("--worker-python", default=None, help="interpreter with torch + transformers")
    parser.add_argument("--cpu-smoke", action="store_true", help="5 tasks on the CPU (no GPU needed)")
    args = parser.parse_args()

    def detail(result: dict) -> str:
        if "error" in result:
            return result["error"]
        return (
            f"{result.get('answered')} answers ({result.get('engine')}) in {result.get('wall_s')} s: "
            f"{result.get('answers_per_s')} answers/s overall, {result.get('answers_per_s_after_load')} after "
            f"the model loaded; rerun {result.get('rerun', {}).get('cached')} cached; GPU used "
            f"{result.get('gpu_used')} (max {result.get('gpu_mem_max_used_mib')} MiB)"
        )

    report("model_score", args.out, "score_check.json", lambda: check(args), detail, wall_key="check_wall_s")


if __name__ == "__main__":
    main()
