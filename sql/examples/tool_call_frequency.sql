-- Which programs the agent runs: the first word of every command in terminus-2's JSON replies
-- ({"commands": [{"keystrokes": "..."}]}), counted per source. Replies that are not JSON are skipped.
--   tracelake sql -f sql/examples/tool_call_frequency.sql
WITH replies AS (
    SELECT source, regexp_extract(content, '(?s)\{.*\}') AS body
    FROM messages
    WHERE role = 'assistant'
), commands AS (
    SELECT source, unnest(json_extract_string(body, '$.commands[*].keystrokes')) AS keystrokes
    FROM replies
    WHERE json_valid(body)
)
SELECT source, regexp_extract(trim(keystrokes), '^[^\s;|&]+') AS program, count(*) AS calls
FROM commands
WHERE trim(keystrokes) <> ''
GROUP BY source, program
QUALIFY row_number() OVER (PARTITION BY source ORDER BY count(*) DESC, program) <= 10
ORDER BY source, calls DESC, program;
