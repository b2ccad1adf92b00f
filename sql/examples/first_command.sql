-- The most common first command of a main trajectory (the first keystrokes of its first reply).
--   tracelake sql -f sql/examples/first_command.sql
WITH first_reply AS (
    SELECT trajectory_id, source, arg_min(content, position) AS content
    FROM messages
    WHERE role = 'assistant' AND trace_source = 'main'
    GROUP BY ALL
), first_command AS (
    SELECT source,
           regexp_replace(json_extract_string(regexp_extract(content, '(?s)\{.*\}'), '$.commands[0].keystrokes'),
                          '^\s+|\s+$', '', 'g') AS command
    FROM first_reply
    WHERE json_valid(regexp_extract(content, '(?s)\{.*\}'))
)
SELECT command, count(*) AS trajectories, string_agg(DISTINCT source, ', ' ORDER BY source) AS sources
FROM first_command
WHERE command IS NOT NULL AND command <> ''
GROUP BY command
ORDER BY trajectories DESC, command
LIMIT 15;
