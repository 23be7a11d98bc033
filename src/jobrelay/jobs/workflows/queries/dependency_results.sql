-- What a step's handler reads of its dependencies (JobContext.dependency_results): each
-- one's step name, status, result and error, from `jobs` or `finished_jobs` (a step's
-- finished row is kept while its workflow exists).
SELECT
    step.name,
    CASE WHEN step.skipped THEN 'skipped' ELSE upstream.status END AS status,
    upstream.result,
    upstream.last_error
FROM workflow_edges AS edge
JOIN workflow_steps AS step ON step.job_id = edge.upstream_id
JOIN all_jobs AS upstream ON upstream.id = edge.upstream_id
WHERE edge.downstream_id = %(id)s
ORDER BY step.name
