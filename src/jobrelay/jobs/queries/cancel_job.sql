-- Cancel an active job. A running job loses its claim: the worker's next heartbeat or
-- completion finds no row and stops the handler.
UPDATE jobs
SET
    status = 'cancelled',
    claim_token = NULL,
    lease_expires_at = NULL,
    failure_kind = 'cancelled',
    finished_at = clock_timestamp()
WHERE id = %(id)s
    AND status IN ('pending', 'in_progress')
RETURNING *
