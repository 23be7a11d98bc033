-- A workflow's steps counted by state (the states of workflow_steps.sql), with the last
-- finishing time of each: the counts and end time of a read, without reading every step's
-- row twice. Each branch reads one table through its workflow_id index, and a cancelled
-- step is told from a skipped one by a primary-key probe, so no estimate (a table just
-- truncated, a big workflow just inserted) can plan a join that scans per step.
SELECT state, count(*) AS steps, max(finished_at) AS last_finished_at
FROM (
    SELECT
        CASE
            WHEN active.status = 'pending'
                AND active.available_at = '9999-12-31 00:00:00+00'::timestamptz THEN 'held'
            ELSE active.status
        END AS state,
        NULL::timestamptz AS finished_at
    FROM jobs AS active
    WHERE active.workflow_id = %(id)s
    UNION ALL
    SELECT
        CASE
            WHEN ended.status = 'cancelled' AND EXISTS (
                SELECT 1 FROM workflow_steps AS step WHERE step.job_id = ended.id AND step.skipped
            ) THEN 'skipped'
            ELSE ended.status
        END,
        ended.finished_at
    FROM finished_jobs AS ended
    WHERE ended.workflow_id = %(id)s
) AS states
GROUP BY state
