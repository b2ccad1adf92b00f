-- One row per task of a source without task directories (src/tracelake/ingest/derived_tasks.py):
-- the trajectory its instruction is taken from (the main trace first, then the smallest trajectory id)
-- and that trajectory's first user message. $files: the source's trajectories parts; $copy: the
-- upsampling suffix pattern (_copyNNNN) stripped from task names.
WITH chosen AS (
    SELECT task_id, trajectory_id, regexp_replace(task, $copy, '') AS name
    FROM read_parquet($files)
    QUALIFY row_number() OVER (PARTITION BY task_id ORDER BY trace_source <> 'main', trajectory_id) = 1
)
SELECT c.task_id, c.name, c.trajectory_id,
       list_filter(t.messages, lambda m: m.role = 'user')[1].content AS first_user,
       t.provenance
FROM chosen AS c
JOIN read_parquet($files) AS t USING (trajectory_id)
ORDER BY c.task_id
