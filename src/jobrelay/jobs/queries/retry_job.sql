-- A retryable failure: back to pending, available after the backoff (database time).
-- CAS on id + status + claim_token; no row returned means the lease is lost. The ended
-- attempt goes into job_attempts in the same statement.
WITH retried AS (
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
    RETURNING id, attempt_count, claimed_by, claimed_at, last_error
),
attempt AS (
    INSERT INTO job_attempts (
        job_id, claim_token, attempt, worker_id, started_at, outcome, error
    )
    SELECT id, %(claim_token)s, attempt_count, claimed_by, claimed_at, 'retryable', last_error
    FROM retried
)
SELECT id FROM retried
