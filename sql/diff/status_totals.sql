-- Trajectories and rows (copies) per status: added, removed, reweighted, changed, unchanged.
SELECT status, count(*) AS trajectories, sum(copies_a) AS rows_a, sum(copies_b) AS rows_b
FROM traj
GROUP BY status
