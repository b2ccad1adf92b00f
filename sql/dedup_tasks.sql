-- The dedup stage's input: every ingested task with its instruction and how many trajectories it
-- has (the most trajectories makes a cluster's representative), by task_id.
SELECT t.task_id, t.source, t.name AS task, t.instruction, coalesce(n.n, 0) AS n_trajectories
FROM tasks t
LEFT JOIN (SELECT task_id, count(*) AS n FROM trajectories GROUP BY task_id) n USING (task_id)
ORDER BY t.task_id
