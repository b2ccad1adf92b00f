-- Shared-bin histogram of one metric column ($metric: n_turns or n_tokens) on both sides:
-- bin i covers [$lo + i * $width, $lo + (i + 1) * $width).
SELECT side, CAST(floor((x - $lo) / $width) AS BIGINT) AS bin, count(*) AS rows
FROM (
    SELECT 'a' AS side, CASE $metric WHEN 'n_turns' THEN n_turns ELSE n_tokens END AS x FROM a_rows
    UNION ALL
    SELECT 'b', CASE $metric WHEN 'n_turns' THEN n_turns ELSE n_tokens END FROM b_rows
)
WHERE x IS NOT NULL
GROUP BY ALL
ORDER BY side, bin
