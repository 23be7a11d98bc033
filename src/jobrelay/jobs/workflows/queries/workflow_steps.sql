-- A page of a workflow's steps by name (after the cursor), each with its state: `held`
-- (waiting for dependencies), `skipped`, or its job's status; its dependencies by name,
-- attempts, result and error. The jobs are found through the workflow_id indexes of
-- `jobs` and `finished_jobs`, not one by one.
SELECT
    step.name,
    step.job_id,
    step.on_dependency_failure,
    step.dependencies_left,
    step.releases,
    CASE
        WHEN step.skipped THEN 'skipped'
        WHEN job.status = 'pending'
            AND job.available_at = '9999-12-31 00:00:00+00'::timestamptz THEN 'held'
        ELSE job.status
    END AS state,
    job.type,
    job.attempt_count,
    job.result,
    job.last_error,
    job.finished_at,
    coalesce(
        (
            SELECT array_agg(upstream.name ORDER BY upstream.name)
            FROM workflow_edges AS edge
            JOIN workflow_steps AS upstream ON upstream.job_id = edge.upstream_id
            WHERE edge.downstream_id = step.job_id
        ),
        '{}'
    ) AS after
FROM workflow_steps AS step
JOIN all_jobs AS job ON job.id = step.job_id
WHERE step.workflow_id = %(id)s
    AND job.workflow_id = %(id)s
    AND (%(after)s::text IS NULL OR step.name > %(after)s::text)
ORDER BY step.name
LIMIT %(limit)s
