-- `tracelake view` over a lake whose filter stage has not run (no pool, no dropped): the same columns
-- as view/rows.sql, the filter's left NULL.
CREATE TEMP VIEW view_rows AS
SELECT t.trajectory_id, t.source, t.task, t.trace_source, t.episode, t.trial_name,
       t.n_messages, t.n_assistant_turns, t.n_chars, NULL::BIGINT AS n_tokens,
       t.reward, t.result, t.exception_type, t.timed_out, t.is_subagent,
       NULL::BOOLEAN AS kept, NULL::VARCHAR AS rule, NULL::VARCHAR AS detail
FROM trajectories t
