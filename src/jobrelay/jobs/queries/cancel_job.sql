-- Cancel an active job. A running job loses its claim: the worker's next heartbeat or
-- completion finds no row and stops the handler. The job leaves `jobs` for `finished_jobs`
-- and, when it was running, its attempt goes into job_attempts, in the same statement.
WITH cancelled AS (
    DELETE FROM jobs
    WHERE id = %(id)s
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
    RETURNING finished_jobs.*
),
attempt AS (
    INSERT INTO job_attempts (
        job_id, claim_token, attempt, worker_id, started_at, outcome, error
    )
    SELECT
        (job).id, (job).claim_token, (job).attempt_count, (job).claimed_by, (job).claimed_at,
        'cancelled', 'cancelled while running'
    FROM cancelled
    WHERE (job).status = 'in_progress'
)
SELECT * FROM archived
