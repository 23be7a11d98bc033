-- A new workflow's steps (their jobs are inserted first, in the same transaction) and its
-- edges, upstream -> downstream. A step's counter starts at its number of dependencies.
WITH steps AS (
    INSERT INTO workflow_steps (
        job_id, workflow_id, name, on_dependency_failure, dependencies_left
    )
    SELECT job_id, %(workflow_id)s, name, policy, dependencies
    FROM unnest(
        %(job_ids)s::uuid[], %(names)s::text[], %(policies)s::text[], %(dependencies)s::int[]
    ) AS step (job_id, name, policy, dependencies)
    RETURNING job_id
)
INSERT INTO workflow_edges (upstream_id, downstream_id)
SELECT upstream_id, downstream_id
FROM unnest(%(upstream_ids)s::uuid[], %(downstream_ids)s::uuid[])
    AS edge (upstream_id, downstream_id)
-- The edges name steps inserted by this statement's CTE: make PostgreSQL run it first.
WHERE (SELECT count(*) FROM steps) > 0
