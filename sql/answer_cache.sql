-- The answer cache of a model scorer (src/tracelake/curate/scoring/answers.py) as one table: the index of
-- every part of <score.cache>/<scorer>/answers/ (keys, lengths, positions; never the texts), one row per
-- response_id (a part left twice by an interrupted compaction holds the same rows twice: the first part
-- by name wins). answer_index: the parts' indexes, each row with its part's rank by name (`part`).
SELECT *
FROM answer_index
QUALIFY row_number() OVER (PARTITION BY response_id ORDER BY part) = 1
