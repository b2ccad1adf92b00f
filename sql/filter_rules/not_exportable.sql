-- not_exportable_v1: export_sft could not make a LLaMA-Factory example of the trajectory (no
-- assistant turn, a system message mid-conversation, a control-token literal the export's screen
-- finds, ...: sharegpt_v1's reasons, schemas/README.md). Found while counting its rendering, so a
-- selection never picks a row its export would reject. The reasons are in the table `unexportable`.
SELECT trajectory_id, format('{}: {}', reason, detail) AS detail
FROM unexportable
WHERE trajectory_id IN (SELECT trajectory_id FROM candidates)
