-- One row per task of a source without task directories (src/tracelake/ingest/derived_tasks.py, rule
-- derived_task_v2): the trajectory its instruction is taken from and the task text found in it.
-- $files: the source's trajectories parts; $copy: the upsampling suffix pattern (_copyNNNN) stripped
-- from task names; $task_marker, $end_marker: terminus-2's "Task Description:", "Current terminal state:".
--
-- A trajectory's opening is what comes before its first assistant turn: its system and user
-- messages (Harbor's trace exporter writes an ATIF system step as a user message). Where the task
-- sits in it depends on the agent's format:
--   terminus-2  the text between "Task Description:" and "Current terminal state:" in the first
--               user message; without the first marker the task is not found
--   openhands   the first user message after the system prompt: after a system message, else the
--               second user message of the opening (the first is the system prompt written as a user
--               message); a lone user message is the task unless it is OpenHands' system prompt
--   generic     the first user message (terminus-2's markers stripped when it holds them)
-- The trajectory chosen: one whose task is found first, then the main trace, then the smallest id.
WITH opening AS (
    SELECT task_id, trajectory_id, trace_source, task, provenance,
           CASE WHEN lower(agent) LIKE 'terminus%' THEN 'terminus-2'
                WHEN lower(agent) LIKE '%openhands%' THEN 'openhands'
                ELSE 'generic' END AS format,
           list_filter(
               list_slice(messages, 1, coalesce(list_position(list_transform(messages, lambda m: m.role), 'assistant') - 1,
                                                len(messages))),
               lambda m: m.role IN ('system', 'user')) AS turns
    FROM read_parquet($files)
),
parts AS (
    SELECT *,
           list_transform(list_filter(turns, lambda m: m.role = 'user'), lambda m: m.content) AS users,
           len(list_filter(turns, lambda m: m.role = 'system')) > 0 AS has_system
    FROM opening
),
found AS (
    SELECT *,
           CASE format
               WHEN 'terminus-2' THEN CASE WHEN strpos(users[1], $task_marker) > 0 THEN users[1] END
               WHEN 'openhands' THEN
                   CASE WHEN has_system THEN users[1]
                        WHEN len(users) >= 2 THEN users[2]
                        WHEN NOT starts_with(ltrim(users[1]), 'You are OpenHands agent') THEN users[1] END
               ELSE users[1]
           END AS task_message
    FROM parts
),
task_text AS (
    SELECT *,
           CASE WHEN strpos(task_message, $task_marker) > 0 AND format <> 'openhands'
                THEN substr(task_message, strpos(task_message, $task_marker) + length($task_marker))
                ELSE task_message END AS after_marker
    FROM found
)
SELECT task_id, regexp_replace(task, $copy, '') AS name, trajectory_id, format, len(users) AS n_users, has_system,
       CASE WHEN strpos(after_marker, $end_marker) > 0 AND task_message <> after_marker
            THEN left(after_marker, strpos(after_marker, $end_marker) - 1)
            ELSE after_marker END AS instruction,
       provenance
FROM task_text
QUALIFY row_number() OVER (PARTITION BY task_id
                           ORDER BY instruction IS NULL OR trim(instruction, ' ' || chr(9) || chr(10) || chr(13)) = '',
                                    trace_source <> 'main', trajectory_id) = 1
ORDER BY task_id
