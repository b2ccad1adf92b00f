-- Distributions of one scale's dataset for the plots: (plot, x, value) rows.
-- $selection, $pool: the Parquet files. Token counts are binned in 1,024-token buckets.
WITH s AS (
    SELECT s.task_id, s.source, p.n_assistant_turns, p.n_tokens
    FROM read_parquet($selection) AS s JOIN read_parquet($pool) AS p USING (trajectory_id)
)
SELECT 'rows_by_source' AS plot, source AS x, count(*)::DOUBLE AS value FROM s GROUP BY source
UNION ALL
SELECT 'rollouts_per_task', rollouts::VARCHAR, count(*)::DOUBLE
FROM (SELECT task_id, count(*) AS rollouts FROM s GROUP BY task_id) GROUP BY rollouts
UNION ALL
SELECT 'assistant_turns', n_assistant_turns::VARCHAR, count(*) / (SELECT count(*) FROM s)::DOUBLE
FROM s GROUP BY n_assistant_turns
UNION ALL
SELECT 'tokens', ((n_tokens // 1024) * 1024)::VARCHAR, count(*) / (SELECT count(*) FROM s)::DOUBLE
FROM s WHERE n_tokens IS NOT NULL GROUP BY n_tokens // 1024
ORDER BY plot, x
