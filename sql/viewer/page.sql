-- `tracelake view`: one page of the list, keyset-paginated: the first $n rows after $after in
-- trajectory_id order (the next page starts after this page's last id).
SELECT trajectory_id, source, task, trace_source, episode, n_assistant_turns, n_tokens,
       reward, exception_type, timed_out, is_subagent, kept, rule
FROM faceted
WHERE trajectory_id > $after
ORDER BY trajectory_id
LIMIT $n
