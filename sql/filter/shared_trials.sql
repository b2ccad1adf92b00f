-- Trial names that rows of different agents or models share (source, run_id, trial_name,
-- trace_source with more than one (agent, model)): earlier_episode_v2 keeps them apart, and the
-- filter reports how many (metrics: shared_trial_names), since such names are usually placeholders
-- (Harbor's goldens: NORMALIZED_TRIAL_NAME) rather than one run's trial.
SELECT count(*) AS n
FROM (
    SELECT source, run_id, trial_name, trace_source
    FROM base
    WHERE trial_name IS NOT NULL AND episode_no IS NOT NULL
    GROUP BY ALL
    HAVING count(DISTINCT (coalesce(agent, ''), coalesce(model, ''), agent IS NULL, model IS NULL)) > 1
)
