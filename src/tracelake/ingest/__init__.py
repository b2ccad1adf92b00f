"""Ingest: raw inputs -> validated lake tables, with every input accounted for.

- harbor.py  Harbor job directories (result.json + ATIF trajectories) -> trajectories
- traces.py  published trace tables (Parquet / JSON / JSONL) -> trajectories
- tasks.py   Harbor task directories and (path, task_binary) tables -> tasks
- task_archive.py  deterministic task archives (task_binary) and their safe extraction
- archive_read.py  reading a task_binary in memory: vetted, capped (ingest.archive), streamed
- params.py  params.yaml `ingest` and `sources`
- common.py  the shared run loop: rejects, --strict, accounting, output directory and manifest
"""
