-- A terminal failure (permanent, or attempts used up). CAS on id + status + claim_token;
-- no row returned means the lease is lost. The ended attempt goes into job_attempts in the
-- same statement (the job row keeps only the last error).
WITH failed AS (
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
    RETURNING id, attempt_count, claimed_by, claimed_at, failure_kind, last_error
),
attempt AS (
    INSERT INTO job_attempts (
        job_id, claim_token, attempt, worker_id, started_at, outcome, error
    )
    SELECT id, %(claim_token)s, attempt_count, claimed_by, claimed_at, failure_kind, last_error
    FROM failed
)
SELECT id FROM failed
