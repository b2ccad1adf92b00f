"""Tokens: how a trajectory becomes the tokens a trainer sees, for the filter's counts and the
exports alike (it imports core only).

- tokenizer.py, model_tokenizer.py  the project's tokenizer directory (builtin BPE or a model's)
- token_count.py, token_cache.py, fast_bpe.py  exact token counts, by segment, cached; the fast encoder
- token_ids.py  token ids of text, by segment, cached (pre-tokenized exports)
- templates.py  LLaMA-Factory's chat templates and modes, as tracelake renders them
- sharegpt.py   trajectories as LLaMA-Factory sharegpt rows (rule sharegpt_v1)
- rendering.py  what LLaMA-Factory trains on: a row rendered, counted and checked (Rendering)
- special_tokens.py, special_token_screen.py  the tokenizer's control tokens in text: found,
  escaped or rejected (filter.special_tokens)
"""
