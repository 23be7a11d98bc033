-- A retryable failure: back to pending, available after the backoff (database time).
-- CAS on id + status + claim_token; no row returned means the lease is lost. The ended
-- attempt goes into job_attempts in the same statement. The row is taken FOR NO KEY
-- UPDATE SKIP LOCKED: while another transaction locks it the row comes back `deferred`
-- and nothing is written (the worker tries again).
WITH matched AS (
    SELECT id
    FROM jobs
    WHERE id = %(id)s
        AND status = 'in_progress'
        AND claim_token = %(claim_token)s
),
locked AS MATERIALIZED (
    SELECT id
    FROM jobs
    WHERE id = %(id)s
        AND status = 'in_progress'
        AND claim_token = %(claim_token)s
    FOR NO KEY UPDATE SKIP LOCKED
),
retried AS (
    UPDATE jobs
    SET
        status = 'pending',
        claim_token = NULL,
        lease_expires_at = NULL,
        available_at = clock_timestamp() + make_interval(secs => %(delay_s)s),
        failure_kind = 'retryable',
        last_error = %(error)s
    FROM locked
    WHERE jobs.id = locked.id
    RETURNING jobs.id, jobs.attempt_count, jobs.claimed_by, jobs.claimed_at, jobs.last_error
),
attempt AS (
    INSERT INTO job_attempts (
        job_id, claim_token, attempt, worker_id, started_at, outcome, error
    )
    SELECT id, %(claim_token)s, attempt_count, claimed_by, claimed_at, 'retryable', last_error
    FROM retried
)
SELECT id, false AS deferred FROM retried
UNION ALL
SELECT id, true FROM matched WHERE NOT EXISTS (SELECT 1 FROM locked)
