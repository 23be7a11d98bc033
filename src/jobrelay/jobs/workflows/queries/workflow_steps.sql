-- A page of a workflow's steps by name (after the cursor), each with its state: `held`
-- (waiting for dependencies), `skipped`, or its job's status; its dependencies by name,
-- attempts, result and error. The page is taken first from the (workflow_id, name) index,
-- then only its steps' jobs and edges are read: the cost follows the page, not the
-- workflow's size.
WITH page AS MATERIALIZED (
    SELECT
        step.job_id,
        step.name,
        step.on_dependency_failure,
        step.dependencies_left,
        step.releases,
        step.skipped
    FROM workflow_steps AS step
    WHERE step.workflow_id = %(id)s
        AND (%(after)s::text IS NULL OR step.name > %(after)s::text)
    ORDER BY step.name
    LIMIT %(limit)s
),
dependencies AS (
    SELECT edge.downstream_id AS job_id, array_agg(upstream.name ORDER BY upstream.name) AS after
    FROM page
    JOIN workflow_edges AS edge ON edge.downstream_id = page.job_id
    JOIN workflow_steps AS upstream ON upstream.job_id = edge.upstream_id
    GROUP BY edge.downstream_id
)
SELECT
    page.name,
    page.job_id,
    page.on_dependency_failure,
    page.dependencies_left,
    page.releases,
    CASE
        WHEN page.skipped THEN 'skipped'
        WHEN job.status = 'pending'
            AND job.available_at = '9999-12-31 00:00:00+00'::timestamptz THEN 'held'
        ELSE job.status
    END AS state,
    job.type,
    job.attempt_count,
    job.result,
    job.last_error,
    job.finished_at,
    coalesce(dependencies.after, '{}') AS after
FROM page
JOIN all_jobs AS job ON job.id = page.job_id AND job.workflow_id = %(id)s
LEFT JOIN dependencies ON dependencies.job_id = page.job_id
ORDER BY page.name
