-- Cancelling a parent cancels its active children in the same transaction (running ones
-- lose their claim; their workers notice at the next heartbeat or write, and their attempts
-- go into job_attempts in the same statement).
WITH target AS MATERIALIZED (
    SELECT id, status, claim_token
    FROM jobs
    WHERE parent_id = %(id)s
        AND status IN ('pending', 'in_progress')
    FOR NO KEY UPDATE
),
cancelled AS (
    UPDATE jobs
    SET
        status = 'cancelled',
        claim_token = NULL,
        lease_expires_at = NULL,
        failure_kind = 'cancelled',
        finished_at = clock_timestamp()
    FROM target
    WHERE jobs.id = target.id
        AND jobs.status IN ('pending', 'in_progress')
    RETURNING jobs.id, jobs.attempt_count, jobs.claimed_by, jobs.claimed_at
),
attempt AS (
    INSERT INTO job_attempts (
        job_id, claim_token, attempt, worker_id, started_at, outcome, error
    )
    SELECT
        cancelled.id, target.claim_token, cancelled.attempt_count, cancelled.claimed_by,
        cancelled.claimed_at, 'cancelled', 'parent cancelled while running'
    FROM cancelled
    JOIN target ON target.id = cancelled.id
    WHERE target.status = 'in_progress'
)
SELECT id FROM cancelled
