-- End steps that will not run because a dependency did not complete: policy `cancel` ends
-- the step cancelled, policy `skip` ends it cancelled and marked skipped (its own
-- dependents count a skipped step as ended well). Either leaves `jobs` for `finished_jobs`
-- as any ending does; a step no longer pending (cancelled meanwhile) is left alone.
-- Returns the steps ended, for their own dependents to be counted (count_endings.sql).
WITH doomed AS (
    SELECT *
    FROM unnest(%(ids)s::uuid[], %(skip)s::boolean[]) AS doomed (id, skip)
),
ended AS (
    DELETE FROM jobs
    USING doomed
    WHERE jobs.id = doomed.id
        AND jobs.status = 'pending'
    RETURNING jobs AS job, doomed.skip
),
marked AS (
    UPDATE workflow_steps AS step
    SET skipped = ended.skip
    FROM ended
    WHERE step.job_id = (ended.job).id
),
archived AS (
    INSERT INTO finished_jobs
    SELECT finished.*
    FROM ended
    CROSS JOIN LATERAL jobrelay_finished_job_v1(
        ended.job,
        jsonb_build_object(
            'status', 'cancelled',
            'failure_kind', 'cancelled',
            'last_error', CASE
                WHEN ended.skip THEN 'skipped: a dependency did not complete'
                ELSE 'cancelled: a dependency did not complete'
            END
        )
    ) AS finished
)
SELECT (ended.job).id, ended.skip
FROM ended
