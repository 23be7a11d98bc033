-- A terminal failure (permanent, or attempts used up). CAS on id + status + claim_token;
-- no row returned means the lease is lost.
UPDATE jobs
SET
    status = 'failed',
    claim_token = NULL,
    lease_expires_at = NULL,
    failure_kind = %(failure_kind)s,
    last_error = %(error)s,
    finished_at = clock_timestamp()
WHERE id = %(id)s
    AND status = 'in_progress'
    AND claim_token = %(claim_token)s
RETURNING id
