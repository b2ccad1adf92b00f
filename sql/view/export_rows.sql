-- `tracelake view`: the exported trajectories, whole (every column), in the lake's order.
SELECT * FROM trajectories WHERE trajectory_id IN (SELECT unnest($ids::VARCHAR[]))
