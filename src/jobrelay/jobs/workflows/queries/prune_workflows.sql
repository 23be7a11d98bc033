-- Retention of workflows: delete those with no active step whose steps all finished more
-- than %(kept)s ago (and that were created before that), oldest first, with their steps'
-- finished rows and attempt history; their workflow_steps and workflow_edges go with them
-- (ON DELETE CASCADE). A step's finished row has no purge day of its own (migration 0020):
-- it goes here, with its workflow, never before.
WITH due AS (
    SELECT workflow.id
    FROM workflows AS workflow
    WHERE workflow.created_at < clock_timestamp() - %(kept)s::interval
        AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.workflow_id = workflow.id)
        AND NOT EXISTS (
            SELECT 1
            FROM finished_jobs AS step_job
            WHERE step_job.workflow_id = workflow.id
                AND step_job.finished_at >= clock_timestamp() - %(kept)s::interval
        )
    ORDER BY workflow.created_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
finished_gone AS (
    DELETE FROM finished_jobs
    USING due
    WHERE finished_jobs.workflow_id = due.id
),
attempts_gone AS (
    DELETE FROM job_attempts
    USING workflow_steps AS step, due
    WHERE step.workflow_id = due.id
        AND job_attempts.job_id = step.job_id
),
pruned AS (
    DELETE FROM workflows
    USING due
    WHERE workflows.id = due.id
    RETURNING workflows.id
)
SELECT count(*) AS pruned FROM pruned
