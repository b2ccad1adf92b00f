-- duplicate_conversation_v1: the same messages as another surviving row (any source); the row
-- with the smallest trajectory_id is kept. Runs last, so it only compares rows every other rule kept.
SELECT trajectory_id, 'same conversation as ' || first_id AS detail
FROM (
    SELECT trajectory_id,
           first(trajectory_id) OVER (PARTITION BY conversation_sha256 ORDER BY trajectory_id) AS first_id
    FROM candidates
)
WHERE trajectory_id <> first_id
