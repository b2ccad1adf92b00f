-- near_duplicate_v1: the task is a near-duplicate of its cluster's representative and its source
-- keeps one task per cluster (stage dedup: task_clusters.dropped); the detail names the kept task.
SELECT c.trajectory_id,
       'near duplicate of ' || r.task || ' (' || k.cluster_id || ') by ' || k.method ||
       coalesce(' ' || round(k.similarity, 4), '') AS detail
FROM candidates c
JOIN task_clusters k USING (task_id)
JOIN task_clusters r ON r.task_id = k.cluster_id
WHERE k.dropped
