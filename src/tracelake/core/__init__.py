"""Core: the lake itself, knowing nothing of the pipeline's phases (every other package imports it).

- layout.py  every path in a lake, which outputs are built, a scale/id/prefix -> its directory
- ids.py     task ids, copy names, dataset labels and ids, id prefixes
- hashing.py canonical JSON and content ids
- schema.py  table schemas from schemas/*.yaml, validated at every read and write
- lake.py    table and shard writers (fixed row groups, version ids), output_dir, manifests
- swap.py    temporary names beside an output, its atomic swap, removing what a killed run left
- lakedb.py  DuckDB views over a lake's tables
- params.py  the machinery every phase's params module uses (strict sections, one-line errors)
- stage.py   the ends of every stage script: errors, Ctrl-C, metrics
- tokens.py  the project's tokenizer and exact ChatML token counts
- errors.py  errors by what to do: user error, rejected input, bug
- revisions.py  a lake (or any path) as a git revision or `dvc exp` recorded it, read through DVC;
  the revisions that recorded one (`--rev`, `REV:` in diff, view and train)
- freshness.py  DVC's status of the pipeline: which datasets are stale (status, view, train)
- assets.py, ui.py  where schemas/ and sql/ are; progress bars and consoles
"""
