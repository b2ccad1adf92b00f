-- Tasks whose every main rollout timed out (candidates to drop, or to give a longer timeout).
--   tracelake sql -f sql/examples/tasks_all_timed_out.sql
SELECT t.source, t.task_id, any_value(t.task) AS task, count(*) AS rollouts
FROM trajectories t
WHERE t.trace_source = 'main'
GROUP BY t.source, t.task_id
HAVING bool_and(t.timed_out)
ORDER BY rollouts DESC, t.source, task;
