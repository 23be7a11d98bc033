-- A workflow's steps counted by state (the states of workflow_steps.sql), with the last
-- finishing time of each: the counts and end time of a read, without reading every step.
SELECT state, count(*) AS steps, max(finished_at) AS last_finished_at
FROM (
    SELECT
        CASE
            WHEN step.skipped THEN 'skipped'
            WHEN job.status = 'pending'
                AND job.available_at = '9999-12-31 00:00:00+00'::timestamptz THEN 'held'
            ELSE job.status
        END AS state,
        job.finished_at
    FROM workflow_steps AS step
    JOIN all_jobs AS job ON job.id = step.job_id
    WHERE step.workflow_id = %(id)s
        AND job.workflow_id = %(id)s
) AS states
GROUP BY state
