-- `tracelake view`: the rows of `faceted` among a search's hits ($ids: trajectory ids, ranked by the
-- caller), with the list's columns.
SELECT trajectory_id, source, task, trace_source, episode, n_assistant_turns, n_tokens,
       reward, exception_type, timed_out, is_subagent, kept, rule
FROM faceted
WHERE trajectory_id IN (SELECT unnest($ids::VARCHAR[]))
