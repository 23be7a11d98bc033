-- Fail the unserved jobs `unserved_jobs` found (their parents locked first by the caller),
-- permanently: still pending and not locked by a claim racing it (or by anyone: the DELETE
-- would wait even for a FOR KEY SHARE); a worker that gained the handler meanwhile may have
-- claimed one, which is then left alone. They leave `jobs` for
-- `finished_jobs` in the same statement.
WITH doomed AS MATERIALIZED (
    SELECT id
    FROM jobs
    WHERE id = ANY(%(ids)s::uuid[]) AND status = 'pending'
    FOR UPDATE SKIP LOCKED
),
failed AS (
    DELETE FROM jobs
    USING doomed
    WHERE jobs.id = doomed.id
    RETURNING jobs AS job
),
archived AS (
    INSERT INTO finished_jobs
    SELECT finished.*
    FROM failed
    CROSS JOIN LATERAL jobrelay_finished_job_v1(
        failed.job,
        jsonb_build_object(
            'status', 'failed',
            'failure_kind', 'permanent',
            'last_error',
                'unknown job type ' || quote_literal((failed.job).type) || ': ' || %(reason)s
        )
    ) AS finished
)
SELECT (job).id, (job).parent_id, (job).workflow_id FROM failed
