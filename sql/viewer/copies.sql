-- `tracelake view`: a trajectory's upsampled copies in one dataset; {selection} is the quoted name of
-- a selection_<scale> view (from the lake's views, never from a request).
SELECT count(*) AS copies FROM {selection} WHERE trajectory_id = $id
