-- The rows every rule so far has kept, with their token counts (NULL until counted): the view each
-- rule in sql/filter_rules/ reads.
CREATE TEMP VIEW candidates AS
SELECT b.*, t.n_tokens
FROM base b
LEFT JOIN tokens t USING (trajectory_id)
WHERE NOT EXISTS (SELECT 1 FROM dropped d WHERE d.trajectory_id = b.trajectory_id)
