-- Diff rows of an SFT export version: one per training example. $files: its shards.
-- n_turns counts the gpt turns as exported (after same-role merges); n_tokens is the export's count;
-- content hashes the rendered example, so a change of export rule shows as a changed row.
SELECT trajectory_id, task_id, source, task,
       len(list_filter(conversations, lambda c: c."from" = 'gpt')) AS n_turns, n_tokens,
       hash(system, conversations) AS content
FROM read_parquet($files)
