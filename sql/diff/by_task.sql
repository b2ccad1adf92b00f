-- Rollouts (rows) per task on each side, every task on either side: status added | removed | changed
-- (row count differs) | unchanged.
WITH a AS (SELECT task_id, any_value(source) AS source, any_value(task) AS task, count(*) AS rows
           FROM a_rows GROUP BY task_id),
     b AS (SELECT task_id, any_value(source) AS source, any_value(task) AS task, count(*) AS rows
           FROM b_rows GROUP BY task_id)
SELECT task_id, coalesce(a.source, b.source) AS source, coalesce(a.task, b.task) AS task,
       coalesce(a.rows, 0) AS rows_a, coalesce(b.rows, 0) AS rows_b,
       coalesce(b.rows, 0) - coalesce(a.rows, 0) AS delta,
       CASE WHEN a.task_id IS NULL THEN 'added' WHEN b.task_id IS NULL THEN 'removed'
            WHEN a.rows <> b.rows THEN 'changed' ELSE 'unchanged' END AS status
FROM a FULL OUTER JOIN b USING (task_id)
