-- min_assistant_turns_v1: fewer assistant turns than filter.min_assistant_turns (5 in the recipe:
-- 5 assistant turns is at least 10 alternating messages).
SELECT trajectory_id, format('{} assistant turns < {}', n_assistant_turns, $min_turns) AS detail
FROM candidates
WHERE n_assistant_turns < $min_turns
