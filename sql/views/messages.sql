-- `tracelake sql` view `messages`: one row per message of every trajectory, with its 0-based position.
CREATE VIEW messages AS
SELECT trajectory_id, source, task, trace_source,
       unnest(range(len(messages))) AS position,
       unnest(messages, recursive := true)
FROM trajectories
