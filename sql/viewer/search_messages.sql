-- `tracelake view`: every non-empty message, for the full-text index (explore/view/search.py).
SELECT trajectory_id, position::INTEGER AS position, role, content
FROM messages
WHERE content IS NOT NULL AND content <> ''
