-- Reclaim running jobs whose lease expired (database time): back to pending while attempts
-- are left (the next claim issues a new token), else failed with lease_expired (leaving
-- `jobs` for `finished_jobs`). Rows are taken FOR UPDATE SKIP LOCKED: rows being
-- heartbeated right now, and rows any other transaction locks (even FOR KEY SHARE, which
-- the DELETE of an exhausted job would wait for), are skipped until a later pass; the lease
-- is re-checked on the locked row.
-- Children are rescued only when their parent was locked first (%(locked_parents)s, see
-- lock_expired_parents). Jobs back to pending wake listening workers (payload 'behind', see
-- jobs/floors.py). Each ended attempt
-- (with the token it held) goes into job_attempts in the same statement. A rescued job keeps
-- its place in the queue (its available_at, at most now): its worker died, the job did not
-- fail, so it does not go behind everything enqueued since.
WITH expired AS MATERIALIZED (
    SELECT id, claim_token, attempt_count < max_attempts AS retry
    FROM jobs
    WHERE status = 'in_progress'
        AND lease_expires_at < clock_timestamp()
        AND (parent_id IS NULL OR parent_id = ANY(%(locked_parents)s::uuid[]))
    ORDER BY lease_expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
rescued AS (
    UPDATE jobs
    SET
        status = 'pending',
        claim_token = NULL,
        lease_expires_at = NULL,
        available_at = least(jobs.available_at, clock_timestamp()),
        failure_kind = 'lease_expired',
        last_error = 'lease expired (claimed by ' || coalesce(jobs.claimed_by, 'unknown') || ')'
    FROM expired
    WHERE jobs.id = expired.id AND expired.retry
    RETURNING jobs.id, jobs.status, jobs.parent_id, expired.claim_token, jobs.attempt_count,
        jobs.claimed_by, jobs.claimed_at, jobs.last_error, jobs.workflow_id
),
exhausted AS (
    DELETE FROM jobs
    USING expired
    WHERE jobs.id = expired.id AND NOT expired.retry
    RETURNING jobs AS job,
        'lease expired (claimed by ' || coalesce(jobs.claimed_by, 'unknown') || ')' AS error
),
failed AS (
    INSERT INTO finished_jobs
    SELECT finished.*
    FROM exhausted
    CROSS JOIN LATERAL jobrelay_finished_job_v1(
        exhausted.job,
        jsonb_build_object(
            'status', 'failed', 'failure_kind', 'lease_expired', 'last_error', exhausted.error
        )
    ) AS finished
),
ended AS (
    SELECT * FROM rescued
    UNION ALL
    SELECT
        (job).id, 'failed', (job).parent_id, (job).claim_token, (job).attempt_count,
        (job).claimed_by, (job).claimed_at, error, (job).workflow_id
    FROM exhausted
),
attempt AS (
    INSERT INTO job_attempts (
        job_id, claim_token, attempt, worker_id, started_at, outcome, error
    )
    SELECT id, claim_token, attempt_count, claimed_by, claimed_at, 'lease_expired', last_error
    FROM ended
)
SELECT ended.id, ended.status, ended.parent_id, ended.workflow_id, wake.sent
FROM ended
LEFT JOIN LATERAL (
    SELECT pg_notify('jobrelay_jobs', 'behind') IS NULL AS sent
    WHERE ended.status = 'pending'
) AS wake ON true
