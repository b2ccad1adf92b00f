-- earlier_episode_v2 (episodes: last): when one trial's trace appears as several episode rows
-- (trace tables exported with every episode), keep only the trial's last episode. A trial is the
-- full identity of a run: source, run_id, agent, model, trial_name, trace_source (v1 left out agent
-- and model: Harbor's goldens all carry trial_name NORMALIZED_TRIAL_NAME, and two agents' runs
-- sharing a trial name became one trial). The last episode is taken over all ingested rows, before
-- any other rule, so an earlier episode never stands in for a dropped last one. Rows without a
-- trial name or an episode number are kept.
SELECT c.trajectory_id, format('episode {} of a trial whose last episode is {}', c.episode_no, g.last_no) AS detail
FROM candidates AS c
JOIN (
    SELECT source, run_id, agent, model, trial_name, trace_source, max(episode_no) AS last_no
    FROM base
    WHERE trial_name IS NOT NULL AND episode_no IS NOT NULL
    GROUP BY source, run_id, agent, model, trial_name, trace_source
) AS g
  ON c.source = g.source
 AND c.run_id IS NOT DISTINCT FROM g.run_id
 AND c.agent IS NOT DISTINCT FROM g.agent
 AND c.model IS NOT DISTINCT FROM g.model
 AND c.trial_name = g.trial_name
 AND c.trace_source = g.trace_source
WHERE c.episode_no < g.last_no
