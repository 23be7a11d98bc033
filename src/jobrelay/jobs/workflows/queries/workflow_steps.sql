-- A page of a workflow's steps by name (after the cursor), each with its state: `held`
-- (waiting for dependencies), `skipped`, or its job's status; its dependencies by name,
-- attempts, result and error. The page is taken first from the (workflow_id, name) index,
-- then only its steps' jobs and edges are read, through primary keys (`= ANY` of arrays
-- built first, so no estimate plans a scan per step): the cost follows the page, not the
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
page_edges AS MATERIALIZED (
    SELECT edge.upstream_id, edge.downstream_id
    FROM workflow_edges AS edge
    WHERE edge.downstream_id = ANY(ARRAY(SELECT job_id FROM page))
),
upstream_names AS MATERIALIZED (
    SELECT upstream.job_id, upstream.name
    FROM workflow_steps AS upstream
    WHERE upstream.job_id = ANY(ARRAY(SELECT DISTINCT upstream_id FROM page_edges))
),
dependencies AS (
    SELECT
        page_edges.downstream_id AS job_id,
        array_agg(upstream_names.name ORDER BY upstream_names.name) AS after
    FROM page_edges
    JOIN upstream_names ON upstream_names.job_id = page_edges.upstream_id
    GROUP BY page_edges.downstream_id
),
page_jobs AS MATERIALIZED (
    SELECT job.id, job.status, job.available_at, job.type, job.attempt_count, job.result,
        job.last_error, job.finished_at
    FROM all_jobs AS job
    WHERE job.id = ANY(ARRAY(SELECT job_id FROM page))
        AND job.workflow_id = %(id)s
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
JOIN page_jobs AS job ON job.id = page.job_id
LEFT JOIN dependencies ON dependencies.job_id = page.job_id
ORDER BY page.name
