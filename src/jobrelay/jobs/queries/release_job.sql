-- The worker gives a claimed job back without running it to the end (e.g. shutdown): back
-- to pending now, the attempt undone. CAS on id + status + claim_token.
UPDATE jobs
SET
    status = 'pending',
    claim_token = NULL,
    lease_expires_at = NULL,
    attempt_count = greatest(attempt_count - 1, 0),
    available_at = clock_timestamp()
WHERE id = %(id)s
    AND status = 'in_progress'
    AND claim_token = %(claim_token)s
RETURNING id
