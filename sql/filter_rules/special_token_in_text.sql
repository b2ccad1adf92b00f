-- special_token_in_text_v1: a message's text holds a literal that filter.tokenizer reads as a control
-- token (tokens/special_tokens.py): $anywhere matches any control token, $in_response those an
-- assistant turn may not hold (all but the training template's thought and tool-call words). The
-- first such message (0-based) names the role and the token; a trainer would read it as markup.
SELECT trajectory_id,
       format('{} message {} holds {}', role, idx - 1, token) AS detail
FROM (
    SELECT trajectory_id, role, idx,
           CASE WHEN role = 'assistant' THEN regexp_extract(content, $in_response)
                ELSE regexp_extract(content, $anywhere) END AS token
    FROM (
        SELECT t.trajectory_id,
               unnest(t.messages).role    AS role,
               unnest(t.messages).content AS content,
               generate_subscripts(t.messages, 1) AS idx
        FROM trajectories t
        WHERE t.trajectory_id IN (SELECT trajectory_id FROM candidates)
    )
    WHERE (role = 'assistant' AND regexp_matches(content, $in_response))
       OR (role IS DISTINCT FROM 'assistant' AND regexp_matches(content, $anywhere))
)
QUALIFY row_number() OVER (PARTITION BY trajectory_id ORDER BY idx) = 1
