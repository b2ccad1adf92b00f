-- Per-source overview of the trajectories table, for `tracelake status`.
-- $files: the Parquet parts of the trajectories tables of the lake.
SELECT
    source,
    count(*)                                AS rows,
    count(DISTINCT task_id)                 AS tasks,
    count(*) FILTER (WHERE is_subagent)     AS subagent,
    count(*) FILTER (WHERE timed_out)       AS timeout,
    quantile_disc(n_assistant_turns, 0.5)   AS turns_p50,
    max(n_assistant_turns)                  AS turns_max,
    round(avg(reward), 3)                   AS reward
FROM read_parquet($files)
GROUP BY source
ORDER BY source
