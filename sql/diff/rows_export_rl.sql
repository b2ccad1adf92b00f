-- Diff rows of an RL export version: one per task prompt, keyed by task_id (in the trajectory_id
-- column the diff joins on). n_turns is the prompt's message count and n_tokens is null (the export
-- keeps no count); content hashes the prompt row as SkyRL reads it, so a new system prompt, env_class,
-- reward spec or max_turns shows as a changed row.
SELECT task_id AS trajectory_id, task_id, data_source AS source, extra_info.task AS task,
       len(prompt) AS n_turns, CAST(NULL AS BIGINT) AS n_tokens,
       hash(prompt, env_class, reward_spec, max_turns) AS content
FROM read_parquet($files)
