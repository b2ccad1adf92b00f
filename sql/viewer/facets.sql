-- `tracelake view`: the rows of `matched` (view_rows, narrowed by the WHERE box) that pass every
-- facet; a NULL parameter is "any". $rule is a filter rule's name, or 'kept'.
SELECT * FROM matched
WHERE ($source IS NULL OR source = $source)
  AND ($task IS NULL OR task = $task)
  AND ($reward_min IS NULL OR reward >= $reward_min)
  AND ($reward_max IS NULL OR reward <= $reward_max)
  AND ($timed_out IS NULL OR timed_out = $timed_out)
  AND ($subagent IS NULL OR is_subagent = $subagent)
  AND ($turns_min IS NULL OR n_assistant_turns >= $turns_min)
  AND ($turns_max IS NULL OR n_assistant_turns <= $turns_max)
  AND ($tokens_min IS NULL OR n_tokens >= $tokens_min)
  AND ($tokens_max IS NULL OR n_tokens <= $tokens_max)
  AND ($rule IS NULL OR coalesce(rule, CASE WHEN kept THEN 'kept' END) = $rule)
