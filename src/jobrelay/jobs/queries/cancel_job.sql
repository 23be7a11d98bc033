-- Cancel an active job. A running job loses its claim: the worker's next heartbeat or
-- completion finds no row and stops the handler; its attempt goes into job_attempts in the
-- same statement (the row is locked first, so the status and token read are the ones
-- replaced).
WITH target AS MATERIALIZED (
    SELECT id, status, claim_token
    FROM jobs
    WHERE id = %(id)s
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
    RETURNING jobs.*
),
attempt AS (
    INSERT INTO job_attempts (
        job_id, claim_token, attempt, worker_id, started_at, outcome, error
    )
    SELECT
        cancelled.id, target.claim_token, cancelled.attempt_count, cancelled.claimed_by,
        cancelled.claimed_at, 'cancelled', 'cancelled while running'
    FROM cancelled
    JOIN target ON target.id = cancelled.id
    WHERE target.status = 'in_progress'
)
SELECT * FROM cancelled
