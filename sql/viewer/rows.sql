-- `tracelake view`: one row per trajectory with what its list shows and its WHERE box filters on,
-- built once per connection into memory, sorted by id (a page is then a range of it, at any size):
-- the trajectory's slim columns, its ChatML tokens (pool; NULL for a dropped row), whether the filter
-- kept it, the rule that dropped it, and where its row is (file, row) to read it whole. $files: the
-- trajectories view's files; {pool_rows} and {dropped_rows} are the pool and dropped views, or empty
-- relations of the same columns when the filter has not run ({filtered} false: kept is then NULL).
CREATE TEMP TABLE view_index AS
SELECT t.trajectory_id, t.task_id, t.source, t.task, t.trace_source, t.episode, t.trial_name, t.run_id,
       t.n_messages, t.n_assistant_turns, t.n_chars, p.n_tokens,
       t.reward, t.result, t.exception_type, t.timed_out, t.is_subagent,
       CASE WHEN {filtered} THEN p.trajectory_id IS NOT NULL END AS kept, d.rule, d.detail,
       t.filename AS file, t.file_row_number AS file_row
FROM read_parquet($files, union_by_name := true, filename := true, file_row_number := true) t
LEFT JOIN (SELECT trajectory_id, n_tokens FROM {pool_rows}) p ON p.trajectory_id = t.trajectory_id
LEFT JOIN (SELECT trajectory_id, rule, detail FROM {dropped_rows}) d ON d.trajectory_id = t.trajectory_id
ORDER BY t.trajectory_id;

CREATE TEMP VIEW view_rows AS
SELECT * EXCLUDE (file, file_row) FROM view_index;
