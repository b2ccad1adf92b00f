"""Task scores (the `score` stage and `tracelake score`): scorers.py (the scorer interfaces and the
built-in scorers), runs.py (running the model-free scorers, their cache, imported scores), answers.py (model
scorers: the answer cache and turning answers into scores), model_run.py (a model scorer's run:
plan, progress, summary), engines/ (OpenAI-compatible HTTP, vLLM or transformers in a worker, Modal).
Prompts, the vLLM environment and the Modal app are in the top-level scoring/."""
