-- Decontamination's second look (rule task_turns_v1, src/tracelake/curate/dedup/run.py): every
-- rollout's opening turns, the system and user messages before its first assistant turn (what the
-- model reads as its task: a system prompt, the task, a terminus-2 prompt holding it), with its
-- task. In storage order: the stage keeps, per task, the smallest rollout id that matches.
-- $copy: the upsampling suffix pattern (_copyNNNN) stripped from task names.
SELECT task_id, source, regexp_replace(task, $copy, '') AS task, trajectory_id,
       list_transform(
           list_filter(
               list_slice(messages, 1, coalesce(list_position(list_transform(messages, lambda m: m.role), 'assistant') - 1,
                                                len(messages))),
               lambda m: m.role IN ('system', 'user')),
           lambda m: m.content) AS turns
FROM trajectories
