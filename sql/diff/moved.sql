-- Every trajectory that moved, with its explanation.
SELECT trajectory_id, source, task_id, task, status, copies_a, copies_b, stage, rule, detail
FROM traj
WHERE status <> 'unchanged'
ORDER BY status, trajectory_id
