-- Steps whose dependencies have all ended: a step whose dependencies all completed (or
-- were skipped), or whose policy is `run`, is released (available now instead of at
-- 9999-12-31, counted in its audit `releases`, listening workers woken); the others are
-- returned with their policy, to be ended without running (end_unrun_steps.sql). Only a
-- step still held is released, so a release happens once.
WITH ready AS (
    SELECT step.job_id, step.on_dependency_failure, step.dependencies_failed
    FROM workflow_steps AS step
    WHERE step.job_id = ANY(%(ids)s::uuid[])
        AND step.dependencies_left = 0
),
released AS (
    UPDATE jobs
    SET available_at = clock_timestamp(), updated_at = clock_timestamp()
    FROM ready
    WHERE jobs.id = ready.job_id
        AND jobs.status = 'pending'
        AND jobs.available_at = '9999-12-31 00:00:00+00'::timestamptz
        AND (ready.dependencies_failed = 0 OR ready.on_dependency_failure = 'run')
    RETURNING jobs.id
),
audited AS (
    UPDATE workflow_steps AS step
    SET releases = step.releases + 1
    FROM released
    WHERE step.job_id = released.id
    RETURNING step.job_id
)
SELECT
    ready.job_id AS id,
    ready.on_dependency_failure AS policy,
    audited.job_id IS NOT NULL AS released,
    CASE WHEN audited.job_id IS NOT NULL THEN pg_notify('jobrelay_jobs', '') IS NULL END
        AS woken
FROM ready
LEFT JOIN audited ON audited.job_id = ready.job_id
