-- `tracelake view`: how many rows the query and facets match.
SELECT count(*) AS n FROM faceted
