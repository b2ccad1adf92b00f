-- Distribution of turns and tokens over each side's rows (copies count once each: what training sees).
-- One row per side and metric; q: the 10/25/50/75/90th percentiles (nearest row).
SELECT side, metric, count(x) AS n, min(x) AS min, quantile_disc(x, [0.1, 0.25, 0.5, 0.75, 0.9]) AS q,
       avg(x) AS mean, max(x) AS max
FROM (
    SELECT 'a' AS side, 'turns' AS metric, n_turns AS x FROM a_rows
    UNION ALL SELECT 'b', 'turns', n_turns FROM b_rows
    UNION ALL SELECT 'a', 'tokens', n_tokens FROM a_rows
    UNION ALL SELECT 'b', 'tokens', n_tokens FROM b_rows
)
GROUP BY side, metric
ORDER BY metric DESC, side
