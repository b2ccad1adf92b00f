-- The filter stage's working table: every ingested trajectory without its messages, plus the
-- columns the rules need. $copy_suffix: the regex of the upsampling suffix (_copyNNNN).
SELECT
    trajectory_id,
    task_id,
    source,
    regexp_replace(task, $copy_suffix, '')                          AS task,
    run_id,
    agent,
    model,
    trial_name,
    trace_source,
    episode,
    TRY_CAST(regexp_extract(episode, '(\d+)$', 1) AS INTEGER)       AS episode_no,
    n_messages,
    n_assistant_turns,
    n_chars,
    reward,
    exception_type,
    is_subagent,
    conversation_sha256                                             -- computed once, at ingest
FROM trajectories
