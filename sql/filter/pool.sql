-- The filtered pool (schemas/pool.yaml): every candidate no rule dropped, by trajectory id.
CREATE TEMP TABLE pool AS
SELECT trajectory_id, task_id, source, task, trace_source, episode, n_messages,
       n_assistant_turns, n_chars, n_tokens, reward, conversation_sha256
FROM candidates
ORDER BY trajectory_id
