-- Diff rows of a pool version: one per kept trajectory. $files: the pool.parquet file(s).
-- content: what makes the row what it is beyond its id (the conversation and its token count).
SELECT trajectory_id, task_id, source, task,
       n_assistant_turns AS n_turns, n_tokens,
       hash(conversation_sha256, n_tokens) AS content
FROM read_parquet($files)
