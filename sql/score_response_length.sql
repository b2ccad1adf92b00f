-- response_length_proxy_v1: per task, the mean length (characters) of the teacher's assistant turns
-- over every main (non-subagent) trajectory of the task. Longer answers ~ harder task.
-- Input view: trajectories. One row per task, ordered by task_id.
SELECT
    task_id,
    list(trajectory_id ORDER BY trajectory_id)          AS trajectory_ids,
    sum(assistant_chars)::DOUBLE / sum(n_assistant_turns) AS score
FROM (
    SELECT
        task_id,
        trajectory_id,
        n_assistant_turns,
        list_sum(list_transform(list_filter(messages, lambda m: m.role = 'assistant'),
                                lambda m: length(m.content))) AS assistant_chars
    FROM trajectories
    WHERE NOT is_subagent
)
GROUP BY task_id
ORDER BY task_id
