-- A terminal failure (permanent, or attempts used up). CAS on id + status + claim_token;
-- no row returned means the lease is lost. The job leaves `jobs` for `finished_jobs` and
-- the ended attempt goes into job_attempts in the same statement (the job row keeps only
-- the last error).
WITH failed AS (
    DELETE FROM jobs
    WHERE id = %(id)s
        AND status = 'in_progress'
        AND claim_token = %(claim_token)s
    RETURNING jobs AS job
),
archived AS (
    INSERT INTO finished_jobs
    SELECT finished.*
    FROM failed
    CROSS JOIN LATERAL jobrelay_finished_job_v1(
        failed.job,
        jsonb_build_object(
            'status', 'failed', 'failure_kind', %(failure_kind)s::text,
            'last_error', %(error)s::text
        )
    ) AS finished
),
attempt AS (
    INSERT INTO job_attempts (
        job_id, claim_token, attempt, worker_id, started_at, outcome, error
    )
    SELECT
        (job).id, %(claim_token)s, (job).attempt_count, (job).claimed_by, (job).claimed_at,
        %(failure_kind)s, %(error)s
    FROM failed
)
SELECT (job).id FROM failed
