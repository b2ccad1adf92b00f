-- `tracelake dedup --explain TASK`: every member of the cluster of the task matched by $ref (a task_id,
-- a unique prefix of one, or a task name, optionally source/name), the representative first, with
-- its instruction, trajectory count and any benchmark it copies.
WITH target AS (
    SELECT cluster_id FROM task_clusters
    WHERE task_id = $ref OR starts_with(task_id, $ref) OR task = $ref OR source || '/' || task = $ref
)
SELECT k.task_id, k.source, k.task, k.method, k.similarity, k.jaccard, k.cosine, k.dropped, k.cluster_size,
       k.task_id = k.cluster_id AS representative,
       (SELECT count(*) FROM trajectories t WHERE t.task_id = k.task_id) AS trajectories,
       c.benchmark, c.benchmark_item, c.method AS contamination_method, c.similarity AS contamination_similarity,
       c.ngram, i.instruction
FROM task_clusters k
JOIN tasks i USING (task_id)
LEFT JOIN contamination c USING (task_id)
WHERE k.cluster_id IN (SELECT cluster_id FROM target)
ORDER BY k.cluster_id, representative DESC, k.similarity DESC NULLS LAST, k.task_id
