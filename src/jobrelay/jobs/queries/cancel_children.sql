-- Cancelling a parent cancels its active children in the same transaction (running ones
-- lose their claim; their workers notice at the next heartbeat or write). They leave `jobs`
-- for `finished_jobs` and the attempts of running ones go into job_attempts in the same
-- statement.
WITH cancelled AS (
    DELETE FROM jobs
    WHERE parent_id = %(id)s
        AND status IN ('pending', 'in_progress')
    RETURNING jobs AS job
),
archived AS (
    INSERT INTO finished_jobs
    SELECT finished.*
    FROM cancelled
    CROSS JOIN LATERAL jobrelay_finished_job_v1(
        cancelled.job, '{"status": "cancelled", "failure_kind": "cancelled"}'
    ) AS finished
),
attempt AS (
    INSERT INTO job_attempts (
        job_id, claim_token, attempt, worker_id, started_at, outcome, error
    )
    SELECT
        (job).id, (job).claim_token, (job).attempt_count, (job).claimed_by, (job).claimed_at,
        'cancelled', 'parent cancelled while running'
    FROM cancelled
    WHERE (job).status = 'in_progress'
)
SELECT (job).id FROM cancelled
