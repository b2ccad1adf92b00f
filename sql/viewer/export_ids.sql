-- `tracelake view`: the ids of every row the list's query and facets match (an export), by id.
SELECT trajectory_id FROM faceted ORDER BY trajectory_id
