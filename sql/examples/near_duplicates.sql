-- Near-duplicate tasks beside their cluster's representative (the dedup stage), most similar first:
-- what near_duplicate_v1 drops, and why. `tracelake dedup --explain TASK` shows one cluster.
--   tracelake sql -f sql/examples/near_duplicates.sql
SELECT k.source || '/' || k.task AS task, r.source || '/' || r.task AS representative, k.method,
       k.jaccard, k.cosine, k.dropped,
       left(regexp_replace(t.instruction, '\s+', ' ', 'g'), 80) AS instruction,
       left(regexp_replace(rt.instruction, '\s+', ' ', 'g'), 80) AS representative_instruction
FROM task_clusters k
JOIN task_clusters r ON r.task_id = k.cluster_id
JOIN tasks t ON t.task_id = k.task_id
JOIN tasks rt ON rt.task_id = k.cluster_id
WHERE k.task_id <> k.cluster_id
ORDER BY coalesce(k.similarity, 0) DESC, task
LIMIT 30
