-- contaminated_v1: the task copies a benchmark item (stage dedup: the contamination table); every
-- rollout of it is dropped, with the benchmark, the item and the evidence.
SELECT c.trajectory_id,
       'benchmark ' || k.benchmark || ' item ' || k.benchmark_item || ': ' ||
       CASE WHEN k.method = 'ngram' THEN 'shares ' || round(100 * k.similarity) || '% of its word n-grams, e.g. "' || k.ngram || '"'
            ELSE 'embedding cosine ' || round(k.similarity, 4) END AS detail
FROM candidates c
JOIN contamination k USING (task_id)
