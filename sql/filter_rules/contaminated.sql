-- contaminated_v1: the task copies a benchmark item (stage dedup: the contamination table, from the
-- task's instruction or, found_in 'turns', from a rollout's opening turns); every rollout of it is
-- dropped, with the benchmark, the item and the evidence.
SELECT c.trajectory_id,
       'benchmark ' || k.benchmark || ' item ' || k.benchmark_item || ': ' ||
       CASE WHEN k.method = 'ngram' THEN 'shares ' || round(100 * k.similarity) || '% of its word n-grams, e.g. "' || k.ngram || '"'
            ELSE 'embedding cosine ' || round(k.similarity, 4) END ||
       CASE WHEN k.found_in = 'turns' THEN ' (in the opening turns of rollout ' || k.trajectory_id || ')' ELSE '' END AS detail
FROM candidates c
JOIN contamination k USING (task_id)
