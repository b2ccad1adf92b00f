-- The moves by explanation: status, the stage and rule that explain them, trajectories and the row delta.
SELECT status, stage, rule, count(*) AS trajectories, sum(copies_b) - sum(copies_a) AS rows_delta
FROM traj
WHERE status <> 'unchanged'
GROUP BY ALL
ORDER BY status, trajectories DESC, stage, rule
