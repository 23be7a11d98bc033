-- A cancel's first write: mark the workflow cancelled while a step of it is active (in
-- `jobs`). A repeated cancel keeps the first one's time and actor. No row: the workflow
-- is unknown or has ended; cancel_steps.sql then ends the steps.
UPDATE workflows
SET cancelled_at = coalesce(cancelled_at, clock_timestamp()),
    cancelled_by = coalesce(cancelled_by, %(actor)s)
WHERE id = %(id)s
    AND EXISTS (SELECT 1 FROM jobs WHERE jobs.workflow_id = %(id)s)
RETURNING id
