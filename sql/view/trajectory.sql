-- `tracelake view`: one trajectory, whole (messages included), with its list columns.
SELECT t.trajectory_id, t.task_id, t.source, t.task, t.run_id, t.trial_name, t.episode, t.n_episodes,
       t.trace_source, t.agent, t.model, t.date, t.messages, t.n_messages, t.n_assistant_turns,
       t.n_chars, t.result, t.reward, t.exception_type, t.timed_out, t.is_subagent,
       v.n_tokens, v.kept, v.rule, v.detail
FROM trajectories t JOIN view_rows v ON v.trajectory_id = t.trajectory_id
WHERE t.trajectory_id = $id
