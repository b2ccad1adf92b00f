-- Rows, distinct trajectories and tasks per source on each side (a_rows, b_rows).
WITH a AS (SELECT source, count(*) AS rows, count(DISTINCT trajectory_id) AS trajectories,
                  count(DISTINCT task_id) AS tasks FROM a_rows GROUP BY source),
     b AS (SELECT source, count(*) AS rows, count(DISTINCT trajectory_id) AS trajectories,
                  count(DISTINCT task_id) AS tasks FROM b_rows GROUP BY source)
SELECT source,
       coalesce(a.rows, 0) AS rows_a, coalesce(b.rows, 0) AS rows_b,
       coalesce(b.rows, 0) - coalesce(a.rows, 0) AS rows_delta,
       coalesce(a.trajectories, 0) AS trajectories_a, coalesce(b.trajectories, 0) AS trajectories_b,
       coalesce(a.tasks, 0) AS tasks_a, coalesce(b.tasks, 0) AS tasks_b
FROM a FULL OUTER JOIN b USING (source)
ORDER BY source
