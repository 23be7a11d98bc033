-- The repair of the worker's maintenance loop: held steps never released although none of
-- their dependencies is active any more (a dependency ended by a path that does not count
-- endings: a rescue, a cancel, an old release). Their counters are set from the ended
-- dependencies (read from `finished_jobs`), locked first and skipped when another
-- transaction holds them; release_ready.sql then releases or ends them.
WITH held AS (
    SELECT step.job_id
    FROM workflow_steps AS step
    JOIN jobs ON jobs.id = step.job_id
    WHERE jobs.status = 'pending'
        AND jobs.available_at = '9999-12-31 00:00:00+00'::timestamptz
        AND jobs.workflow_id IS NOT NULL
        AND NOT EXISTS (
            SELECT 1
            FROM workflow_edges AS edge
            JOIN jobs AS upstream ON upstream.id = edge.upstream_id
            WHERE edge.downstream_id = step.job_id
        )
    ORDER BY step.job_id
    LIMIT %(limit)s
),
locked AS MATERIALIZED (
    SELECT step.job_id
    FROM workflow_steps AS step
    WHERE step.job_id IN (SELECT job_id FROM held)
    ORDER BY step.job_id
    FOR NO KEY UPDATE SKIP LOCKED
),
tally AS (
    SELECT
        edge.downstream_id AS id,
        count(*) FILTER (
            WHERE NOT (upstream.status = 'completed' OR coalesce(up_step.skipped, false))
        ) AS failed
    FROM workflow_edges AS edge
    JOIN finished_jobs AS upstream ON upstream.id = edge.upstream_id
    LEFT JOIN workflow_steps AS up_step ON up_step.job_id = edge.upstream_id
    WHERE edge.downstream_id IN (SELECT job_id FROM locked)
    GROUP BY edge.downstream_id
)
UPDATE workflow_steps AS step
SET dependencies_left = 0, dependencies_failed = coalesce(tally.failed, 0)
FROM locked
LEFT JOIN tally ON tally.id = locked.job_id
WHERE step.job_id = locked.job_id
RETURNING step.job_id AS id
