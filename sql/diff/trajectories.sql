-- Row-level diff by trajectory id over the tables a_rows and b_rows (one row per dataset row, see
-- rows_*.sql), with why each trajectory moved, from the other side's lineage:
--   <side>_pool(trajectory_id)                  the pool the side was drawn from
--   <side>_dropped(trajectory_id, rule, detail) rows its filters dropped
--   <side>_xrej(trajectory_id, reason, detail)  rows its export rejected
--   <side>_scores(task_id, score)               each task's score in the selection the side was drawn
--                                               from (sql/diff/scores_selection.sql; empty when unknown)
-- status: added | removed | reweighted (in both, copy count differs) | changed (in both, content differs)
--         | unchanged.  stage/rule: what explains the move (null for unchanged rows).
-- $content_stage: the stage a content change comes from; $a_lineage/$b_lineage: whether that side's
-- pool is known (a row in neither its pool nor its dropped rows then never reached its filters:
-- rule $missing_rule, not_in_trajectories; an RL export's rows are tasks: not_in_tasks).
-- $scores_known: whether both sides' selections are known; a move the selection explains then has
-- the task's score on each side as its detail ($a_scorer, $b_scorer: the scorers they upsampled by,
-- named only when they differ): `score 812.5 -> 95`, `score proxy_v1 812.5 -> llm_v1 95`; `none`
-- where the task is not in that side's selection.
WITH a AS (
    SELECT trajectory_id, any_value(task_id) AS task_id, any_value(source) AS source, any_value(task) AS task,
           count(*) AS copies, any_value(content) AS content
    FROM a_rows GROUP BY trajectory_id
), b AS (
    SELECT trajectory_id, any_value(task_id) AS task_id, any_value(source) AS source, any_value(task) AS task,
           count(*) AS copies, any_value(content) AS content
    FROM b_rows GROUP BY trajectory_id
), joined AS (
    SELECT trajectory_id,
           coalesce(a.task_id, b.task_id) AS task_id,
           coalesce(a.source, b.source) AS source,
           coalesce(a.task, b.task) AS task,
           coalesce(a.copies, 0) AS copies_a,
           coalesce(b.copies, 0) AS copies_b,
           CASE WHEN a.trajectory_id IS NULL THEN 'added'
                WHEN b.trajectory_id IS NULL THEN 'removed'
                WHEN a.copies <> b.copies THEN 'reweighted'
                WHEN a.content IS DISTINCT FROM b.content THEN 'changed'
                ELSE 'unchanged' END AS status
    FROM a FULL OUTER JOIN b USING (trajectory_id)
), other AS (
    -- the lineage of the side a moved row is missing from: B for removed rows, A for added ones
    SELECT j.*,
           CASE j.status WHEN 'removed' THEN bd.rule WHEN 'added' THEN ad.rule END AS drop_rule,
           CASE j.status WHEN 'removed' THEN bd.detail WHEN 'added' THEN ad.detail END AS drop_detail,
           CASE j.status WHEN 'removed' THEN bx.reason WHEN 'added' THEN ax.reason END AS reject_reason,
           CASE j.status WHEN 'removed' THEN bx.detail WHEN 'added' THEN ax.detail END AS reject_detail,
           CASE j.status WHEN 'removed' THEN bp.trajectory_id IS NOT NULL
                         WHEN 'added' THEN ap.trajectory_id IS NOT NULL END AS in_other_pool,
           coalesce(regexp_replace(CAST(round(sa.score, 4) AS VARCHAR), '\.0$', ''), 'none') AS score_a,
           coalesce(regexp_replace(CAST(round(sb.score, 4) AS VARCHAR), '\.0$', ''), 'none') AS score_b
    FROM joined AS j
    LEFT JOIN b_dropped AS bd ON j.status = 'removed' AND bd.trajectory_id = j.trajectory_id
    LEFT JOIN a_dropped AS ad ON j.status = 'added' AND ad.trajectory_id = j.trajectory_id
    LEFT JOIN (SELECT trajectory_id, min(reason) AS reason, min(detail) AS detail FROM b_xrej GROUP BY ALL) AS bx
           ON j.status = 'removed' AND bx.trajectory_id = j.trajectory_id
    LEFT JOIN (SELECT trajectory_id, min(reason) AS reason, min(detail) AS detail FROM a_xrej GROUP BY ALL) AS ax
           ON j.status = 'added' AND ax.trajectory_id = j.trajectory_id
    LEFT JOIN b_pool AS bp ON j.status = 'removed' AND bp.trajectory_id = j.trajectory_id
    LEFT JOIN a_pool AS ap ON j.status = 'added' AND ap.trajectory_id = j.trajectory_id
    LEFT JOIN a_scores AS sa ON $scores_known AND sa.task_id = j.task_id
    LEFT JOIN b_scores AS sb ON $scores_known AND sb.task_id = j.task_id
), explained AS (
    SELECT trajectory_id, task_id, source, task, copies_a, copies_b, status, drop_detail, reject_detail,
           score_a, score_b,
           CASE WHEN status = 'unchanged' THEN NULL
                WHEN status IN ('reweighted') THEN 'selection'
                WHEN status = 'changed' THEN $content_stage
                WHEN starts_with(drop_rule, 'rl_') THEN 'selection'  -- export_rl.pick: rl_score_bounds_v1, rl_pick_v1
                WHEN drop_rule IS NOT NULL THEN 'filter'
                WHEN reject_reason IS NOT NULL THEN 'export'
                WHEN in_other_pool THEN 'selection'
                WHEN (status = 'removed' AND $b_lineage) OR (status = 'added' AND $a_lineage) THEN 'input'
                ELSE 'unknown' END AS stage,
           CASE WHEN status = 'unchanged' THEN NULL
                WHEN status = 'reweighted' THEN 'copies'
                WHEN status = 'changed' THEN 'content'
                WHEN drop_rule IS NOT NULL THEN drop_rule
                WHEN reject_reason IS NOT NULL THEN reject_reason
                WHEN in_other_pool THEN CASE status WHEN 'removed' THEN 'not_selected' ELSE 'selected' END
                WHEN (status = 'removed' AND $b_lineage) OR (status = 'added' AND $a_lineage) THEN $missing_rule
                ELSE NULL END AS rule
    FROM other
)
SELECT trajectory_id, task_id, source, task, copies_a, copies_b, status, stage, rule,
       CASE WHEN stage = 'selection' AND $scores_known THEN
                CASE WHEN $a_scorer IS DISTINCT FROM $b_scorer
                     THEN concat_ws(' ', 'score', $a_scorer, score_a, '->', $b_scorer, score_b)
                     ELSE concat_ws(' ', 'score', score_a, '->', score_b) END
            ELSE coalesce(drop_detail, reject_detail) END AS detail
FROM explained
ORDER BY trajectory_id
