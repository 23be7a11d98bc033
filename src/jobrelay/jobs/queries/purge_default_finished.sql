-- Finished jobs past their purge day that went to finished_jobs_default (their day had no
-- partition when they finished): deleted a batch at a time, with their attempt history.
-- Jobs kept forever (no purge day) stay.
WITH doomed AS (
    DELETE FROM finished_jobs_default
    WHERE id IN (
        SELECT id
        FROM finished_jobs_default
        WHERE purge_on < (clock_timestamp() AT TIME ZONE 'UTC')::date
        ORDER BY purge_on
        LIMIT %(limit)s
    )
    RETURNING id
),
attempts AS (
    DELETE FROM job_attempts
    USING doomed
    WHERE job_attempts.job_id = doomed.id
)
SELECT count(*) AS jobs FROM doomed
