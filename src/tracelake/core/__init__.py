"""Core: the lake itself, knowing nothing of the pipeline's phases (every other package imports it).

- lake.py       every path in a lake and which outputs are built
- datasets.py   the dataset kinds (pool, selections, exports), declared once; dataset ids
- ids.py, hashing.py, table_digest.py  task ids and labels; canonical JSON and content ids; row digests
- schema.py     table schemas from schemas/*.yaml, validated at every read and write
- tables.py     table and shard writers (fixed row groups, version ids), table reads
- outputs.py, swap.py  atomic output directories and manifests; temporary names, the swap, leftovers
- stage.py      the stage contract: a declaration, its result, `publish` (the one writer of outputs)
- params.py     the machinery every phase's params module uses (strict sections, one-line errors)
- executor.py, background.py  mapping a stage's shards (process, workers, Ray); background work
- tokenizer.py, model_tokenizer.py, token_count.py, token_cache.py, token_ids.py, fast_bpe.py,
  control_tokens.py  the tokenizer, exact token counts and ids (cached by segment), control tokens
- duckdb_views.py  DuckDB views over a lake's tables
- errors.py     errors by what to do: user error, rejected input, bug
- revisions.py  a lake (or any path) as a git revision or `dvc exp` recorded it, read through DVC
- freshness.py  DVC's status of the pipeline: which datasets are stale (status, view, train)
- assets.py, ui.py, envs.py, doc_tables.py  schemas/ and sql/; consoles and progress; the test and
  trainer environments; tables in the docs written from declarations
"""
