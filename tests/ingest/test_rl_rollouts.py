"""RL rollouts come back as traces: a SkyRL Harbor run (route harbor, `tracelake train rl`) writes
one Harbor trial directory per rollout under its trials_dir (harbor_trial_config.trials_dir,
runs/<dataset id>/trials): <trials_dir>/<task>__<id>/{result.json, agent/trajectory*.json}, with no
job directory above them (HarborGenerator runs each Trial alone, so config.job_id is null), the
task named by its directory in the export (<source>.<task>), and result.json's agent_result
carrying the rollout details training collected (token ids, logprobs). `tracelake ingest harbor`
reads that directory as a new source, so RL rollouts are explored, diffed and mixed like any other
traces. The trajectories are the real terminus-2 ATIF files in ../shared/fixtures."""

from __future__ import annotations

from tracelake.core.tables import read_table

from ..helpers import GOLDEN, GOLDEN_TRIALS, make_trial, need, result_json, run_tracelake

TASK = "swesmith.swesmith-0001"  # the task's directory name once extracted (runs/<dataset id>/harbor)


def skyrl_trial_result(trial: str, **result) -> dict:
    """result.json as Harbor writes it for a trial that SkyRL's HarborGenerator started."""
    out = result_json(TASK, trial, **result)
    out["config"]["job_id"] = None  # a Trial run alone, not through a Harbor Job
    out["config"]["trials_dir"] = "runs/rl-265-4ad0549ed619/trials"
    out["agent_result"] = {
        "n_input_tokens": 4096,
        "n_output_tokens": 512,
        "rollout_details": [
            {"prompt_token_ids": [[1, 2, 3]], "completion_token_ids": [[4, 5]], "logprobs": [[-0.1, -0.2]]}
        ],
    }
    return out


def test_a_skyrl_harbor_runs_trials_ingest_as_a_new_source(tmp_path):
    need(GOLDEN)
    run = tmp_path / "runs" / "rl-265-4ad0549ed619"
    trials = {"linear__1": {}, "summ__1": {}, "timeout__1": {"exception": "AgentTimeoutError", "reward": 0.0}}
    for name, result in trials.items():
        files, _ = GOLDEN_TRIALS[name]
        trial = f"{TASK}__{name.replace('__', '-')}"
        make_trial(
            run,
            trial,
            job="trials",  # <trials_dir>/<trial>: the trials directory stands where a job would
            task=TASK,
            result=skyrl_trial_result(trial, **result),
            files={agent_file: GOLDEN / golden for agent_file, golden in files.items()},
        )
    proc = run_tracelake(tmp_path, "ingest", "harbor", str(run / "trials"), "--source", "rl-rollouts", "--out", "lake")
    assert proc.returncode == 0, proc.stderr
    rows = read_table(tmp_path / "lake" / "trajectories" / "rl-rollouts", "trajectories").to_pylist()
    rejects = read_table(tmp_path / "lake" / "trajectories" / "rl-rollouts", "rejects").to_pylist()
    assert not rejects, rejects
    mains = [r for r in rows if r["trace_source"] == "main"]
    assert len(mains) == len(trials) and {r["task"] for r in rows} == {TASK}
    assert {r["trial_name"] for r in mains} == {f"{TASK}__{n.replace('__', '-')}" for n in trials}
    assert any(r["trace_source"] != "main" for r in rows)  # the summarization subagents, each a row
    timed_out = next(r for r in mains if r["trial_name"].endswith("timeout-1"))
    assert timed_out["exception_type"] == "AgentTimeoutError" and timed_out["reward"] == 0.0
