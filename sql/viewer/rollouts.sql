-- `tracelake view`: the other rollouts of a trajectory's task (same task_id and trace_source, another
-- trial), to compare side by side.
SELECT trajectory_id, trial_name, episode, n_assistant_turns, reward, exception_type, kept, rule
FROM view_index
WHERE task_id = $task_id AND trace_source = $trace_source AND trajectory_id <> $id
ORDER BY reward DESC NULLS LAST, trajectory_id
LIMIT 50
