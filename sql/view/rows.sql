-- `tracelake view`: one row per trajectory with what its list shows and its WHERE box filters on:
-- the trajectory's slim columns, its ChatML tokens (pool; NULL for a dropped row), whether the filter
-- kept it, and the rule that dropped it. Created once per connection, after open_lake's views.
CREATE TEMP VIEW view_rows AS
SELECT t.trajectory_id, t.source, t.task, t.trace_source, t.episode, t.trial_name,
       t.n_messages, t.n_assistant_turns, t.n_chars, p.n_tokens,
       t.reward, t.result, t.exception_type, t.timed_out, t.is_subagent,
       p.trajectory_id IS NOT NULL AS kept, d.rule, d.detail
FROM trajectories t
LEFT JOIN pool p ON p.trajectory_id = t.trajectory_id
LEFT JOIN dropped d ON d.trajectory_id = t.trajectory_id
