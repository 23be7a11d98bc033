-- Count ended steps into their dependents: each dependent's counter of dependencies not
-- ended goes down by the number of its dependencies that ended here (O(1) per ending
-- dependency, whatever the fan-in: no recount of the other dependencies), and those that
-- did not end well (failed, cancelled; `ok` false) are counted too. Returns the dependents
-- whose last dependency this was: release_ready.sql decides what happens to them.
-- The dependents are reached through the primary key (`= ANY` of an array built first):
-- a join on the estimate of an unnest would plan a scan of every step.
WITH ended AS (
    SELECT *
    FROM unnest(%(ids)s::uuid[], %(ok)s::boolean[]) AS ended (id, ok)
),
hits AS MATERIALIZED (
    SELECT
        edge.downstream_id AS id,
        count(*) AS ended,
        count(*) FILTER (WHERE NOT ended.ok) AS failed
    FROM ended
    JOIN workflow_edges AS edge ON edge.upstream_id = ended.id
    GROUP BY edge.downstream_id
)
UPDATE workflow_steps AS step
SET dependencies_left = step.dependencies_left - hits.ended,
    dependencies_failed = step.dependencies_failed + hits.failed
FROM hits
WHERE step.job_id = ANY(ARRAY(SELECT id FROM hits))
    AND step.job_id = hits.id
RETURNING step.job_id AS id, step.dependencies_left = 0 AS ready
