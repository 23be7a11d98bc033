-- A retryable failure: back to pending, available after the backoff (database time).
-- CAS on id + status + claim_token; no row returned means the lease is lost.
UPDATE jobs
SET
    status = 'pending',
    claim_token = NULL,
    lease_expires_at = NULL,
    available_at = clock_timestamp() + make_interval(secs => %(delay_s)s),
    failure_kind = 'retryable',
    last_error = %(error)s
WHERE id = %(id)s
    AND status = 'in_progress'
    AND claim_token = %(claim_token)s
RETURNING id
