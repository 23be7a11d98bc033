-- End the active steps of cancelled workflows as cancelled: held and pending steps at once,
-- running ones too (their worker's next heartbeat or completion finds no row and stops the
-- handler: the claim token fences a late completion off), their attempt recorded in
-- job_attempts, as cancel_job.sql does for one job. Rows another transaction locks (a step
-- being completed or released right now) are skipped, not waited for: the caller sweeps
-- again, so a cancel never deadlocks with a completion that releases its dependents.
-- Returns how many steps it ended and how many are left in `jobs`.
WITH target AS (
    SELECT id
    FROM jobs
    WHERE workflow_id = ANY(%(workflow_ids)s::uuid[])
        AND status IN ('pending', 'in_progress')
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
cancelled AS (
    DELETE FROM jobs
    USING target
    WHERE jobs.id = target.id
    RETURNING jobs AS job
),
archived AS (
    INSERT INTO finished_jobs
    SELECT finished.*
    FROM cancelled
    CROSS JOIN LATERAL jobrelay_finished_job_v1(
        cancelled.job,
        jsonb_build_object(
            'status', 'cancelled',
            'failure_kind', 'cancelled',
            'last_error', 'cancelled: the workflow was cancelled'
        )
    ) AS finished
),
attempt AS (
    INSERT INTO job_attempts (
        job_id, claim_token, attempt, worker_id, started_at, outcome, error
    )
    SELECT
        (job).id, (job).claim_token, (job).attempt_count, (job).claimed_by, (job).claimed_at,
        'cancelled', 'cancelled while running: the workflow was cancelled'
    FROM cancelled
    WHERE (job).status = 'in_progress'
)
SELECT
    (SELECT count(*) FROM cancelled) AS cancelled,
    (
        SELECT count(*)
        FROM jobs
        WHERE workflow_id = ANY(%(workflow_ids)s::uuid[])
    ) - (SELECT count(*) FROM cancelled) AS left_active
