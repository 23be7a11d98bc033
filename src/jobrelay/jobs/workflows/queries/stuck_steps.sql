-- The repair of the worker's maintenance loop: held steps never released although none of
-- their dependencies is active any more (a dependency ended by a path that does not count
-- endings: a rescue, a cancel, an old release). A pass examines at most %(scan)s steps
-- after the cursor %(after)s, in id order, so its cost is bounded whatever the number of
-- held steps; the caller moves the cursor on (and back to the start at the end). The
-- counters of those found are set from the ended dependencies (read from `finished_jobs`),
-- locked first and skipped when another transaction holds them; release_ready.sql then
-- releases or ends them. Returns the steps found and the last id examined.
WITH examined AS MATERIALIZED (
    SELECT step.job_id
    FROM workflow_steps AS step
    WHERE %(after)s::uuid IS NULL OR step.job_id > %(after)s::uuid
    ORDER BY step.job_id
    LIMIT %(scan)s
),
held AS (
    SELECT examined.job_id
    FROM examined
    JOIN jobs ON jobs.id = examined.job_id
    WHERE jobs.status = 'pending'
        AND jobs.available_at = '9999-12-31 00:00:00+00'::timestamptz
        AND NOT EXISTS (
            SELECT 1
            FROM workflow_edges AS edge
            JOIN jobs AS upstream ON upstream.id = edge.upstream_id
            WHERE edge.downstream_id = examined.job_id
        )
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
),
repaired AS (
    UPDATE workflow_steps AS step
    SET dependencies_left = 0, dependencies_failed = coalesce(tally.failed, 0)
    FROM locked
    LEFT JOIN tally ON tally.id = locked.job_id
    WHERE step.job_id = locked.job_id
    RETURNING step.job_id
)
SELECT
    ARRAY(SELECT job_id FROM repaired) AS stuck,
    (SELECT job_id FROM examined ORDER BY job_id DESC LIMIT 1) AS last_examined,
    (SELECT count(*) FROM examined) AS examined
