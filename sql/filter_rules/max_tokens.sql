-- max_tokens_v1: the conversation is longer than filter.max_tokens tokens (what LLaMA-Factory encodes
-- for it in the trained rendering, tokens/rendering.py; counted with filter.tokenizer): a trainer would cut it.
SELECT trajectory_id, format('{} tokens > {}', n_tokens, $max_tokens) AS detail
FROM candidates
WHERE n_tokens > $max_tokens
