-- `tracelake view`: the values a facet offers, with their rows over the whole lake.
SELECT 'source' AS facet, source AS value, count(*) AS n FROM view_rows GROUP BY source
UNION ALL
SELECT 'rule', coalesce(rule, CASE WHEN kept THEN 'kept' END), count(*) FROM view_rows
WHERE rule IS NOT NULL OR kept GROUP BY ALL
ORDER BY facet, value
