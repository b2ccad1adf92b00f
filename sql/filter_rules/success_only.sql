-- success_only_v1: keep only runs the verifier rewarded (reward > 0). A NULL reward (no verifier
-- result) is not a success.
SELECT trajectory_id,
       CASE WHEN reward IS NULL THEN 'no reward (no verifier result)'
            ELSE format('reward {} is not > 0', reward) END AS detail
FROM candidates
WHERE reward IS NULL OR reward <= 0
