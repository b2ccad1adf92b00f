-- Composition of one scale's dataset: its slots joined to the pool for turns, length and tokens.
-- $selection: the selection.parquet file; $pool: the pool.parquet file. One row.
WITH s AS (
    SELECT s.*, p.n_assistant_turns, p.n_chars, p.n_tokens
    FROM read_parquet($selection) AS s JOIN read_parquet($pool) AS p USING (trajectory_id)
), per_task AS (
    SELECT task_id, count(*) AS rollouts FROM s GROUP BY task_id
)
SELECT
    (SELECT count(*) FROM s)                                              AS rows,
    (SELECT count(*) FROM per_task)                                       AS tasks,
    (SELECT count(DISTINCT trajectory_id) FROM s)                         AS distinct_rollouts,
    (SELECT min(rollouts) FROM per_task)                                  AS rollouts_per_task_min,
    (SELECT quantile_disc(rollouts, 0.5) FROM per_task)                   AS rollouts_per_task_p50,
    (SELECT max(rollouts) FROM per_task)                                  AS rollouts_per_task_max,
    (SELECT quantile_disc(n_assistant_turns, [0.1, 0.5, 0.9]) FROM s)     AS turns_p10_p50_p90,
    (SELECT max(n_assistant_turns) FROM s)                                AS turns_max,
    (SELECT quantile_disc(n_chars, [0.1, 0.5, 0.9]) FROM s)               AS chars_p10_p50_p90,
    (SELECT quantile_disc(n_tokens, [0.1, 0.5, 0.9]) FROM s)              AS tokens_p10_p50_p90,
    (SELECT max(n_tokens) FROM s)                                         AS tokens_max
