-- The dropped rows (schemas/dropped.yaml): which rule dropped each one and why.
SELECT d.trajectory_id, b.task_id, b.source, d.rule, d.detail
FROM dropped d
JOIN base b USING (trajectory_id)
ORDER BY d.trajectory_id
