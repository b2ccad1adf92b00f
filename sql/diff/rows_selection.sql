-- Diff rows of a selection version: one per slot (upsampled copies are separate rows), with turns
-- and tokens from the pool it was drawn from. $files: selection.parquet; $pool: that pool.parquet.
SELECT s.trajectory_id, s.task_id, s.source, s.task,
       p.n_assistant_turns AS n_turns, p.n_tokens,
       hash(p.conversation_sha256, p.n_tokens) AS content
FROM read_parquet($files) AS s
LEFT JOIN read_parquet($pool) AS p USING (trajectory_id)
