-- The 20 longest conversations (characters), with their outcome.
--   tracelake sql -f sql/examples/longest_traces.sql
SELECT trajectory_id, source, task, trace_source, n_messages, n_assistant_turns, n_chars,
       coalesce(exception_type, CAST(reward AS VARCHAR), 'no verifier') AS outcome
FROM trajectories
ORDER BY n_chars DESC, trajectory_id
LIMIT 20;
