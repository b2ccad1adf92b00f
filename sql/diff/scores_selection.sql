-- Each task's score in a selection (the score it was upsampled by: one value per task).
-- $file: the selection.parquet.
SELECT task_id, any_value(score) AS score
FROM read_parquet($file)
GROUP BY task_id
