-- The answer cache of a model scorer (src/tracelake/curate/scoring/answers.py) as one table: every part of
-- <score.cache>/<scorer>/answers/, one row per response_id (a part left twice by an interrupted
-- compaction holds the same rows twice: the first part by name wins). $parts: the part files.
SELECT * EXCLUDE (filename)
FROM read_parquet($parts, filename = true)
QUALIFY row_number() OVER (PARTITION BY response_id ORDER BY filename) = 1
