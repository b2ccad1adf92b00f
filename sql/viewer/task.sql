-- `tracelake view`: a trajectory's task, by task_id: its instruction, task.toml, file listing and the
-- gzipped tar of its directory (read for its small text files).
SELECT source, name, instruction, derived_from, metadata_json, n_files, provenance, task_binary
FROM tasks WHERE task_id = $task_id ORDER BY source, name
