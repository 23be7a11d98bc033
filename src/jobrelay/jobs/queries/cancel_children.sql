-- Cancelling a parent cancels its active children in the same transaction (running ones
-- lose their claim; their workers notice at the next heartbeat or write).
UPDATE jobs
SET
    status = 'cancelled',
    claim_token = NULL,
    lease_expires_at = NULL,
    failure_kind = 'cancelled',
    finished_at = clock_timestamp()
WHERE parent_id = %(id)s
    AND status IN ('pending', 'in_progress')
RETURNING id
