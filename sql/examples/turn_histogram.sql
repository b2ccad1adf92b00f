-- Assistant turns per trajectory, as a histogram per source (main traces only).
--   tracelake sql -f sql/examples/turn_histogram.sql
SELECT source,
       least(n_assistant_turns, 40) AS turns,          -- 40 = "40 or more"
       count(*) AS trajectories,
       round(100.0 * count(*) / sum(count(*)) OVER (PARTITION BY source), 1) AS pct
FROM trajectories
WHERE trace_source = 'main'
GROUP BY source, turns
ORDER BY source, turns;
