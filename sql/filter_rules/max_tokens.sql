-- max_tokens_v1: the conversation is longer than filter.max_tokens tokens (ChatML rendering,
-- counted with filter.tokenizer); a trainer would truncate it silently.
SELECT trajectory_id, format('{} tokens > {}', n_tokens, $max_tokens) AS detail
FROM candidates
WHERE n_tokens > $max_tokens
