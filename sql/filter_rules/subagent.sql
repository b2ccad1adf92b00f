-- subagent_v1: subagent traces (trace_source other than 'main', e.g. summarization-1-summary).
SELECT trajectory_id, 'trace_source ' || trace_source AS detail
FROM candidates
WHERE is_subagent
