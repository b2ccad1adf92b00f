-- `tracelake view`: a trajectory's task (its instruction), by task_id.
SELECT source, name, instruction, derived_from FROM tasks WHERE task_id = $task_id ORDER BY source, name
