-- `tracelake view`: one trajectory, whole (messages included), read from the one file that holds it
-- ($file, from view_index).
SELECT trajectory_id, task_id, source, task, run_id, trial_name, episode, n_episodes,
       trace_source, agent, model, date, messages, n_messages, n_assistant_turns,
       n_chars, result, reward, exception_type, timed_out, is_subagent
FROM read_parquet($file)
WHERE trajectory_id = $id
