-- One request per task that has rollouts: its instruction, for the model scorers
-- (src/tracelake/curate/scoring/scorers.py). Tasks without rollouts are never sent to a model.
SELECT t.task_id, t.instruction
FROM tasks AS t
WHERE t.task_id IN (SELECT DISTINCT task_id FROM trajectories)
ORDER BY t.task_id
