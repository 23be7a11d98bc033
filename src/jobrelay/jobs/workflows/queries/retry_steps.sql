-- Retry an ended workflow: its failed, cancelled and skipped steps and every step
-- downstream of them (a `run` step that completed after a failed dependency included) go
-- back from `finished_jobs` into `jobs` with fresh attempts and no result; completed steps
-- upstream of them stay as they are, results kept. A revived step waits for its revived
-- dependencies only (held at 9999-12-31 with that many left) and is available at once
-- when it has none. Run with the workflow row locked (lock_workflow.sql).
WITH RECURSIVE rerun (job_id) AS (
    SELECT step.job_id
    FROM workflow_steps AS step
    JOIN finished_jobs AS step_job
        ON step_job.id = step.job_id AND step_job.workflow_id = %(id)s
    WHERE step.workflow_id = %(id)s
        AND (step_job.status IN ('failed', 'cancelled') OR step.skipped)
    UNION
    SELECT edge.downstream_id
    FROM workflow_edges AS edge
    JOIN rerun ON edge.upstream_id = rerun.job_id
),
waiting AS (
    SELECT rerun.job_id, count(edge.upstream_id) AS dependencies_left
    FROM rerun
    LEFT JOIN workflow_edges AS edge
        ON edge.downstream_id = rerun.job_id
        AND edge.upstream_id IN (SELECT job_id FROM rerun)
    GROUP BY rerun.job_id
),
revived AS (
    DELETE FROM finished_jobs
    USING waiting
    WHERE finished_jobs.workflow_id = %(id)s
        AND finished_jobs.id = waiting.job_id
    RETURNING finished_jobs AS job, waiting.dependencies_left
),
reinserted AS (
    INSERT INTO jobs
    SELECT pending.*
    FROM revived
    CROSS JOIN LATERAL jsonb_populate_record(
        NULL::jobs,
        to_jsonb(revived.job) || jsonb_build_object(
            'status', 'pending',
            'attempt_count', 0,
            'result', NULL,
            'claim_token', NULL,
            'lease_expires_at', NULL,
            'available_at', CASE
                WHEN revived.dependencies_left = 0 THEN clock_timestamp()
                ELSE '9999-12-31 00:00:00+00'::timestamptz
            END,
            'updated_at', clock_timestamp(),
            'finished_at', NULL
        )
    ) AS pending
    RETURNING jobs.id
),
reset AS (
    UPDATE workflow_steps AS step
    SET dependencies_left = waiting.dependencies_left,
        dependencies_failed = 0,
        skipped = false
    FROM waiting
    WHERE step.job_id = waiting.job_id
),
marked AS (
    UPDATE workflows
    SET retried_at = clock_timestamp(),
        retried_by = %(actor)s,
        retries = retries + 1,
        cancelled_at = NULL,
        cancelled_by = NULL
    WHERE id = %(id)s
        AND EXISTS (SELECT 1 FROM reinserted)
)
SELECT
    count(*) AS revived,
    CASE WHEN count(*) > 0 THEN pg_notify('jobrelay_jobs', '') IS NULL END AS woken
FROM reinserted
