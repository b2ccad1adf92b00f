-- `tracelake view`: the other traces of a trajectory's trial (same source, run and trial): its
-- subagents (another trace_source) and its continuation episodes (same trace_source, another episode).
SELECT trajectory_id, trace_source, episode, n_assistant_turns,
       trace_source <> $trace_source AS subagent
FROM view_index
WHERE source = $source AND trial_name = $trial_name AND run_id IS NOT DISTINCT FROM $run_id
  AND trajectory_id <> $id
ORDER BY trace_source <> $trace_source, trace_source,
         try_cast(regexp_extract(episode, '(\d+)$', 1) AS INTEGER) NULLS FIRST, episode, trajectory_id
