-- timeout_v1: the run ended in one of the configured exceptions (default AgentTimeoutError).
-- NULL exception_type (a clean run) is never dropped.
SELECT trajectory_id, 'exception ' || exception_type AS detail
FROM candidates
WHERE list_contains($exceptions, exception_type)
