-- `tracelake view`: the export's rejects of a trajectory's slots (why a selected row is not in a shard).
SELECT name, reason, detail FROM export_rejects WHERE trajectory_id = $id ORDER BY name
